#!/usr/bin/env bash
# Issue 47's Target 4 figure without the profiler: Step 1 at RoBERTa-base shapes, length 512, micro-batch 256, bf16,
# ZeRO-1, FusedAdam (torch's AdamW on a CPU), with and without DeepSpeed's gradient overflow check, eager and --compile (the rows the
# `profile` part of gpu-run timed under torch.profiler). For a lease's last minutes, after scripts/gpu_prepare.py:
#     device run: bash scripts/experiments/gpu_mfu_rows.sh   carry [".gpu"]   (about 3 minutes)
# Each row's JSON line (bench's) goes to $OUT/mfu_rows.jsonl, the whole output to $OUT/mfu_rows.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu_mfu}; mkdir -p "$OUT"
source scripts/gpu_env.sh
WORK=${WORK:-/tmp/ds_minimodel_mfu}; mkdir -p "$WORK"
for check in true false; do
  "$PY" - "$WORK/ds_$check.json" "$check" "${MICRO:-256}" <<'PY'
import json, sys
json.dump({"train_batch_size": int(sys.argv[3]), "train_micro_batch_size_per_gpu": int(sys.argv[3]), "steps_per_print": 1_000_000,
           "bf16": {"enabled": True, "check_grad_overflow": sys.argv[2] == "true"},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.98], "eps": 1e-6,
                                                     "weight_decay": 0.01, "torch_adam": not __import__("torch").cuda.is_available()}},
           "zero_optimization": {"stage": 1}}, open(sys.argv[1], "w"))
PY
done
row() {  # label, overflow check, extra arguments
  local label=$1 check=$2; shift 2
  echo "### $label" | tee -a "$OUT/mfu_rows.log"
  timeout 150 "$PY" -m ds_minimodel bench one-stage step1 --preset ${PRESET:-base} --vocab ${VOCAB:-50000} --seq-len ${SEQ:-512} \
    --micro-batch ${MICRO:-256} --warmup 3 --updates ${UPDATES:-10} --ds-config "$WORK/ds_$check.json" "$@" 2>&1 \
    | tee -a "$OUT/mfu_rows.log" | grep '^{' | "$PY" -c "import json,sys; [print(json.dumps({'label': '$label', **json.loads(l)})) for l in sys.stdin]" \
    >> "$OUT/mfu_rows.jsonl"
}
row "bf16, with overflow check (the default)" true
row "bf16, no overflow check" false
row "bf16 --compile, no overflow check" false --compile
"$PY" -c "
import json
for l in open('$OUT/mfu_rows.jsonl'):
    r = json.loads(l); print(r['label'], r.get('median_s'), r.get('achieved_tflops'), r.get('tokens_per_s'))"

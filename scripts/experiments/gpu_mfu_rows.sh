#!/usr/bin/env bash
# Issue 47's Target 4 figure without the profiler: Step 1 at RoBERTa-base shapes, length 512, micro-batch 256, bf16,
# ZeRO-1, FusedAdam (torch's AdamW on a CPU), with and without DeepSpeed's gradient overflow check, eager and --compile,
# with and without --qkv-views (the rows the `profile` part of gpu-run times under torch.profiler, and the two
# levers together). For a lease's last minutes, after scripts/gpu_prepare.py:
#     device run: bash scripts/experiments/gpu_mfu_rows.sh   carry [".gpu"]   (the first three rows: about 3 minutes)
# On a CPU at a size of seconds: PRESET=tiny VOCAB=1000 SEQ=64 MICRO=2 UPDATES=2 NO_COMPILE=1 \
#     PYTHON=.venv/bin/python bash scripts/experiments/gpu_mfu_rows.sh
# Each row's JSON line (bench's) goes to $OUT/mfu_rows.jsonl, the whole output to $OUT/mfu_rows.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu_mfu}; mkdir -p "$OUT"
source scripts/gpu_env.sh
WORK=${WORK:-/tmp/ds_minimodel_mfu}; mkdir -p "$WORK"
# The bench's own DeepSpeed JSONs (tools.gpu_common.ds_config: ZeRO-1, bf16, FusedAdam on a GPU; bench sets the batch).
"$PY" - "$WORK" <<'PY'
import sys
from pathlib import Path
from types import SimpleNamespace
import torch
from ds_minimodel.tools.gpu_common import ds_config
run = SimpleNamespace(work=Path(sys.argv[1]), cuda=torch.cuda.is_available())
ds_config(run, "true")
ds_config(run, "false", overflow_check=False)
PY
row() {  # label, overflow check, extra arguments
  local label=$1 check=$2; shift 2
  echo "### $label" | tee -a "$OUT/mfu_rows.log"
  if [[ " $* " == *" --compile "* && -n ${NO_COMPILE:-} ]]; then
    echo "skipped: NO_COMPILE" | tee -a "$OUT/mfu_rows.log"; return
  fi
  timeout 150 "$PY" -m ds_minimodel bench one-stage step1 --preset ${PRESET:-base} --vocab ${VOCAB:-50000} --seq-len ${SEQ:-512} \
    --micro-batch ${MICRO:-256} --warmup 3 --updates ${UPDATES:-10} --ds-config "$WORK/ds_$check.json" "$@" 2>&1 \
    | tee -a "$OUT/mfu_rows.log" | grep '^{' | "$PY" -c "import json,sys; [print(json.dumps({'label': '$label', **json.loads(l)})) for l in sys.stdin]" \
    >> "$OUT/mfu_rows.jsonl"
}
row "bf16, with overflow check (the default)" true
row "bf16, no overflow check" false
row "bf16 --qkv-views, no overflow check" false --qkv-views
row "bf16 --compile, no overflow check" false --compile
row "bf16 --compile --qkv-views, no overflow check" false --compile --qkv-views
"$PY" -c "
import json
for l in open('$OUT/mfu_rows.jsonl'):
    r = json.loads(l); print(r['label'], r.get('median_s'), r.get('achieved_tflops'), r.get('tokens_per_s'))"

#!/usr/bin/env bash
# Dev-set diagnostics for the reference experiment (RESULTS.md, "Choosing the settings"): over one pretrained body,
# finetune the English classifier with each pooling, learn German embeddings (overlap init), relearn English ones
# from scratch (specials init) and, as the upper bound, from the body's own rows (overlap init with its own
# tokenizer) with Step 2, and score every Step-2 checkpoint on the dev sets. Test sets are not read.
#
#   BODY=runs/reference/step1/base/checkpoints/step_00001000 OUT=runs/reference-dev/step1000 \
#       bash scripts/experiments/reference_dev.sh
#
# One thread per process: the finetuning runs beside the English relearn run, then German beside the English upper
# bound. Finished parts are skipped when run again. Output: $OUT/dev_scores.jsonl, one JSON record per (model,
# embeddings, dev file).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${BODY:?set BODY to a Step-1 checkpoint}" "${OUT:?set OUT to an output folder}"
STEP2_STEPS=${STEP2_STEPS:-400} STEP2_SAVE=${STEP2_SAVE:-100} POOLINGS=${POOLINGS:-"cls mean"}
FT_CONFIG=${FT_CONFIG:-ds_configs/cpu_bf16_finetune.json} EPOCHS=${EPOCHS:-2}
export PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=cpu OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
T=reference_data/tasks/lohelp
D=runs/reference/data
mkdir -p "$OUT"
done_run() { [ -f "$1/run.json" ] && ls "$1"/checkpoints/step_* >/dev/null 2>&1 && [ -f "$1/.finished" ]; }
train() {  # train DIR SCRIPT ARGS...: run once; resume an interrupted run
  local dir=$1; shift
  done_run "$dir" && return 0
  local resume=(); [ -f "$dir/run.json" ] && resume=(--resume)
  python "$@" --out "$dir" "${resume[@]}" && touch "$dir/.finished"
}
step2() {  # step2 LANG: Step 2 over the body, one rank
  local lang=$1 data=$D/en init=overlap
  case $lang in en-relearn) init=specials ;; en-overlap) ;; *) data=$D/$lang ;; esac
  train "$OUT/step2-$lang" run_adapt.py --system bl_base --body "$BODY" --data "$data" --lang "$lang" --init $init \
    --ds-config ds_configs/cpu_bf16_reference.json --seq-len 128 --steps "$STEP2_STEPS" --save-every "$STEP2_SAVE" \
    > "$OUT/step2-$lang.log" 2>&1
}
for pooling in $POOLINGS; do
  train "$OUT/ft-$pooling" run_finetune.py --model "$BODY" --task lohelp --format generic \
    --train $T/train.en.jsonl --ds-config "$FT_CONFIG" --epochs "$EPOCHS" --max-len 128 --pooling "$pooling" \
    --seed 1 > "$OUT/ft-$pooling.log" 2>&1 &
done
step2 en-relearn &
wait
step2 de & step2 en-overlap &
wait
scores="$OUT/dev_scores.jsonl"
: > "$scores"
for pooling in $POOLINGS; do
  model=$(ls -d "$OUT/ft-$pooling"/checkpoints/step_* | tail -1)
  python -m ds_minimodel evaluate --task-model "$model" --test $T/dev.en.jsonl --lang en >> "$scores"
  for lang in en-relearn en-overlap; do
    python -m ds_minimodel evaluate --task-model "$model" --embeddings "$OUT"/step2-$lang/checkpoints/step_* \
      --test $T/dev.en.jsonl --lang en >> "$scores"
  done
  python -m ds_minimodel evaluate --task-model "$model" --embeddings "$OUT"/step2-de/checkpoints/step_* \
    --test $T/dev.de.jsonl --lang de >> "$scores"
done
python - "$scores" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    pooling = "mean" if "/ft-mean/" in r["task_model"] else "cls"
    emb = r.get("embeddings", "own").split("/checkpoints/")[0].rsplit("/", 1)[-1]
    print(f"{pooling:<5} {r['lang']:<3} {emb:<17} update {str(r.get('step2_update', '-')):>5}: "
          f"accuracy {r['accuracy']:5.1f}  macro-F1 {r['macro_f1']:5.1f}")
PY

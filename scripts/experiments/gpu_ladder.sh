#!/usr/bin/env bash
# Issue 27's ladder (scripts/experiments/init_ladder.sh) on a lent GPU, for bodies too large to score on the CPU in one session:
# for each body in .gpu/bodies (scripts/gpu_prepare.py --body NAME=FOLDER), the English classifier (Step 3), each
# language's Step-2 embeddings for every variant, scored on dev (Step 4) and by the alignment probe; the bodies side
# by side, JOBS processes each. What comes back: $OUT/ladder-NAME.tar.gz (logs, metrics, scores, the probe, the
# table; no checkpoints).
#
#   bash scripts/experiments/gpu_ladder.sh          # the GPU machine: carry .gpu and runs/reference/data/{de,fr,es}
#   LANGS=de STEP2_STEPS=4 STEP2_SAVE=2 EPOCHS=0.01 bash scripts/experiments/gpu_ladder.sh     # a size of seconds, on a CPU
#
# LIMIT (seconds, default 300): ladders still going then are stopped, and what finished is packed.
# WECHSEL variants (scripts/experiments/init_ladder.sh) need the word lists and the English text prepared with the bodies'
# tokenizer: carry reference_data/dictionaries (python scripts/make_dictionaries.py) and that folder, and set
# EN_DATA=<folder> VARIANTS="... wechsel=--init,wechsel,--word-list,reference_data/dictionaries/{lang}-en.tsv,
# --source-data,{en}" (one word, no spaces; checked on a CPU at a size of seconds with the reference body).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
OUT=${OUT:-runs/gpu_ladder} WORK=${WORK:-/tmp/ds_minimodel_ladder} LIMIT=${LIMIT:-300}
export LANGS=${LANGS:-"de fr es"} VARIANTS=${VARIANTS:-"overlap=--init,overlap"} JOBS=${JOBS:-4} PYTHON=$PY
export DS_ACCELERATOR=${DS_ACCELERATOR:-$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")}
bodies=(.gpu/bodies/*/)
[ -d "${bodies[0]}" ] || { echo "gpu_ladder.sh: no bodies in .gpu/bodies (scripts/gpu_prepare.py --body)" >&2; exit 1; }
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
for body in "${bodies[@]}"; do
  name=$(basename "$body")
  OUT=$WORK/$name BODY=${body%/} timeout -s TERM "$LIMIT" bash scripts/experiments/init_ladder.sh > "$WORK/$name.out" 2>&1 &
done
wait
status=0
for body in "${bodies[@]}"; do
  name=$(basename "$body")
  tail -n 20 "$WORK/$name.out" | sed "s/^/[$name] /"
  grep -q "^English dev" "$WORK/$name.out" || status=1
  tar czf "$OUT/ladder-$name.tar.gz" -C "$WORK" --exclude=checkpoints --exclude=tensorboard "$name.out" "$name"
done
exit $status

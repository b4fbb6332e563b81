#!/usr/bin/env bash
# Issue 45's lever on test: configs/reference_minilm_continued.json (all-MiniLM-L6-v2 continued with MLM as a whole,
# head.train_body, 1,000 updates; then BL_BASE and MiniPost with FOCUS rows, German, French and Spanish, three
# finetuning seeds, test read once). It reuses what scripts/experiments/minilm_continued_dev.sh trained with the same
# settings (linked, as the pipeline's --list then shows them done): the continuation, BL_BASE's Step 2 in the three
# languages and the English classifier of seed 1; it trains the rest: MiniPost's mini-model over the continued model,
# its Step 2, the classifiers of seeds 2 and 3 and the mini-model's, and Step 4 on test.
#
#   bash scripts/experiments/minilm_continued_dev.sh      # first (about 3.5 hours)
#   bash scripts/experiments/minilm_continued_test.sh     # then this (about 3.5 hours more; resumes when run again)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEV=${DEV:-runs/minilm-continued-dev/continued} PY=${PYTHON:-.venv/bin/python}
CONFIG=configs/reference_minilm_continued.json OUT=runs/reference-minilm-continued
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions} PATH="$PWD/.venv/bin:$PATH"
for part in data step1 step2/de/bl_base step2/fr/bl_base step2/es/bl_base step3/lohelp/base/seed1; do
  [ -e "$DEV/$part" ] || { echo "minilm_continued_test.sh: $DEV/$part is missing: run" \
                               "scripts/experiments/minilm_continued_dev.sh first" >&2; exit 2; }
done
mkdir -p "$OUT"
"$PY" -m ds_minimodel.pipeline.ownership "$OUT" "$CONFIG"
for part in data step1 step2/de/bl_base step2/fr/bl_base step2/es/bl_base step3/lohelp/base/seed1; do
  mkdir -p "$(dirname "$OUT/$part")"
  [ -e "$OUT/$part" ] || ln -s "$(realpath "$DEV/$part")" "$OUT/$part"
done
"$PY" -m ds_minimodel pipeline --config "$CONFIG" "$@"

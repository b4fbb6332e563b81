#!/usr/bin/env bash
# The reference experiment with WECHSEL over the help-page lexicons (configs/reference_wechsel.json) over the FOCUS
# reference run's Step 1, Step 1b and Step 3 (configs/reference_focus.json, runs/reference-focus): the two configs
# differ only in Step 2, so this run links those steps and its data in and trains Step 2 and scores Step 4 itself.
# The pipeline skips a linked step only if it was trained with the settings this config asks.
# The real-model runs (issue 45): FOCUS=runs/reference-minilm-focus OUT=runs/reference-minilm-wechsel
# CONFIG=configs/reference_minilm_wechsel.json bash scripts/reference_wechsel.sh (after scripts/reference_minilm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
FOCUS=${FOCUS:-runs/reference-focus}
OUT=${OUT:-runs/reference-wechsel}
for step in data step1 step1b step3; do
  if [ ! -d "$FOCUS/$step" ]; then
    echo "reference_wechsel.sh: $FOCUS/$step is missing: run CONFIG=configs/reference_focus.json bash" \
         "scripts/reference.sh first (Steps 1-3 at least)" >&2
    exit 2
  fi
done
CONFIG=${CONFIG:-configs/reference_wechsel.json}
# The out folder is claimed for this pipeline first, as the pipeline claims it: new, empty or a pipeline's only.
.venv/bin/python -m ds_minimodel.pipeline.ownership "$OUT" "$CONFIG"
for step in data step1 step1b step3; do
  [ -e "$OUT/$step" ] || ln -s "$(realpath "$FOCUS/$step")" "$OUT/$step"
done
CONFIG=$CONFIG exec bash scripts/reference.sh "$@"

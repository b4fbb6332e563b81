#!/usr/bin/env bash
# Issue 27's initialisers on dev, over the reference runs' own BL_BASE body and read by their own three BL_BASE
# classifiers: FOCUS (no bilingual resource: runs/reference-focus's Step 2), WECHSEL over the help-page lexicons
# (in-domain parallel text: runs/reference-wechsel's Step 2) and WECHSEL over FreeDict (a general dictionary: the
# one Step-2 run per language trained here, with the same settings), every Step-2 checkpoint on each language's dev
# file, the anchored English relearn control (runs/reference-focus's en-relearn run) on English dev, and the
# alignment probe. Test files are not read. Needs Steps 1-3 of the FOCUS run and BL_BASE's Step 2 of both runs:
#
#   python -m ds_minimodel pipeline --config configs/reference_focus.json --only step3-base   (and step2-bl_base)
#   bash scripts/reference_wechsel.sh --only step2-bl_base
#   bash scripts/experiments/reference_dev_inits.sh       # then: python scripts/experiments/ladder_table.py runs/reference-dev-inits
set -euo pipefail
cd "$(dirname "$0")/../.."
FOCUS=${FOCUS:-runs/reference-focus} WECHSEL=${WECHSEL:-runs/reference-wechsel}
OUT=${OUT:-runs/reference-dev-inits} DICTS=${DICTS:-reference_data/dictionaries}
VENV=${VENV:-$PWD/.venv} PY=${PYTHON:-$VENV/bin/python}
finished() {  # finished RUN_DIR: the pipeline's own test of a finished run
  "$PY" -c "import sys; from pathlib import Path; from ds_minimodel.pipeline.launching import finished
sys.exit(0 if finished(Path(sys.argv[1])) else 1)" "$1"
}
link() {  # link NAME RUN_DIR: a finished run of a reference run, taken into the ladder's folder as done
  finished "$2" || { echo "reference_dev_inits.sh: $2 is not a finished run (see the commands above)" >&2; exit 2; }
  [ -e "$OUT/$1" ] || ln -s "$(realpath "$2")" "$OUT/$1"
  touch "$OUT/$1/.finished"
}
mkdir -p "$OUT"
for seed in 1 2 3; do link ft-seed$seed "$FOCUS/step3/lohelp/base/seed$seed"; done
for lang in de fr es; do
  link step2-$lang-focus "$FOCUS/step2/$lang/bl_base"
  link step2-$lang-wechsel-help "$WECHSEL/step2/$lang/bl_base"
done
link step2-en-anchored-focus "$FOCUS/step2/en-relearn/bl_base"
[ -f "$DICTS/de-en.tsv" ] && [ -f "$DICTS/fr-en.tsv" ] && [ -f "$DICTS/es-en.tsv" ] ||
  "$PY" scripts/make_dictionaries.py --out "$DICTS"
BODY=$("$PY" -c "import sys; from pathlib import Path; from ds_minimodel.train.checkpoint import latest_checkpoint
print(latest_checkpoint(Path(sys.argv[1])))" "$FOCUS/step1/base")
# The settings of the reference configs' Step 2 (600 updates, a checkpoint every 100, the same DeepSpeed JSON).
export BODY OUT VENV LANGS="de fr es" SEEDS="1 2 3" DATA=$FOCUS/data EN_DATA=$FOCUS/data/en
export STEP2_STEPS=600 STEP2_SAVE=100 STEP2_CONFIG=ds_configs/cpu_bf16_reference.json JOBS=${JOBS:-2}
export VARIANTS="focus=--init,focus
wechsel-help=--init,wechsel,--word-list,reference_data/lexicons/{lang}-en.help.tsv,--source-data,{en}
wechsel-freedict=--init,wechsel,--word-list,$DICTS/{lang}-en.tsv,--source-data,{en}"
exec bash scripts/experiments/init_ladder.sh

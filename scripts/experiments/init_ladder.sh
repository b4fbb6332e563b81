#!/usr/bin/env bash
# The ladder of Step-2 levers on the dev sets (issue 27, RESULTS.md "Initialisers on dev"): over one pretrained body,
# finetune the English classifier (Step 3) once per seed, learn each target language's embeddings with every
# initialiser variant (Step 2), and score every Step-2 checkpoint of every variant on that language's dev file
# (Step 4), and with the alignment probe (ds-minimodel align, no labels). Test files are not read.
#
#   BODY=runs/gpu_stop33/body/model OUT=runs/ladder LANGS="de" bash scripts/experiments/init_ladder.sh
#
# With EN_DATA (English prepared with the body's tokenizer), every variant also relearns English with only the rows
# the first language's initialisation would copy (--shared-with its tokenizer), scored on English dev: the anchored
# source-relearn control (not for WECHSEL variants: it would align English with itself). A variant is NAME=OPTIONS
# (run_adapt.py options, commas for spaces; {lang} stands for the language and {en} for EN_DATA, as WECHSEL's
# options need: wechsel=--init,wechsel,--word-list,reference_data/dictionaries/{lang}-en.tsv,--source-data,{en},
# with the lists of scripts/make_dictionaries.py). JOBS processes at a
# time (default 2), one thread each; DS_ACCELERATOR=cuda and PYTHON for a GPU machine (scripts/experiments/gpu_ladder.sh).
# Finished runs are skipped when run again, an interrupted one resumes. Output: $OUT/dev_scores.jsonl (one record
# per classifier, variant, checkpoint), $OUT/align.jsonl and the table this prints.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${BODY:?set BODY to a Step-1 checkpoint or model folder}" "${OUT:?set OUT to an output folder}"
LANGS=${LANGS:-"de"} SEEDS=${SEEDS-"1"} DATA=${DATA:-runs/reference/data}
STEP2_STEPS=${STEP2_STEPS:-600} STEP2_SAVE=${STEP2_SAVE:-100}
STEP2_CONFIG=${STEP2_CONFIG:-ds_configs/cpu_bf16_reference.json}
FT_CONFIG=${FT_CONFIG:-ds_configs/cpu_bf16_finetune.json} EPOCHS=${EPOCHS:-3}
VARIANTS=${VARIANTS:-"overlap=--init,overlap overlap-anchored=--init,overlap,--freeze-copied focus=--init,focus
focus-anchored=--init,focus,--freeze-copied focus-srcrows=--init,focus,--new-rows,source"}
VENV=${VENV:-$PWD/.venv}  # a worktree of a fixed commit may use another checkout's environment
export PATH="$VENV/bin:$PATH" DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$VENV/torch_extensions}
PY=${PYTHON:-python} JOBS=${JOBS:-2}
"$PY" scripts/unpack_reference_data.py
T=reference_data/tasks/lohelp
mkdir -p "$OUT"
done_run() { [ -f "$1/.finished" ]; }
train() {  # train DIR SCRIPT ARGS...: run once; resume an interrupted run
  local dir=$1; shift
  done_run "$dir" && return 0
  local resume=(); [ -f "$dir/run.json" ] && resume=(--resume)
  "$PY" "$@" --out "$dir" "${resume[@]}" > "$dir.log" 2>&1 && touch "$dir/.finished"
}
run_all() {  # run_all JOB...: every job (a command line), JOBS at a time
  local job
  for job in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    eval "${job//$'\n'/ }" &
  done
  wait
}
jobs_list=()
for seed in $SEEDS; do
  jobs_list+=("train $OUT/ft-seed$seed run_finetune.py --model $BODY --task lohelp --format generic
    --train $T/train.en.jsonl --ds-config $FT_CONFIG --epochs $EPOCHS --max-len 128 --pooling cls --seed $seed")
done
options_for() {  # options_for VARIANT_OPTIONS LANG: commas to spaces, {lang} and {en} filled in
  local options=${1//\{lang\}/$2}
  options=${options//\{en\}/${EN_DATA:-}}
  echo "${options//,/ }"
}
for lang in $LANGS; do
  for variant in $VARIANTS; do
    name=${variant%%=*}
    jobs_list+=("train $OUT/step2-$lang-$name run_adapt.py --system bl_base --body $BODY --data $DATA/$lang
      --lang $lang --ds-config $STEP2_CONFIG --seq-len 128 --steps $STEP2_STEPS --save-every $STEP2_SAVE
      $(options_for "${variant#*=}" "$lang")")
  done
done
ANCHOR=${LANGS%% *}
variants_of() {  # variants_of LANG: the variants run for LANG (en-anchored: all but WECHSEL's)
  local variant
  for variant in $VARIANTS; do [[ $1 == en-anchored && $variant == *wechsel* ]] || echo "$variant"; done
}
if [ -n "${EN_DATA:-}" ]; then  # the anchored source-relearn control: English with German's copied rows only
  for variant in $(variants_of en-anchored); do
    name=${variant%%=*} options=${variant#*=}
    jobs_list+=("train $OUT/step2-en-anchored-$name run_adapt.py --system bl_base --body $BODY --data $EN_DATA
      --lang en --shared-with $DATA/$ANCHOR/spm.model --ds-config $STEP2_CONFIG --seq-len 128 --steps $STEP2_STEPS
      --save-every $STEP2_SAVE ${options//,/ }")
  done
fi
run_all "${jobs_list[@]}"
missing=$(for job in "${jobs_list[@]}"; do set -- $job; [ -f "$2/.finished" ] || echo "$2"; done)
if [ -n "$missing" ]; then
  echo "init_ladder.sh: not finished (see each one's .log beside it):" $missing >&2
  exit 1
fi
[ -n "$SEEDS" ] || exit 0  # Step 2 only (SEEDS=""): score later, with the classifiers
scoring=()  # one record file per classifier and variant, then joined in order; the probe needs no classifier
for seed in $SEEDS; do
  model=$(ls -d "$OUT/ft-seed$seed"/checkpoints/step_* | tail -1)
  scoring+=("\"$PY\" -m ds_minimodel evaluate --task-model $model --test $T/dev.en.jsonl --lang en
    > $OUT/en-seed$seed.json")
  for lang in $LANGS ${EN_DATA:+en-anchored}; do
    for variant in $(variants_of "$lang"); do
      name=${variant%%=*}
      scoring+=("\"$PY\" -m ds_minimodel evaluate --task-model $model --embeddings $OUT/step2-$lang-$name/checkpoints/step_*
        --test $T/dev.${lang%-anchored}.jsonl --lang ${lang%-anchored} > $OUT/scores-seed$seed-$lang-$name.part")
    done
  done
done
for lang in $LANGS; do
  scoring+=("\"$PY\" -m ds_minimodel align --model $BODY --source $T/dev.en.jsonl --target $T/dev.$lang.jsonl
    --embeddings $(for variant in $VARIANTS; do echo "$OUT/step2-$lang-${variant%%=*}/checkpoints/step_*"; done)
    > $OUT/align-$lang.part")
done
run_all "${scoring[@]}"
join_parts() {  # join_parts FILE PART...: the parts in order into FILE; a missing or empty part is a failed job
  local file=$1 part; shift
  for part in "$@"; do [ -s "$part" ] || { echo "init_ladder.sh: no scores in $part (its job failed)" >&2; exit 1; }; done
  cat "$@" > "$file"
}
join_parts "$OUT/dev_scores.jsonl" $(for seed in $SEEDS; do for lang in $LANGS ${EN_DATA:+en-anchored}; do
  for variant in $(variants_of "$lang"); do echo "$OUT/scores-seed$seed-$lang-${variant%%=*}.part"; done; done; done)
join_parts "$OUT/align.jsonl" $(for lang in $LANGS; do echo "$OUT/align-$lang.part"; done)
"$PY" scripts/experiments/ladder_table.py "$OUT"

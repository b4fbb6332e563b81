#!/usr/bin/env bash
# Score the WECHSEL ladder with the FOCUS reference run's own BL_BASE classifiers (Step 3, seeds 1-3) and its own
# FOCUS Step-2 runs (step2/<lang>/bl_base), all over the same body; worktree /work/wt-wechsel.
set -euo pipefail
LANGS=${LANGS:-de}
R=/work/wt-ref/runs/reference-focus OUT=/work/main/runs/ladder-wechsel
for seed in ${SEEDS:-1 2 3}; do
  [ -e $OUT/ft-seed$seed ] || ln -s $R/step3/lohelp/base/seed$seed $OUT/ft-seed$seed
  touch $OUT/ft-seed$seed/.finished
done
for lang in $LANGS; do
  [ -e $OUT/step2-$lang-focus ] || ln -s $R/step2/$lang/bl_base $OUT/step2-$lang-focus
  touch $OUT/step2-$lang-focus/.finished
done
cd /work/wt-wechsel
export BODY=$R/step1/base/checkpoints/step_00003000 DATA=$R/data OUT LANGS SEEDS=${SEEDS:-"1 2 3"} JOBS=${JOBS:-2}
export STEP2_STEPS=600 STEP2_SAVE=100 VENV=/work/main/.venv
VARIANTS=${VARIANTS:-"focus=--init,focus wechsel-help=--init,wechsel,--word-list,reference_data/lexicons/{lang}-en.help.tsv,--source-data,{en}"} \
  bash scripts/experiments/init_ladder.sh

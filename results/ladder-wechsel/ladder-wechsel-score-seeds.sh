#!/usr/bin/env bash
# Seeds 2 and 3 of the WECHSEL ladder's scoring (the same evaluate commands init_ladder.sh runs, without the probe).
set -euo pipefail
cd /work/wt-wechsel
OUT=/work/main/runs/ladder-wechsel T=reference_data/tasks/lohelp PY=/work/main/.venv/bin/python
export OMP_NUM_THREADS=1
for seed in $SEEDS; do
  model=$(ls -d $OUT/ft-seed$seed/checkpoints/step_* | tail -1)
  $PY -m ds_minimodel evaluate --task-model $model --test $T/dev.en.jsonl --lang en > $OUT/en-seed$seed.json
  for lang in de fr es; do
    for variant in focus wechsel-help; do
      $PY -m ds_minimodel evaluate --task-model $model --embeddings $OUT/step2-$lang-$variant/checkpoints/step_* \
        --test $T/dev.$lang.jsonl --lang $lang > $OUT/scores-seed$seed-$lang-$variant.part
    done
  done
done

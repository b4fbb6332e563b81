#!/bin/bash
# The relearn control's run of 2026-12-02 (afternoon), in a worktree of fb5e6a6 with config.json as
# runs/minilm-long-dev.json: the continuation, the seed-1 classifier, then the control's Step 2, one job at a time, so
# that the classifier exists when the control's first checkpoints do; score_relearn.py (run beside it every time a
# checkpoint appeared) scores them. (It ran as two drivers, the second taking over after Step 1: the same jobs in this
# order.)
set -e
export PATH=/work/main/.venv/bin:$PATH
C=runs/minilm-long-dev.json
for job in prepare step1-base step3-base; do
  echo "== $job $(date -u +%FT%T)"
  python -m ds_minimodel pipeline --config $C --launcher torchrun --only $job
done
echo "== relearn $(date -u +%FT%T)"
python -m ds_minimodel pipeline --config $C --launcher torchrun --only step2-bl_base --lang en-relearn
echo "== done $(date -u +%FT%T)"

#!/bin/bash
# BL_BASE and MiniPost's 1,800-update Step 2 on test again, saved every 100 updates instead of 300, so that the time to
# 95% of BL_BASE's final score is read between checkpoints 100 updates apart (the all-systems run proved MiniPost's
# speedup in French only at 300). Same commit and settings; BL_BASE's classifiers linked; resumes when run again.
cd /work/wt-relearn
export PATH=/work/main/.venv/bin:$PATH
while pgrep -f "minilm-long-dev.json" >/dev/null; do sleep 60; done
echo "== start $(date -u +%FT%T) $(git rev-parse --short HEAD)"
R=runs/relearn-fine
if [ ! -d $R ]; then
  python -m ds_minimodel.pipeline.ownership $R runs/relearn-fine.json
  mkdir -p $R/{step1,step1b,step3/lohelp/base}
  ln -s /work/wt-depth/runs/reference/data $R/data
  ln -s /work/wt-depth/runs/reference/step1/base $R/step1/base
  ln -s /work/wt-fix/runs/step1b-minipost $R/step1b/minipost
  for s in 1 2 3; do ln -s $(realpath runs/relearn-long-test/step3/lohelp/base/seed$s) $R/step3/lohelp/base/seed$s; done
fi
python -m ds_minimodel pipeline --config runs/relearn-fine.json --launcher torchrun
echo "== done rc=$? $(date -u +%FT%T)"

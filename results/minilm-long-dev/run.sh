#!/bin/bash
# The continued all-MiniLM-L6-v2 with FOCUS rows, Step 2 at 1,800 updates (German) and the anchored English relearn
# control, scored on the dev files with classifier seed 1; resumes when run again.
cd /work/wt-minilm
export PATH=/work/main/.venv/bin:$PATH
while pgrep -f "relearn-long-all.json" >/dev/null; do sleep 30; done
echo "== start $(date -u +%FT%T) $(git rev-parse --short HEAD)"
python -m ds_minimodel.pipeline.ownership runs/minilm-long-dev runs/minilm-long-dev.json
python -m ds_minimodel pipeline --config runs/minilm-long-dev.json --launcher torchrun
echo "== done rc=$? $(date -u +%FT%T)"

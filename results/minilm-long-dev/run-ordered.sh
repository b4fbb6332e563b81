#!/bin/bash
# After German's Step 2, stop the pipeline (it saves), train the seed-1 classifier, score German (the config without
# the relearn control), then let the whole config go on (the control's Step 2, then its Step 4).
cd /work/wt-minilm
export PATH=/work/main/.venv/bin:$PATH
until ls runs/minilm-long-dev/specs/ | grep -q relearn; do sleep 20; done
echo "== relearn spec seen $(date -u +%FT%T); stopping the pipeline"
pkill -TERM -f "ds_minimodel pipeline --config runs/minilm-long-dev.json"
while pgrep -f "ds_minimodel pipeline --config runs/minilm-long-dev.json" >/dev/null; do sleep 5; done
while pgrep -f "run_jobs.py" >/dev/null; do sleep 5; done
echo "== step3 $(date -u +%FT%T)"
python -m ds_minimodel pipeline --config runs/minilm-long-dev.json --launcher torchrun --only step3-base
echo "== step3 rc=$? $(date -u +%FT%T)"
python -m ds_minimodel pipeline --config runs/minilm-long-dev-de.json --launcher torchrun
echo "== German scored rc=$? $(date -u +%FT%T)"
cp runs/minilm-long-dev/results.json runs/results-de-only.json
python -m ds_minimodel pipeline --config runs/minilm-long-dev.json --launcher torchrun
echo "== done rc=$? $(date -u +%FT%T)"

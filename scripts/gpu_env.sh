# Sourced by the lent GPU machine's scripts (gpu_run.sh, gpu_forgetting.sh, gpu_ladder.sh), from the repository root.
# That machine has no package registry: this installs the wheels scripts/gpu_prepare.py put in .gpu/wheels
# (DeepSpeed and what the image lacks) into a folder of its own, where DeepSpeed is missing, and puts the package
# on PYTHONPATH. Sets PY, the Python to run.
PY=${PYTHON:-python3}
if [ -d .gpu/wheels ] && ! "$PY" -c "import deepspeed" 2>/dev/null; then
  SITE=/tmp/ds_minimodel_site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .gpu/wheels/*.whl \
    || { echo "$(basename "$0"): could not install .gpu/wheels" >&2; exit 1; }
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

#!/usr/bin/env bash
# The lent GPU machine's one command (README, "Running on a GPU"); prepared here by scripts/gpu_prepare.py.
# It installs the wheels the preparation put in .gpu/wheels (scripts/gpu_env.sh), then runs `ds-minimodel gpu-run`,
# which writes its JSON, summary, log and archives into $OUT (the device tool's output folder; runs/gpu elsewhere).
# Extra arguments go to gpu-run, e.g. `bash scripts/gpu_run.sh --parts bench,reference --minutes 4` to rerun what
# failed (the device tool's $OUT is empty each call; an OUT holding an earlier run's results needs --replace).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
source scripts/gpu_env.sh
exec "$PY" -m ds_minimodel gpu-run --out "$OUT" --work "${GPU_RUN_WORK:-/tmp/ds_minimodel_gpu_work}" "$@"

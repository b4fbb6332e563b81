#!/usr/bin/env bash
# Install into .venv and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
# The Slurm test starts Debian's slurmctld and slurmd (tests/integration/test_slurm.py). As root on a Debian-like
# system without them, install them (about 10 s); anywhere else that test skips and says why.
# DS_MINIMODEL_NO_APT=1 leaves system packages alone.
if [ "$(id -u)" = 0 ] && [ -z "${DS_MINIMODEL_NO_APT:-}" ] && command -v apt-get >/dev/null \
   && ! command -v slurmctld >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null \
    || echo "scripts/test.sh: could not install slurm-wlm; the Slurm test will skip" >&2
fi
# DeepSpeed compiles its CPU communication op on first use; keep the build cache inside the checkout's venv so that
# runs after the first reuse it.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PATH="$PWD/.venv/bin:$PATH"
# Two pytest workers (pytest-xdist): the suite alone keeps 2 cores busy only 60% of the time (many of its runs are
# one process, or wait on a timer). Tests that share the demo pipeline, and the timing-bound cluster tests, each stay
# in one worker (xdist_group marks). DS_MINIMODEL_TEST_WORKERS=0 runs everything in this process.
# tests/cpu_report.py adds --cpu-report=FILE (where the CPU goes, test by test): a plugin named here, not in a
# conftest, since an xdist worker parses its options before it finds tests/conftest.py.
exec .venv/bin/python -m pytest -n "${DS_MINIMODEL_TEST_WORKERS:-2}" --dist loadgroup -p tests.cpu_report "$@"

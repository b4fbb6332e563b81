#!/usr/bin/env bash
# Install into .venv and run the reference experiment (configs/reference.json, RESULTS.md): the whole method on the
# shipped reference data (reference_data/, xz-compressed), English -> German, French, Spanish, on 2 CPU ranks.
# Several hours on a 2-core machine; run it again after an interruption and it resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/unpack_reference_data.py  # each shipped .xz beside itself, once
# The same installation and environment as the demo, with this config.
CONFIG=${CONFIG:-configs/reference.json} exec bash scripts/demo.sh "$@"

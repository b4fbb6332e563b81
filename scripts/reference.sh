#!/usr/bin/env bash
# Install into .venv and run the reference experiment (configs/reference.json, RESULTS.md): the whole method on the
# shipped reference data (reference_data/, xz-compressed), English -> German, French, Spanish, on 2 CPU ranks.
# Several hours on a 2-core machine; run it again after an interruption and it resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
# Unpack each shipped .xz beside itself, once (an interrupted unpack leaves no half file: it writes, then renames).
python3 - <<'PY'
import lzma, os, pathlib
for packed in sorted(pathlib.Path("reference_data").rglob("*.xz")):
    plain = packed.with_suffix("")
    if not plain.is_file():
        tmp = plain.with_name(f".{plain.name}.tmp")
        tmp.write_bytes(lzma.decompress(packed.read_bytes()))
        os.replace(tmp, plain)
PY
# The same installation and environment as the demo, with this config.
CONFIG=${CONFIG:-configs/reference.json} exec bash scripts/demo.sh

"""Unpack each shipped reference_data/**/*.xz beside itself, once (an interrupted unpack leaves no half file: it
writes, then renames). Run from the repository root; scripts/reference.sh and scripts/experiments/init_ladder.sh do."""
import lzma
import os
import pathlib

for packed in sorted(pathlib.Path("reference_data").rglob("*.xz")):
    plain = packed.with_suffix("")
    if not plain.is_file():
        tmp = plain.with_name(f".{plain.name}.tmp")
        tmp.write_bytes(lzma.decompress(packed.read_bytes()))
        os.replace(tmp, plain)

"""How long the GPU reference part's data preparation takes with the tokenizers that scripts/gpu_prepare.py trained
before the lease (.gpu/tokenizers) and without them: the pipeline's prepare step of the config gpu-run builds
(``tools.gpu_reference.reference_config``: the English of .gpu/data/en.txt.xz, German), each into a fresh work
folder, on this machine (BENCHMARKS.md, "Tokenizers trained before the lease").

    .venv/bin/python scripts/experiments/reference_prepare.py [--languages de] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from ds_minimodel.tools.gpu_common import GPU, REPO, GpuRunSpec
from ds_minimodel.tools.gpu_reference import reference_config, write_config


def timed_prepare(work: Path, tokenizers: Path | None, languages: tuple[str, ...]) -> dict[str, object]:
    english = REPO / ".gpu/data/en.txt.xz"
    spec = GpuRunSpec(out=work / "out", work=work, parts=("reference",), english=str(english),
                      tokenizers=tokenizers, languages=languages)
    config = reference_config(SimpleNamespace(spec=spec, sizes=GPU, work=work, cuda=False))
    path = work / "reference_gpu.json"
    write_config(path, config)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--only", "prepare"],
                   check=True, capture_output=True, cwd=REPO)
    return {"tokenizers": str(tokenizers) if tokenizers else None, "seconds": time.perf_counter() - started,
            "given": {c.lang: c.tokenizer for c in (config.source, *config.targets)}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--languages", default="de", help="the reference run's target languages (gpu-run's default: de)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    if not (REPO / ".gpu/tokenizers").is_dir() or not (REPO / ".gpu/data/en.txt.xz").is_file():
        raise SystemExit("reference_prepare: run scripts/gpu_prepare.py first (.gpu/tokenizers, .gpu/data/en.txt.xz)")
    rows = []
    for tokenizers in (REPO / ".gpu/tokenizers", None):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(timed_prepare(Path(tmp), tokenizers, tuple(args.languages.split(","))))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

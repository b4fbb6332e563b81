"""What the GPU reference part does with what scripts/gpu_prepare.py carries, checked on this CPU with gensim blocked
(the GPU machine has none): the config gpu-run builds (``tools.gpu_reference.reference_config``: the English of
.gpu/data/en.txt.xz, German, the tokenizers and static vectors of .gpu/tokenizers) with a tiny body and two updates
a stage, its data prepared, Step 1 and BL_BASE's German Step 2 run through the pipeline. Exits 1 unless that Step 2
started from FOCUS rows over the carried vectors. A check of the path, not a result.

    .venv/bin/python scripts/experiments/reference_carried_check.py [--work DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from ds_minimodel.tools.gpu_common import GPU, REPO, GpuRunSpec
from ds_minimodel.tools.gpu_reference import reference_config, step2_inits, write_config

JOBS = ("prepare", "step1-base", "step2-bl_base")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed after)")
    args = p.parse_args()
    if not (REPO / ".gpu/tokenizers/manifest.json").is_file() or not (REPO / ".gpu/data/en.txt.xz").is_file():
        raise SystemExit("reference_carried_check: run scripts/gpu_prepare.py first")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        blocked = work / "no-gensim" / "gensim"  # an import of gensim fails, as on the GPU machine
        blocked.mkdir(parents=True, exist_ok=True)
        (blocked / "__init__.py").write_text("raise ImportError('gensim is blocked: the GPU machine has none')\n")
        spec = GpuRunSpec(out=work / "out", work=work, parts=("reference",), english=str(REPO / ".gpu/data/en.txt.xz"),
                          tokenizers=REPO / ".gpu/tokenizers", languages=("de",), systems=("bl_base",))
        config = reference_config(SimpleNamespace(spec=spec, sizes=GPU, work=work, cuda=False))
        print(f"step2_init: {step2_inits(config)}", flush=True)

        def two(section: str) -> object:
            return dataclasses.replace(getattr(config, section), steps=2, save_every=2, log_every=1)

        config = dataclasses.replace(config, preset="tiny", step1=two("step1"), step2=two("step2"))
        path = work / "config.json"
        write_config(path, config)
        env = {**os.environ, "PYTHONPATH": str(blocked.parent)}
        for job in JOBS:
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--only",
                                   job], cwd=REPO, env=env, capture_output=True, text=True, check=False)
            print(f"{job}: exit {done.returncode}, {time.perf_counter() - started:.0f} s", flush=True)
            if done.returncode:
                print(done.stdout[-2000:] + done.stderr[-3000:])
                return 1
        first = min((Path(config.out) / "step2/de/bl_base/checkpoints").glob("step_*"))
        record = json.loads((first / "meta.json").read_text())["initialisation"]
        static = record.get("static_vectors") or {}
        print(json.dumps({k: record.get(k) for k in ("init", "copied", "mixed", "drawn", "word_anchored")}))
        print(json.dumps({k: static.get(k) for k in ("given", "data_sha256", "vectors_sha256", "gensim")}))
        kept = Path(config.out) / "data/de/.static_vectors"
        ok = record["init"] == "focus" and static.get("given") == str((REPO / ".gpu/tokenizers/de.npz").resolve())
        print("Step 2 started from the carried vectors" if ok and not kept.exists() else "NOT from the carried vectors")
        return 0 if ok and not kept.exists() else 1


if __name__ == "__main__":
    sys.exit(main())

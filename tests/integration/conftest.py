"""Fixtures for end-to-end tests: real entry scripts on the shipped demo text, tiny models, CPU ranks."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ds_minimodel.engine import free_port

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "demo_data"
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_SIZE", "CROSS_RANK",
              "CROSS_SIZE")


def run_cmd(cmd: list[str], *, timeout: float = 300, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run a command with a hard timeout (the usual multi-process failure is a hang, not an error)."""
    # An in-process test may have set this process's rank variables; child launches must not inherit them.
    inherited = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env = {**inherited, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(kwargs.pop("env", {}))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def deepspeed_cmd(num_ranks: int, script: str, *args: str) -> list[str]:
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or "deepspeed"
    return [launcher, "--num_gpus", str(num_ranks), "--master_port", str(free_port()), script, *args]


@pytest.fixture(scope="session")
def en_data(tmp_path_factory) -> Path:
    """The demo English corpus, tokenized (vocabulary 2,000) and sharded, once per session."""
    out = tmp_path_factory.mktemp("data") / "en"
    return prepare(DEMO / "corpus/en.txt", out)


def prepare(corpus: Path, out: Path, vocab_size: int = 2000) -> Path:
    run_cmd([sys.executable, "-m", "ds_minimodel.prepare", "--corpus", str(corpus), "--out", str(out),
             "--vocab-size", str(vocab_size), "--workers", "2", "--no-progress"])
    return out


@pytest.fixture(scope="session")
def de_data(tmp_path_factory) -> Path:
    """The demo German corpus with its own tokenizer."""
    return prepare(DEMO / "corpus/de.txt", tmp_path_factory.mktemp("data") / "de")


TINY_FP32 = ["--preset", "tiny", "--seq-len", "64", "--ds-config", "ds_configs/cpu_fp32.json"]


@pytest.fixture(scope="session")
def primaries(en_data, tmp_path_factory) -> dict[str, Path]:
    """Step 1 on 2 ranks: a normal 12-layer model, a MiniJoint model and a 4-layer BL_SMALL (tiny width)."""
    root = tmp_path_factory.mktemp("step1")
    runs = {}
    for variant, steps in (("base", 40), ("minijoint", 40), ("small", 40)):
        out = root / variant
        run_cmd(deepspeed_cmd(2, "run_pretrain.py", "--variant", variant, *TINY_FP32, "--data", str(en_data),
                              "--out", str(out), "--steps", str(steps), "--save-every", "20", "--log-every", "10"))
        runs[variant] = out / "checkpoints" / f"step_{steps:08d}"
    return runs

"""Fixtures for end-to-end tests: real entry scripts on the shipped demo text, tiny models, CPU ranks."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "demo_data"


def run_cmd(cmd: list[str], *, timeout: float = 300, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run a command with a hard timeout (the usual multi-process failure is a hang, not an error)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(kwargs.pop("env", {}))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def deepspeed_cmd(num_ranks: int, script: str, *args: str) -> list[str]:
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or "deepspeed"
    return [launcher, "--num_gpus", str(num_ranks), "--master_port", str(_free_port()), script, *args]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def en_data(tmp_path_factory) -> Path:
    """The demo English corpus, tokenized (vocabulary 2,000) and sharded, once per session."""
    out = tmp_path_factory.mktemp("data") / "en"
    run_cmd([sys.executable, "-m", "ds_minimodel.prepare", "--corpus", str(DEMO / "corpus/en.txt"),
             "--out", str(out), "--vocab-size", "2000", "--workers", "2"])
    return out

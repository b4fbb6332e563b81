"""One rule for stopping a run, whatever is signalled: SIGTERM to the pipeline (SIGINT and SIGHUP take the same path:
tests/unit/test_stopping.py), SIGTERM to one rank or to the job's ``deepspeed`` launcher, and the pipeline's own death
(SIGKILL). Every time the whole job saves at an update boundary and stops, no process of it is left, the pipeline
(where alive) exits non-zero naming the folder to resume, and the pipeline resumes to the end. The pipeline's Step 1
on 2 CPU ranks (tiny preset), launched by ``deepspeed`` as by default."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ds_minimodel.train import checkpoint
from tests.integration.conftest import RANK_VARS, REPO, run_cmd, tiny_pipeline, updates_logged

# Not in the "timing" group: nothing here waits on a tight timer, so it may run beside that group's tests.
pytestmark = pytest.mark.slow

STEPS = 120  # at two layers an update takes about a sixth of tiny's twelve: room for four stops before the end


def config(tmp_path: Path, en_data: Path, name: str) -> Path:
    return tiny_pipeline(tmp_path, name, {"en": en_data}, step1={"steps": STEPS, "save_every": 1000, "log_every": 1},
                         step2={"steps": 6, "save_every": 6})


def pipeline(path: Path) -> list[str]:
    return [sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--only", "step1-base"]


def start(path: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.Popen(pipeline(path), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def run_dir(path: Path) -> Path:
    return Path(json.loads(path.read_text())["out"]) / "step1" / "base"


def job_processes(proc: subprocess.Popen) -> tuple[psutil.Process, list[psutil.Process]]:
    """The job's launcher (the pipeline's child) and its ranks, by LOCAL_RANK."""
    children = psutil.Process(proc.pid).children(recursive=True)
    ranks = sorted((p for p in children if "LOCAL_RANK" in p.environ()), key=lambda p: p.environ()["LOCAL_RANK"])
    return children[0], ranks


def stop_once(path: Path, how: str, after: int) -> tuple[subprocess.Popen, str, list[psutil.Process], int]:
    """Start the pipeline, wait for update ``after``, stop it ``how``; returns the pipeline, its stderr (empty when
    it was killed), the job's processes and the step saved."""
    run = run_dir(path)
    proc = start(path)
    deadline = time.monotonic() + 240
    while updates_logged(run) < after:
        assert proc.poll() is None, f"the pipeline ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out waiting for training"
        time.sleep(0.01)
    launcher, ranks = job_processes(proc)
    assert len(ranks) == 2
    target = {"pipeline": proc, "launcher": launcher, "rank": ranks[1]}[how.split()[0]]
    target.send_signal(getattr(signal, how.split()[1]))
    stderr = ""
    if how != "pipeline SIGKILL":
        _, stderr = proc.communicate(timeout=180)
    else:
        proc.wait(timeout=30)
    processes = [launcher, *ranks]
    gone_by = time.monotonic() + 120  # within an update and a save, even with the pipeline gone
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes):
        assert time.monotonic() < gone_by, f"left running after {how}: {[p.pid for p in processes]}"
        time.sleep(0.1)
    step = checkpoint.load_meta(checkpoint.latest_checkpoint(run)).step
    assert after <= step < STEPS, (how, step)
    return proc, stderr, processes, step


def test_every_way_of_stopping_saves_the_whole_job_and_resumes(en_data, tmp_path):
    """That a resume from any checkpoint gives the weights of a run never stopped, bitwise, is test_pretrain.py's
    (2 ranks) and test_reliability.py's: here, that each way of stopping leaves such a checkpoint and nothing
    running, and that the pipeline then resumes to the end."""
    path = config(tmp_path, en_data, "stopped")
    run = run_dir(path)
    saved = 0
    for how, code, words in (
            ("pipeline SIGTERM", 128 + signal.SIGTERM, "stopped by SIGTERM"),
            ("rank SIGTERM", 75, "stopped before its last update"),
            ("launcher SIGTERM", 75, "launcher ended by SIGTERM"),
            ("pipeline SIGKILL", -signal.SIGKILL, "")):
        proc, stderr, _, step = stop_once(path, how, saved + 3)
        assert proc.returncode == code, (how, stderr[-3000:])
        if words:
            last = stderr.strip().splitlines()[-1]
            assert words in last and f"{run} saved at update {step:,} of {STEPS:,}" in last, (how, stderr[-3000:])
            assert "Traceback" not in stderr, (how, stderr[-3000:])
        log = (run.parent.parent / "logs" / "step1-base.log").read_text()
        reason = {"pipeline SIGKILL": "the pipeline that started it ended",
                  "launcher SIGTERM": "its launcher ended", "rank SIGTERM": "a peer's signal"}.get(how, "SIGTERM")
        assert f"{reason}: saved" in log.split("$ ")[-1], (how, log[-3000:])
        saved = step
    # A rank killed outright fails the job: the pipeline stops naming the job's script and its log, and no process
    # of the (shared) launch is left; the newest complete checkpoint stays.
    proc = start(path)
    while updates_logged(run) < saved + 3:
        assert proc.poll() is None, f"the pipeline ended early: {proc.communicate()}"
        time.sleep(0.01)
    launcher, ranks = job_processes(proc)
    ranks[1].send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1 and "pipeline: run_pretrain.py exited with" in stderr, stderr[-3000:]
    assert str(run.parent.parent / "logs" / "step1-base.log") in stderr.strip().splitlines()[-1]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in [launcher, *ranks])
    assert checkpoint.load_meta(checkpoint.latest_checkpoint(run)).step == saved
    run_cmd(pipeline(path), timeout=600)
    meta = checkpoint.load_meta(checkpoint.latest_checkpoint(run))
    assert meta.step == STEPS and meta.model_config["num_layers"] == 2  # the config's model fields (tiny_pipeline)
    assert all(checkpoint.verify(c) is None for c in checkpoint.complete_checkpoints(run))

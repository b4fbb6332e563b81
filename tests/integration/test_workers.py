"""The pipeline's shared launch (pipeline/workers.py, stages/worker.py): a plan's training jobs on 2 CPU ranks started
once train exactly what a launch per job trains, each job in its own run folder with its own log. Signals, a killed
rank and a stopped launcher in the shared launch: tests/integration/test_stopping.py."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from ds_minimodel.train import checkpoint
from tests.integration.conftest import REPO, run_cmd, tiny_pipeline

pytestmark = pytest.mark.slow


def plan(tmp_path: Path, en_data: Path, de_data: Path, name: str) -> Path:
    """Every path in it absolute: the pipelines run from a folder that is not the checkout, as a user's would."""
    ds = str(REPO / "ds_configs/cpu_fp32.json")
    return tiny_pipeline(tmp_path, name, {"en": en_data, "de": de_data},
                         step1={"steps": 12, "save_every": 12, "log_every": 4, "ds_config": ds},
                         step2={"steps": 6, "save_every": 6, "init": "overlap", "ds_config": ds})


def weights(out: Path, *steps: str) -> dict[str, str]:
    runs = {"step1": out / "step1" / "base", "step2": out / "step2" / "de" / "bl_base"}
    return {step: checkpoint.load_meta(checkpoint.latest_checkpoint(runs[step])).weights_sha256 for step in steps}


def test_jobs_sharing_one_launch_train_what_a_launch_per_job_trains(tmp_path, en_data, de_data):
    """A launch per job through torchrun, the shared launch's ranks forked (``--launcher fork``): the same weights.
    Both run from a folder that is not the checkout: each launch starts the checkout's scripts by path."""
    shared, each = plan(tmp_path, en_data, de_data, "shared"), plan(tmp_path, en_data, de_data, "each")
    shared.write_text(json.dumps({**json.loads(shared.read_text()), "step2_seeds": [2]}))  # and one further Step 2
    command = [sys.executable, "-m", "ds_minimodel", "pipeline", "--config"]
    proc = run_cmd([*command, str(each), "--launch-per-job", "--launcher", "torchrun"], timeout=600, cwd=tmp_path)
    assert "run_jobs.py" not in proc.stdout and proc.stdout.count(f"{REPO / 'run_pretrain.py'} --config") >= 1
    command += [str(shared), "--launcher", "fork"]
    proc = run_cmd(command, timeout=600, cwd=tmp_path)
    assert proc.stdout.count("ds_minimodel.stages.forkrun") == 1 and f"{REPO / 'run_jobs.py'} --queue" in proc.stdout
    out, other = (Path(json.loads(path.read_text())["out"]) for path in (shared, each))
    # Bitwise the same: the launch's second job starts from its own seed, as in a process of its own.
    assert weights(out, "step1", "step2") == weights(other, "step1", "step2")
    # It says how much of its time went into training updates (runs' summary.json, update_seconds).
    assert re.search(r"the shared launch ran 3 training jobs in \d+ s, \d+ s \(\d+%\) of it in updates", proc.stdout)
    log = (out / "logs" / "step2-de-bl_base.log").read_text()
    assert "run_jobs.py job 2" in log and "[step2-de-bl_base] finished at update 6 of 6" in log
    assert "[step1-base]" not in log  # each job's output in its own log
    # No task in the config: the run ends after Step 2, naming the embeddings it made (no Step 3 or 4).
    assert f"de bl_base: {checkpoint.latest_checkpoint(out / 'step2' / 'de' / 'bl_base')}" in proc.stdout
    further = checkpoint.latest_checkpoint(out / "step2-seed2" / "de" / "bl_base")
    assert f"de bl_base.step2-seed2: {further}" in proc.stdout
    assert "names no task" in proc.stdout and not (out / "step4").exists() and not (out / "results.json").exists()
    # Nothing left to train: no launch is started.
    proc = run_cmd(command, timeout=600, cwd=tmp_path)
    assert f"{out / 'step1' / 'base'}: done, skipped" in proc.stdout and "run_jobs.py" not in proc.stdout

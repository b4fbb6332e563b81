"""The shared launch's two halves without training: the ranks' loop (stages/worker.py) and the pipeline's side
(pipeline/workers.py). A job that fails ends the launch with its status, its error in its own log, and no later job
is taken; the stop mark ends an idle launch. Training jobs in a shared launch: tests/integration/test_workers.py."""
from __future__ import annotations

import json
import os
import threading
from types import SimpleNamespace

import torch.distributed as dist

from ds_minimodel.config import write_json
from ds_minimodel.pipeline.workers import Workers
from ds_minimodel.stages import cli, worker
from tests.integration.conftest import REPO


def test_a_failed_job_ends_the_ranks_loop_with_its_status_and_its_error_in_its_log(tmp_path, capsys):
    queue, log = tmp_path / "queue", tmp_path / "job.log"
    queue.mkdir()
    write_json(worker.job_file(queue, 1), {"entry": "run_adapt.py", "spec": str(tmp_path / "missing.json"),
                                                    "log": str(log)})
    write_json(worker.job_file(queue, 2), {"entry": "run_adapt.py", "spec": "never read", "log": str(log)})
    with capsys.disabled():  # the job's output goes to its log by file descriptor, as in a rank
        assert worker.serve(queue) == 2
    assert json.loads(worker.done_file(queue, 1).read_text()) == {"code": 2, "stopped_by": None}
    assert not worker.done_file(queue, 2).exists()  # the launch ended: the pipeline stops at the failed job
    assert f"error: {tmp_path / 'missing.json'}: file not found" in log.read_text()


def test_a_kept_group_checks_the_output_on_every_rank_before_any_rank_writes_it(tmp_path, monkeypatch):
    """In a shared launch no rendezvous starts a job: rank 0 went on to write the next job's run.json (through its
    temporary file) while rank 1 still checked that folder, and took the file for another run's."""
    events: list[str] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "barrier", lambda: events.append("barrier"))
    monkeypatch.setattr(cli, "require_output", lambda out, **kw: events.append(f"checked {out.name}"))
    monkeypatch.setattr(cli, "keep_process_group", True)

    def run(spec):
        events.append("ran")
        return {"stopped_by": None}

    assert cli.run_main(run, SimpleNamespace(out=tmp_path / "step2")) == 0
    assert events == ["checked step2", "barrier", "ran", "barrier"]


def test_an_idle_launch_ends_at_the_stop_mark(tmp_path):
    queue = tmp_path / "queue"
    queue.mkdir()
    threading.Timer(0.3, lambda: write_json(queue / worker.STOP, {})).start()
    assert worker.serve(queue) == 0


def test_the_pipeline_side_reports_a_failed_job_and_starts_a_new_launch_for_the_next(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the entry scripts are found from the repository, as the pipeline runs them
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with Workers(tmp_path / "out", 1, "torchrun", poll=0.05) as workers:
        assert Workers.active is workers
        log = tmp_path / "out" / "logs" / "step2.log"
        assert workers.run("run_adapt.py", bad, log) == 2
        assert workers.proc is None and "bad.json" in log.read_text()
        first = workers.queue
        assert workers.run("run_adapt.py", bad, log) == 2  # a fresh launch took it
        assert workers.queue != first and workers.launches == 2
    assert Workers.active is None


def test_srun_or_launch_per_job_leaves_every_job_its_own_launch(tmp_path):
    with Workers(tmp_path, 2, "srun"):
        assert Workers.active is None
    with Workers(tmp_path, 2, "deepspeed", off=True):
        assert Workers.active is None
    assert os.listdir(tmp_path) == []

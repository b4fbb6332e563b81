"""Many training jobs in one launch of the ranks: what ``run_jobs.py`` runs on every rank for the pipeline's shared
launch (``pipeline.workers``).

Starting a rank costs seconds on a CPU (Python, torch, DeepSpeed, the process group) and about 20 on a GPU node
(CUDA, NCCL besides); a plan has a dozen training jobs or more. Here the ranks start once and take the jobs in turn
from a queue folder that the pipeline writes (``job-0001.json``: the spec file, the stage's entry script and the
job's log), each run exactly as its own entry script runs it (``stages.cli.run_main``: the same checks, run folder,
run.json, resume, summary), with this process's output sent to the job's own log while it runs. After each job rank
0 writes ``job-0001.done.json`` (exit status and how the run ended). What ends the launch:

- the pipeline's ``stop`` mark (its plan is done, or it failed or stopped between jobs);
- a job that failed (its status, nonzero) or stopped before its last update (a signal, a peer's, the launcher's or
  the pipeline's end: ``train.faults``): its run saved, the launch exits as that job's own process would;
- while waiting for a job: SIGTERM, SIGINT or SIGHUP, or the end of the launcher or of the pipeline it watches.

A job's settings that are the process group's (``dist_timeout``) are the first job's.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ds_minimodel.config import write_json
from ds_minimodel.stages import adapt, cli, finetune, pretrain
from ds_minimodel.stages.specs import AdaptSpec, FinetuneSpec, HeadSpec, MiniPostSpec, PretrainSpec
from ds_minimodel.train.faults import StopSignals

STAGE_MAINS = {PretrainSpec.ENTRY: pretrain.main, MiniPostSpec.ENTRY: pretrain.main_minipost,
               HeadSpec.ENTRY: pretrain.main_head, AdaptSpec.ENTRY: adapt.main, FinetuneSpec.ENTRY: finetune.main}
STOP = "stop"
POLL_S = 0.05


def job_file(queue: Path, number: int) -> Path:
    return queue / f"job-{number:04d}.json"


def done_file(queue: Path, number: int) -> Path:
    return queue / f"job-{number:04d}.done.json"


class _Idle:
    """SIGTERM, SIGINT and SIGHUP while no job runs: remembered, and the launch ends."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Idle:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._previous[sig] = signal.signal(sig, lambda signum, frame: setattr(self, "received", signum))
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def next_job(queue: Path, number: int, watch: StopSignals) -> dict[str, Any] | None:
    """Job ``number`` once the pipeline wrote it; None when the launch is to end instead."""
    with _Idle() as idle:
        while True:
            if idle.received is not None or (queue / STOP).exists() or watch.stop_requested():
                return None
            if job_file(queue, number).is_file():
                return json.loads(job_file(queue, number).read_text(encoding="utf-8"))
            time.sleep(POLL_S)


@contextlib.contextmanager
def output_to(log: Path) -> Iterator[None]:
    """This process's output and errors (its file descriptors: DeepSpeed's and torch's C++ lines too) appended to
    ``log`` until the block ends."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in (fd, *saved):
            os.close(descriptor)


def run_job(job: dict[str, Any]) -> tuple[int, str | None]:
    """One job, as its entry script would run it, with the process group kept for the next: (exit status, what
    stopped it before its last update, or None)."""
    main = STAGE_MAINS.get(job["entry"])
    if main is None:
        raise SystemExit(f"run_jobs.py: unknown entry {job['entry']!r}; known: {', '.join(STAGE_MAINS)}")
    cli.last_summary = None
    try:
        code = main(["--config", job["spec"]])
    except SystemExit as exit_:  # a stage's own usage error (a bad spec file): its status, as its script's
        code = exit_.code if isinstance(exit_.code, int) else 2
    finally:  # the job's engine, model and data freed, and on a GPU given back to the device, for the next
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return code, (cli.last_summary or {}).get("stopped_by")


def serve(queue: Path) -> int:
    """Take the jobs in ``queue`` in turn until one of the ends in the module's docstring; the last job's status."""
    watch = StopSignals()  # not installed: it watches the launcher and the pipeline between jobs
    code, number = 0, 1
    cli.keep_process_group = True
    while (job := next_job(queue, number, watch)) is not None:
        with output_to(Path(job["log"])):
            code, stopped_by = run_job(job)
        rank = int(os.environ.get("RANK", "0"))
        if rank == 0:
            write_json(done_file(queue, number), {"code": code, "stopped_by": stopped_by})
        if code != 0 or stopped_by is not None:
            break
        number += 1
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="run_jobs.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queue", type=Path, required=True, help="the folder the pipeline writes the jobs into")
    args = p.parse_args(cli.without_launcher_rank(sys.argv[1:] if argv is None else argv))
    code = serve(args.queue)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return code

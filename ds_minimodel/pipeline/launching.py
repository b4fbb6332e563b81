"""How the pipeline runs one training job: its spec written to a file, then the stage's entry script launched on
this machine's ranks (or the batch job's), and whether a run is finished."""
from __future__ import annotations

import codecs
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ds_minimodel.cluster.slurm import EXIT_REQUEUE
from ds_minimodel.config import read_json
from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.stopping import Stop, descendants, raise_if_stopped, running
from ds_minimodel.pipeline.workers import Workers, job_env, launch_command
from ds_minimodel.stages.specs import RunSpec
from ds_minimodel.train import checkpoint

LAUNCHERS = ("deepspeed", "torchrun", "fork", "srun")


def launch(script: str, args: list[str], ranks: int, launcher: str = "deepspeed", *, verbose: bool = False,
           log: Path | None = None) -> int:
    """Run a training entry point and return its exit status; a job that failed (a positive status, no stop asked
    for) stops the pipeline with it. With ``log``, everything the job prints (output and errors, in order) goes to
    that file, appended at each launch, and is echoed here (``run_logged``). The job runs in a session of its own and
    a signal to the pipeline is passed on to it (``stopping``).

    ``deepspeed``, ``torchrun`` or ``fork`` (CPU only): ``ranks`` processes on this machine
    (``launch.local_command``; one process when ``ranks`` is 1). ``srun``: one task per rank of the enclosing batch
    job's allocation (its nodes x tasks per node); ranks find each other from the SLURM_* variables
    (``ds_minimodel.cluster.slurm.rank_env``), and the job's pre-timeout SIGUSR1 reaches every rank. ``verbose``: the
    launcher's own INFO lines too.
    """
    cmd = launch_command(script, args, ranks, launcher, verbose=verbose)
    print("$ " + " ".join(cmd), flush=True)
    return failed_unless_stopped(script, run_logged(cmd, job_env(), log), log)


def failed_unless_stopped(script: str, code: int, log: Path | None) -> int:
    """``code``, unless it says the job failed (positive, and no signal asked the pipeline to stop): then the
    pipeline stops, naming the script and the job's log."""
    stop = Stop.active
    if code > 0 and (stop is None or stop.received is None):
        raise SystemExit(f"pipeline: {script} exited with {code}" + (f"; its whole output: {log}" if log else ""))
    return code


def run_logged(cmd: list[str], env: dict[str, str], log: Path | None, *, poll: float = 0.2) -> int:
    """Run ``cmd`` with its output and errors appended to ``log``, echoing what it writes to this process's stdout
    as it comes; returns its exit status once every process it started has ended (ranks whose launcher was killed
    first still save and print). The job writes to the file, not to a pipe this process reads: if this process is
    killed first, the ranks still save, print and exit. Without ``log`` the job writes to this process's output."""
    stop = Stop.active or Stop()
    if log is None:
        return _wait(stop.start(cmd, env), stop, lambda final: None, poll)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        sink.write(("$ " + " ".join(cmd) + "\n").encode())
        sink.flush()
        start = sink.tell()
        proc = stop.start(cmd, {**env, "PYTHONUNBUFFERED": "1"}, stdout=sink, stderr=subprocess.STDOUT)
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may straddle two reads
    with log.open("rb") as source:
        source.seek(start)

        def echo(final: bool) -> None:
            chunk = text.decode(source.read(), final=final)
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()

        return _wait(proc, stop, echo, poll)


def _wait(proc: subprocess.Popen, stop: Stop, echo: Callable[[bool], None], poll: float) -> int:
    """Echo until ``proc`` and every process it started (as last seen, once a second) have ended."""
    seen: dict[int, Any] = {}
    last_look = 0.0
    try:
        while True:
            if time.monotonic() - last_look > 1.0:
                seen.update((p.pid, p) for p in descendants(proc))
                last_look = time.monotonic()
            done = proc.poll() is not None and not any(running(p) for p in seen.values())
            echo(done)
            if done:
                return proc.returncode
            time.sleep(poll)
    finally:
        stop.finished()


class StoppedEarly(Exception):
    """A step saved a checkpoint and stopped before its last update (SIGTERM/SIGUSR1): later steps need its
    output, so the pipeline stops too, with ``slurm.EXIT_REQUEUE``; running it again resumes the step."""

    exit_code = EXIT_REQUEUE


def finished(run_dir: Path) -> bool:
    """A run is done when its newest complete checkpoint is at the step count its run.json asked for."""
    run_file, latest = run_dir / checkpoint.RUN, checkpoint.latest_checkpoint(run_dir)
    if not run_file.is_file() or latest is None:
        return False
    return checkpoint.load_meta(latest).step == read_json(run_file)["train"]["steps"]


def changed_settings(spec: RunSpec, run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """{field: (the finished run's value, ``spec``'s)} for every setting of the run in ``run_dir`` that the pipeline
    now asks differently. Paths are left out: the pipeline derives most of them from its out folder (a run reused
    from another folder names other paths), and their contents are checked where they are read (the tokenizer's and
    the initialiser inputs' hashes). A run whose run.json predates the spec record gives none."""
    recorded = read_json(run_dir / checkpoint.RUN).get("spec")
    if recorded is None:
        return {}
    kind = type(spec)
    # the job's kind is its folder's (a Step-1b run recorded before it had its own spec says "pretrain")
    ignored = kind.not_results() | kind.path_fields() | {"stage"}
    # A setting the record lacks is one added since: that run had its default (what the option then did).
    then = {**kind.defaults(), **recorded}
    return {key: (then[key], value) for key, value in spec.to_dict().items()
            if key in then and key not in ignored and then[key] != value}


def train_step(spec: RunSpec, spec_file: Path, ranks: int, launcher: str = "deepspeed", *, verbose: bool = False,
               log: Path | None = None) -> None:
    """One training job: ``spec`` (resumed where its folder holds a run) into ``spec_file``, then launched."""
    run_dir = spec.out
    if finished(run_dir):
        changed = changed_settings(spec, run_dir)
        if changed:
            raise InputError(
                f"{run_dir} holds a finished run trained with other settings than {spec_file.stem} asks: "
                + "; ".join(f"{key} {old!r} there, {new!r} now" for key, (old, new) in changed.items())
                + ". Its results would stand for settings they were not trained with: give the pipeline another "
                  "out, restore those settings, or remove that folder to train it again")
        print(f"[pipeline] {run_dir}: done, skipped", flush=True)
        return
    spec = spec.replace(resume=(run_dir / checkpoint.RUN).is_file())
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec.write(spec_file)
    if Workers.active is not None:  # the plan's shared launch (workers.py)
        code = failed_unless_stopped(spec.ENTRY, Workers.active.run(spec.ENTRY, spec_file, log), log)
    else:
        code = launch(spec.ENTRY, ["--config", str(spec_file)], ranks, launcher, verbose=verbose, log=log)
    resume = f"{saved_at(run_dir)}; run the pipeline again to resume"
    raise_if_stopped(resume)
    if code < 0:  # the launcher was killed by a signal; its ranks noticed, saved and stopped (train.faults)
        raise StoppedEarly(f"pipeline: {spec.ENTRY}'s launcher ended by {signal.Signals(-code).name}; {resume}")
    if not finished(run_dir):
        raise StoppedEarly(f"pipeline: {run_dir} stopped before its last update ({resume})")


def saved_at(run_dir: Path) -> str:
    """Where a stopped run resumes from, in words."""
    latest = checkpoint.latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if latest is None:
        return f"{run_dir} has no checkpoint yet"
    steps = read_json(run_dir / checkpoint.RUN)["train"]["steps"] if (run_dir / checkpoint.RUN).is_file() else None
    return f"{run_dir} saved at update {checkpoint.load_meta(latest).step:,}" + (f" of {steps:,}" if steps else "")

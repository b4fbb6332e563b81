"""The pipeline's shared launch: its training jobs on this machine's ranks, started once for the whole plan
(``run_jobs.py``, ``stages.worker``) rather than once per job.

A job is handed over as a file in ``<out>/workers/launch-N/`` and run by the ranks exactly as its own launch would
run it: its own run folder, run.json, resume and log (``logs/<job>.log``, echoed here as it grows). What each job
guarantees with a launch of its own holds here too (``launching.train_step`` reads the outcome the same way):

- a job that fails ends the launch with its status, and the pipeline stops naming it and its log;
- a signal to the pipeline is passed on to the ranks while a job trains (``stopping.Stop``): the job saves and stops,
  the launch ends, the pipeline stops with the run folder to resume; between jobs the pipeline stops where it is and
  the launch ends at its ``stop`` mark; ranks whose pipeline was killed outright save and stop by themselves;
- a launch that ended (a failed or stopped job) is started again for the next job, if the plan goes on.

The launch's own output (the launcher's lines, anything printed between jobs) goes to ``logs/launch-N.log``. srun
keeps a launch per job: a batch job's ranks are the scheduler's to start.
"""
from __future__ import annotations

import codecs
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ds_minimodel.cluster.launch import entry_script, free_port, local_command
from ds_minimodel.config import write_json
from ds_minimodel.pipeline.stopping import Stop, _kill_job, _send, descendants, running
from ds_minimodel.stages.cli import SUMMARY_FILE
from ds_minimodel.train.faults import OWNER_ENV, owner_mark

SCRIPT = "run_jobs.py"
STOP = "stop"  # stages.worker.STOP, not imported: that module imports every stage, and DeepSpeed with them
CLOSE_WAIT_S = 120.0


def launch_command(script: str, args: list[str], ranks: int, launcher: str, *, verbose: bool = False) -> list[str]:
    """``script`` (an entry script's name, started from wherever it is: ``entry_script``) on ``ranks`` processes:
    srun's tasks, one plain process, or a local launcher's ranks."""
    script = entry_script(script)
    if launcher == "srun":
        return ["srun", "--kill-on-bad-exit=1", sys.executable, script, *args]
    if ranks == 1:
        return [sys.executable, script, *args]
    return local_command(launcher, ranks, free_port(), script, args, verbose=verbose)


def job_env() -> dict[str, str]:
    """This process's environment without a rank's variables (a job's ranks get their own), and DeepSpeed told it
    runs on the CPU where it would find no accelerator (else each process says it fell back to the CPU)."""
    from ds_minimodel.train.distributed import cpu_only  # torch, once a job is to start

    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    if "DS_ACCELERATOR" not in env and cpu_only():
        env["DS_ACCELERATOR"] = "cpu"
    return env


class Workers:
    """The shared launch for one pipeline process (``with Workers(...):``; ``Workers.active`` while it is open)."""

    active: Workers | None = None

    def __init__(self, root: Path, ranks: int, launcher: str, *, verbose: bool = False, off: bool = False,
                 poll: float = 0.2) -> None:
        """``off`` (or srun, whose batch job's ranks are the scheduler's to start): a launch per job, as before."""
        self.root, self.ranks, self.launcher, self.verbose, self.poll = root, ranks, launcher, verbose, poll
        self.on = not off and launcher != "srun"
        self.proc: subprocess.Popen | None = None
        self.seen: dict[int, Any] = {}
        """Every process of the launch seen so far, by pid."""
        self.queue: Path | None = None
        self.number = 0
        self.launches = 0
        self.began: float | None = None
        """When this launch started (monotonic), for the line its close prints."""
        self.updates = (0, 0.0)
        """(jobs run, their seconds in training updates) in this launch."""

    def __enter__(self) -> Workers:
        if self.on:
            Workers.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            if Workers.active is self:
                Workers.active = None

    def _start(self) -> None:
        self.launches += 1
        self.began, self.updates = time.monotonic(), (0, 0.0)
        self.queue = self.root / "workers" / f"launch-{os.getpid()}-{self.launches}"
        self.queue.mkdir(parents=True, exist_ok=True)
        for stale in self.queue.iterdir():  # a reused pid's folder: its jobs are not this launch's
            stale.unlink()
        self.number, self.seen = 0, {}
        cmd = launch_command(SCRIPT, ["--queue", str(self.queue)], self.ranks, self.launcher, verbose=self.verbose)
        print("$ " + " ".join(cmd), flush=True)
        log = self.root / "logs" / f"{self.queue.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as sink:
            sink.write(("$ " + " ".join(cmd) + "\n").encode())
            sink.flush()
            env = {**job_env(), "PYTHONUNBUFFERED": "1", OWNER_ENV: owner_mark()}
            # A session of its own, as a job's launch (stopping.start): the pipeline's signals reach it only as the
            # pipeline passes them on. Registered with Stop only while a job runs.
            self.proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)

    def run(self, entry: str, spec_file: Path, log: Path) -> int:
        """Job ``spec_file`` (of the stage whose script is ``entry``) on the ranks, its output appended to ``log``
        and echoed: its exit status, as its own launch's would be (negative: the launcher ended by that signal)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.queue is not None
        self.number += 1
        log.parent.mkdir(parents=True, exist_ok=True)
        line = f"$ {SCRIPT} job {self.number}: {entry} --config {spec_file}"  # as a launch of its own says its command
        print(line, flush=True)
        with log.open("ab") as sink:
            sink.write(f"{line} ({self.queue})\n".encode())
            start = sink.tell()
        job = {"entry": entry, "spec": str(spec_file), "log": str(log)}
        write_json(self.queue / f"job-{self.number:04d}.json", job)
        stop = Stop.active
        if stop is not None:
            stop.job = self.proc  # a signal now is passed on to the ranks
            if stop.received is not None:
                stop._pass_on(self.proc, stop.received)
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            with log.open("rb") as source:
                source.seek(start)

                def echo(final: bool = False) -> None:
                    chunk = text.decode(source.read(), final=final)
                    if chunk:
                        sys.stdout.write(chunk)
                        sys.stdout.flush()

                started = time.time()
                code = self._wait(echo)
        finally:
            if stop is not None:
                stop.finished()
        self._count(spec_file, started)
        return code

    def _count(self, spec_file: Path, started: float) -> None:
        """Add the job's seconds in updates (its run's summary.json, if written since it started) to the launch's."""
        try:
            summary = Path(json.loads(spec_file.read_text(encoding="utf-8"))["out"]) / SUMMARY_FILE
            if summary.stat().st_mtime >= started:
                jobs, seconds = self.updates
                self.updates = (jobs + 1, seconds + json.loads(summary.read_text(encoding="utf-8"))["update_seconds"])
        except (OSError, KeyError, ValueError):
            return  # a job that wrote no summary (it failed first) adds nothing

    def _wait(self, echo: Any) -> int:
        assert self.proc is not None and self.queue is not None
        done = self.queue / f"job-{self.number:04d}.done.json"
        last_look = 0.0
        while True:
            echo()
            if time.monotonic() - last_look > 1.0:  # the ranks, known while their launcher lives (it may die first)
                self.seen.update((p.pid, p) for p in descendants(self.proc))
                last_look = time.monotonic()
            ended = self.proc.poll() is not None  # looked at before the done mark: a launch that wrote it and left
            if done.is_file():
                outcome = json.loads(done.read_text(encoding="utf-8"))
                if outcome["code"] == 0 and outcome["stopped_by"] is None:
                    echo(True)
                    return 0
                # The launch ends after a failed or stopped job: its status is the launch's (a launcher killed by a
                # signal, negative, as train_step reads it), once every process of it has ended.
                code = self._ended(echo)
                return code if code < 0 else outcome["code"]
            if ended:
                return self._ended(echo) or 1  # ended without finishing the job: a failure where it says 0
            time.sleep(self.poll)

    def _ended(self, echo: Any) -> int:
        """Wait until the launch and every process it started have ended; its exit status."""
        assert self.proc is not None
        last_look = 0.0
        while self.proc.poll() is None or any(running(p) for p in self.seen.values()):
            echo()
            if time.monotonic() - last_look > 1.0:
                self.seen.update((p.pid, p) for p in descendants(self.proc))
                last_look = time.monotonic()
            time.sleep(self.poll)
        echo(True)
        code, self.proc = self.proc.returncode, None
        return code

    def close(self) -> None:
        """The plan is done (or the pipeline stops): the launch's ranks leave at the stop mark; a launch still
        running after ``CLOSE_WAIT_S`` is killed."""
        if self.proc is None or self.queue is None:
            return
        write_json(self.queue / STOP, {})
        deadline = time.monotonic() + CLOSE_WAIT_S
        self.seen.update((p.pid, p) for p in descendants(self.proc))
        while ((self.proc.poll() is None or any(running(p) for p in self.seen.values()))
               and time.monotonic() < deadline):
            time.sleep(self.poll)
        if self.proc.poll() is None or any(running(p) for p in self.seen.values()):
            print(f"[pipeline] the shared launch did not end within {CLOSE_WAIT_S:.0f} s of its stop mark: killed",
                  flush=True)
            _kill_job(self.proc, signal.SIGKILL)
            for proc in self.seen.values():
                _send(proc, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        jobs, seconds = self.updates
        if jobs and self.began is not None:
            wall = time.monotonic() - self.began
            print(f"[pipeline] the shared launch ran {jobs} training job{'s' * (jobs > 1)} in {wall:.0f} s, "
                  f"{seconds:.0f} s ({seconds / wall:.0%}) of it in updates", flush=True)



def end_shared_launch() -> None:
    """Before work the pipeline does in its own process (Step 4's scoring): the shared launch's ranks leave, and the
    device memory they hold with them; a later training job starts them again."""
    if Workers.active is not None:
        Workers.active.close()

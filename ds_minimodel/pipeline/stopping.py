"""How a pipeline stops, however it is asked to: one rule for SIGINT (Ctrl-C), SIGTERM and SIGHUP.

A training job runs in a session of its own (``start``), so a signal meant for the pipeline (a terminal's Ctrl-C, a
``kill`` of the pipeline's process group, a scheduler signalling only the top process) reaches the pipeline alone,
which passes it on once, as SIGTERM, to the job's ranks on this machine (``ranks_of``): each finishes its update, saves
a checkpoint and exits, with no launcher's kill timer running against the save (a ``deepspeed`` job with no rank
started yet gets it in every process: its runner would not pass it on). The pipeline waits for every process of the
job, then stops with one line naming the run folder to resume and exit status 128 + the signal's number (a shell's
convention). A second signal stops the job at once (SIGKILL; the newest complete checkpoint is kept: checkpoints are
written whole or not at all). Work the pipeline does in its own process (preparing data, scoring) stops where it is;
its files are written whole or not at all.

Signals sent to a job's launcher or to one of its ranks stop the whole job the same way (``train.faults``: ranks watch
their launchers and agree on a stop at each update); a pipeline killed outright (SIGKILL) is watched by its job's ranks
(``train.faults.OWNER_ENV``), which then save and stop by themselves."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

import psutil

from ds_minimodel.train.faults import OWNER_ENV, owner_mark

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """The pipeline was asked to stop by a signal; the message says what was saved and how to go on. Like
    KeyboardInterrupt, not an ``Exception``: no handler meant for errors may swallow it."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Stop:
    """The pipeline's handlers for ``SIGNALS``, installed for its whole run (``with Stop(): ...``). While a job it
    started runs (``start`` .. ``finished``), a signal is passed on to it; otherwise it raises ``Stopped`` where the
    pipeline is."""

    active: Stop | None = None

    def __init__(self) -> None:
        self.received: int | None = None
        self.job: subprocess.Popen | None = None
        self.starting = False
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Stop:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            Stop.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if Stop.active is self:
            Stop.active = None

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:  # a forked child (the encoding pool's workers, before their own handlers)
            if signum != signal.SIGINT:  # Ctrl-C is the pipeline's to handle; the pool's SIGTERM ends the child
                os._exit(128 + signum)
            return
        again, job = self.received is not None, self.job
        self.received = self.received or signum
        name = signal.Signals(signum).name
        if job is None:
            if self.starting:
                return  # passed on by ``start`` once the job exists
            raise Stopped(signum, f"pipeline: stopped by {name} while no job was training; what it wrote is whole: "
                                  "run the pipeline again to continue")
        if again:
            print(f"[pipeline] {name} again: stopping the job now, without saving", flush=True)
            _kill_job(job, signal.SIGKILL)
            return
        self._pass_on(job, signum)

    @staticmethod
    def _pass_on(job: subprocess.Popen, signum: int) -> None:
        name = signal.Signals(signum).name
        print(f"[pipeline] {name}: the job saves a checkpoint at the end of its update and stops; "
              f"{name} again stops it at once", flush=True)
        ranks = ranks_of(job)
        if ranks:
            for proc in ranks:
                _send(proc, signal.SIGTERM)
        elif _is_deepspeed_runner(job):
            # No rank started yet, and the runner does not pass SIGTERM on: the per-node launcher it may already
            # have started would start them and train on, orphaned. Nothing in the job's session has trained yet.
            _kill_job(job, signal.SIGTERM)
        else:
            _send(job, signal.SIGTERM)

    def start(self, cmd: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen:
        """``start``, the job registered at once; a signal that arrives while it starts is passed on as soon as it
        exists, never lost between the two. (Not by blocking signals around the start: a child inherits the mask,
        and its ranks would never see one.)"""
        self.starting = True
        try:
            self.job = start(cmd, env, **popen)
        finally:
            self.starting = False
        if self.received is not None:
            self._pass_on(self.job, self.received)
        return self.job

    def finished(self) -> None:
        self.job = None

    def raise_if_stopped(self, where: str) -> None:
        if self.received is not None:
            raise Stopped(self.received, f"pipeline: stopped by {signal.Signals(self.received).name}; {where}")


def raise_if_stopped(where: str) -> None:
    """``Stopped`` if the pipeline's handlers (when installed) have received a signal: after a job, or after work
    during which the handler's own ``Stopped`` may have been dropped (raised inside a finalizer)."""
    if Stop.active is not None:
        Stop.active.raise_if_stopped(where)


def start(cmd: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """Start a job in a session of its own, told which pipeline process started it (the ranks watch it)."""
    return subprocess.Popen(cmd, env={**env, OWNER_ENV: owner_mark()}, start_new_session=True, **popen)


def ranks_of(job: subprocess.Popen) -> list[psutil.Process]:
    """The job's training ranks on this machine: its processes with a ``LOCAL_RANK`` (what ``deepspeed`` and
    ``torchrun`` give each rank), or the job itself when it is one plain process. Empty when the ranks run elsewhere
    (srun, a multi-host launcher) or were forked (``stages.forkrun``: a rank sets its variables after the fork, which
    /proc does not show): the signal then goes to the launcher, which passes it on."""
    try:
        procs = [psutil.Process(job.pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return []
    ranks = []
    for proc in procs:
        try:
            if "LOCAL_RANK" in proc.environ():
                ranks.append(proc)
        except psutil.Error:
            continue
    return ranks or [p for p in procs[:1] if _is_python_script(p)]


def _is_python_script(proc: psutil.Process) -> bool:
    """A plain ``python script.py`` (one rank), not a launcher (``deepspeed``, ``torchrun``, ``srun``)."""
    try:
        args = proc.cmdline()
    except psutil.Error:
        return False
    return len(args) > 1 and args[1].endswith(".py") and not any(
        word in " ".join(args) for word in ("deepspeed", "torchrun", "torch.distributed.run", "srun"))


def _is_deepspeed_runner(job: subprocess.Popen) -> bool:
    """The job is DeepSpeed's ``deepspeed`` runner (``python .../deepspeed ...``), which on one node ends on SIGTERM
    without passing it on (deepspeed/launcher/runner.py installs its handler only for multi-node pdsh)."""
    try:
        args = psutil.Process(job.pid).cmdline()
    except psutil.Error:
        return False
    return any(os.path.basename(arg) == "deepspeed" for arg in args[:2])


def descendants(job: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(job.pid).children(recursive=True)
    except psutil.Error:
        return []


def running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(proc: subprocess.Popen | psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except (ProcessLookupError, psutil.Error):
        pass


def _kill_job(job: subprocess.Popen, sig: int) -> None:
    procs = [job, *descendants(job)]
    try:
        os.killpg(job.pid, sig)  # the job's own session: every process it started here
    except ProcessLookupError:
        pass
    for proc in procs[1:]:  # and any that left the group
        _send(proc, sig)

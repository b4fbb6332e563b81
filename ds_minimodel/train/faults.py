"""What can end or interrupt a training run, told apart from bugs and turned into one clear error or a clean stop:
signals and a vanished launcher (``StopSignals``), an fp16 loss scale that collapsed (``LossScaleWatch``), a lost
peer rank (``lost_a_peer``) and a non-finite loss. The loop (``train.engine``) asks; this module knows the signs."""
from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ds_minimodel.errors import TrainingError


class StopSignals:
    """What asks the training loop to finish the current update, save a checkpoint and return:

    - SIGTERM and SIGUSR1, as a preempted or time-limited batch job needs (Slurm: ``--signal=USR1@120``);
    - Ctrl-C (SIGINT) the same way; a second Ctrl-C stops at once, without saving;
    - SIGHUP (the terminal or session that started the run closed);
    - the end of the launcher that started this rank (``deepspeed`` or ``torchrun``): a launcher killed by a signal
      it cannot pass on (SIGKILL, or SIGTERM to the ``deepspeed`` runner, which does not forward it) would otherwise
      leave its ranks training on as orphans, writing a folder that a relaunch then writes too;
    - the end of the pipeline that started the job (``OWNER_ENV``, on the pipeline's own host): a pipeline killed
      with SIGKILL cannot pass anything on, and its job runs in a session of its own.

    Handlers are installed only in the main thread, and the previous ones are restored on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)
    LAUNCHER_GONE = "its launcher ended"
    OWNER_GONE = "the pipeline that started it ended"
    early: int | None = None
    """SIGUSR1 received before training began (see ``catch_early_usr1``)."""

    def __init__(self) -> None:
        self.received: int | None = StopSignals.early
        self.launcher_gone = False
        self.owner_gone = False
        self._previous: dict[int, Any] = {}
        self._launchers = _launcher_pids()
        self._owner = owner_process()

    @classmethod
    def catch_early_usr1(cls) -> None:
        """Remember a SIGUSR1 that arrives while the run is still starting (its default action would kill the
        process and lose the job's last minutes): training then saves after its first update and stops. SIGTERM
        keeps its default until training begins, so that a launcher can still end a rank stuck in start-up."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, lambda signum, frame: setattr(cls, "early", signum))

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.received = signum

    def stop_requested(self) -> bool:
        """A signal arrived, or a launcher or the pipeline this rank watches is gone (checked once per update: one
        read of /proc/<pid>/stat per watched process)."""
        if self.received is None and not self.launcher_gone and not self.owner_gone:
            if self._launchers:
                self.launcher_gone = os.getppid() != self._launchers[0] or not all(map(_alive, self._launchers))
            if self._owner is not None:
                self.owner_gone = not _same_process(*self._owner)
        return self.received is not None or self.launcher_gone or self.owner_gone

    def reason(self) -> str:
        """Why this rank stops, asked once the ranks have agreed to and saved: the watched processes are read again
        first, since a peer may have seen the launcher (or pipeline) end an instant before this rank looked."""
        self.stop_requested()
        if self.received is not None:
            return signal.Signals(self.received).name
        if self.launcher_gone:
            return self.LAUNCHER_GONE
        return self.OWNER_GONE if self.owner_gone else "a peer's signal"

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first, then the parent's pid); empty when the
    process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _alive(pid: int) -> bool:
    """Running, not gone and not a zombie (a killed launcher stays one until its own parent reaps it)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


OWNER_ENV = "DS_MINIMODEL_PIPELINE"
"""Set by the pipeline for the jobs it starts: ``host:pid:start`` of the pipeline's process (``owner_mark``)."""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, it names one
    process, not whichever later reuses the pid."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else None


def _same_process(pid: int, start: str) -> bool:
    return _alive(pid) and _start_time(pid) == start


def owner_mark() -> str:
    """What the pipeline puts in ``OWNER_ENV`` for its jobs."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def owner_process() -> tuple[int, str] | None:
    """(pid, start time) of the pipeline that started this job, when it runs on this host (ranks on other hosts,
    which srun gives the same environment, cannot see it and leave the watch to their own launcher)."""
    host, _, rest = os.environ.get(OWNER_ENV, "").partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not start:
        return None
    return int(pid), start


def _launcher_pids() -> list[int]:
    """The launcher processes this rank lives under, nearest first: torchrun's agent, the fork launcher
    (``stages.forkrun``), or DeepSpeed's per-node ``deepspeed.launcher.launch`` and the ``deepspeed`` runner above
    it. Empty for a rank started any other way (plain python, mpirun, srun), whose lifetime the shell or the job
    system owns."""
    if "LOCAL_RANK" not in os.environ:
        return []
    parent = os.getppid()
    command = _cmdline(parent)
    if any(name in command for name in ("torchrun", "torch.distributed.run", "ds_minimodel.stages.forkrun")):
        return [parent]
    if "deepspeed.launcher.launch" not in command:
        return []
    runner = _parent_of(parent)
    return [parent, runner] if runner and "deepspeed" in _cmdline(runner) else [parent]


class LossScaleWatch:
    """fp16 only: counts the updates DeepSpeed's loss scaler skips for overflowing gradients (normal early in
    training, while the dynamic scale finds its level), and turns a collapse into a ``TrainingError``: gradients that
    overflow even at the smallest scale the config allows, i.e. that are inf or NaN however they are scaled. ZeRO's
    scaler (every stage ``load_ds_config`` lets fp16 use) signals that with a bare ``Exception``."""

    def __init__(self, engine: Any):
        from deepspeed.runtime.fp16.loss_scaler import MIN_LOSS_SCALE

        self.engine = engine
        self.min_scale = engine.dynamic_loss_scale_args()[MIN_LOSS_SCALE] if engine.dynamic_loss_scale() else None
        self.skipped = 0
        self._skipped_before = engine.skipped_steps

    def scale(self) -> float | None:
        scale = getattr(self.engine.optimizer, "loss_scale", None)
        return None if scale is None else float(scale)

    def after_update(self) -> None:
        self.skipped += self.engine.skipped_steps - self._skipped_before
        self._skipped_before = self.engine.skipped_steps

    @staticmethod
    def is_deepspeed_collapse(err: Exception) -> bool:
        """DeepSpeed's ZeRO loss scaler raises a bare ``Exception`` with this text when it cannot go lower."""
        return "loss scale already at minimum" in str(err)

    def error(self, run_dir: Path, stage: str, step: int, last_ckpt: Path | None) -> TrainingError:
        return TrainingError(
            f"{run_dir}: [{stage}] the fp16 loss scale collapsed: the gradients of update {step} overflowed with the "
            f"loss scale already at its minimum ({self.min_scale:g}, fp16.min_loss_scale), so they are inf or NaN "
            f"at any scale ({self.skipped} updates of this run skipped before it). Skipped updates leave the weights "
            f"unchanged; the last good checkpoint is {last_ckpt or 'none'}. Lower the learning rate, check the "
            "data or train in bf16, then resume with --resume.")


# What Gloo, NCCL and torch's c10d say when a collective's peer is gone or silent (measured with a SIGKILLed and a
# SIGSTOPped peer on another host: "Connection reset by peer", "Timed out waiting 20000ms for recv operation").
_PEER_FAILURE = ("timed out", "timeout", "connection reset", "connection closed", "connection refused",
                 "broken pipe", "nccl error", "watchdog", "socket")
# Gloo's own words when its TCP pair to a silent peer times out, without naming Gloo (seen in CI with a SIGSTOPped
# peer while the other rank waited in a checkpoint's all-reduce: "Application timeout caused pair closure").
_GLOO_PAIR_FAILURE = ("caused pair closure",)


def lost_a_peer(err: RuntimeError) -> bool:
    """Whether a collective's error says a peer rank died, hung or became unreachable (not a bug of ours)."""
    text = str(err).lower()
    return (isinstance(err, dist.DistError) or any(k in text for k in _GLOO_PAIR_FAILURE)
            or (("gloo" in text or "nccl" in text or "c10d" in text) and any(k in text for k in _PEER_FAILURE)))


def peer_lost(run_dir: Path, stage: str, rank: int, where: str, err: Exception, last_ckpt: Path | None
              ) -> TrainingError:
    return TrainingError(
        f"{run_dir}: [{stage}] rank {rank} lost contact with another rank {where} "
        f"({str(err).strip().splitlines()[-1]}): a rank died, hung or became unreachable. The last complete "
        f"checkpoint is {last_ckpt or 'none'}; relaunch every rank with --resume to continue.")


def non_finite_loss(run_dir: Path, stage: str, loss: float, step: int, last_ckpt: Path | None) -> TrainingError:
    return TrainingError(
        f"{run_dir}: [{stage}] non-finite loss {loss} at update {step}; nothing was saved after it, the last good "
        f"checkpoint is {last_ckpt or 'none'}. Lower the learning rate or check the data, then resume with --resume.")


def non_finite_gradient(run_dir: Path, stage: str, norm: float, step: int, last_ckpt: Path | None) -> TrainingError:
    return TrainingError(
        f"{run_dir}: [{stage}] gradient norm {norm} at update {step}, applied to the weights because the DeepSpeed "
        f"config turns bf16's check_grad_overflow off; update {step} was not saved, the last good checkpoint is "
        f"{last_ckpt or 'none'}. Resume with --resume (with the check on, DeepSpeed skips such an update).")

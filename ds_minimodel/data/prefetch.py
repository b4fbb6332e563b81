"""Micro-batches built ahead of the training loop: on a background thread, or in a process of their own.

Building one costs real host time: a 256 x 128 micro-batch of the GPU reference's Step 1 takes 9-11 ms of one core of
this project's CPU (``ds-minimodel bench loader``; BENCHMARKS.md), mostly Python (a generator seeded per sample, then
BERT's masking), and Python code holds the interpreter's lock. On a thread it competes for that lock with the loop
that launches the model's kernels: against a loop of small tensor operations it added 18-21 ms to each update, twice
its building time. In a process (``process=True``, a fork of this one that touches no GPU, a GPU run's default:
``train.engine.prefetching``) it added about 2 ms, the batches reaching the loop pickled through a pipe (their arrays,
about 0.8 MB at that size). Either way the batches, their order and ``state_dict`` are those of the stream itself, so
a checkpoint resumes exactly.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from ds_minimodel.errors import InputError, TrainingError

STALL_S = 600.0
"""A builder that is alive but hands out nothing for this long is taken for hung: a batch takes milliseconds, and a
fork can hang on a lock another thread of the training process held when it was made (CPython warns of it)."""


class Prefetcher:
    """Builds a stream's next ``depth`` micro-batches while the model computes on the current one, in page-locked
    memory when they are bound for a GPU (so that ``.to(device, non_blocking=True)`` copies while the GPU works).

    ``state_dict`` describes the batches handed out, not the ones built ahead. The builder starts at the first
    ``next``; ``load_state_dict`` (before or after) stops it and rewinds the stream; ``close`` stops it and leaves
    the stream where the batches handed out end.
    """

    def __init__(self, stream: Any, *, depth: int = 2, pin_for: torch.device | None = None,
                 process: bool = False, stall_s: float = STALL_S) -> None:
        """``pin_for``: the CUDA device the batches go to (pinned memory), or None. ``process``: build them in a
        forked process instead of a thread. ``stall_s``: seconds without a batch after which the builder is hung."""
        if depth < 1:
            raise InputError(f"prefetch depth must be at least 1, got {depth}")
        self.stream, self.depth, self.process, self.stall_s = stream, depth, process, stall_s
        self.pin_for = pin_for if pin_for is not None and pin_for.type == "cuda" else None
        self._state = stream.state_dict()
        self._queue: Any = None
        self._worker: threading.Thread | multiprocessing.process.BaseProcess | None = None
        self._stop: Any = None

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> dict:
        if self._worker is None:
            self._start()
        batch, state, error = self._get()
        if error is not None:
            self.close()
            raise error
        if self.process:
            batch = from_wire(batch)
            if self.pin_for is not None:
                batch = pinned(batch)
        self._state = state
        return batch

    def _start(self) -> None:
        if self.process:
            # fork: the child inherits the stream as it stands (memory-mapped shards, position), and uses no GPU.
            context = multiprocessing.get_context("fork")
            self._queue, self._stop = context.Queue(self.depth), context.Event()
            self._worker = context.Process(target=produce_in_process, args=(self.stream, self._queue, self._stop),
                                           name="ds_minimodel-prefetch", daemon=True)
        else:
            self._queue, self._stop = queue.Queue(self.depth), threading.Event()
            self._worker = threading.Thread(target=produce, name="ds_minimodel-prefetch", daemon=True,
                                            args=(self.stream, self._queue, self._stop, self.pin_for))
        self._worker.start()

    def _get(self) -> tuple[Any, Any, BaseException | None]:
        kind, started = "process" if self.process else "thread", time.monotonic()
        while True:
            try:
                return self._queue.get(timeout=min(1.0, self.stall_s))
            except queue.Empty:
                if not self._worker.is_alive():
                    code = getattr(self._worker, "exitcode", None)
                    self.close()
                    return None, None, TrainingError(
                        f"prefetching: the {kind} building micro-batches ended (exit code {code}) before handing out "
                        f"the next one; the batches handed out end at {self._state}")
                if time.monotonic() - started > self.stall_s:
                    self._abandon()
                    return None, None, TrainingError(
                        f"prefetching: the {kind} building micro-batches handed out nothing for {self.stall_s:.0f} s "
                        f"and is taken for hung; the batches handed out end at {self._state}. Run again with "
                        f"--resume; --prefetch-process {not self.process} builds them "
                        f"{'on a thread' if self.process else 'in a process'} instead")

    def _abandon(self) -> None:
        """Give up on a hung builder: a process is killed; a thread, which cannot be, is left to end with the
        training process (it is a daemon), its stream no longer this prefetcher's to rewind."""
        if self.process:
            self._worker.kill()
            self._worker.join()
            self.stream.load_state_dict(self._state)
        self._worker = self._queue = None

    def state_dict(self) -> dict:
        return dict(self._state)

    def load_state_dict(self, state: dict) -> None:
        self.close()
        self.stream.load_state_dict(state)
        self._state = self.stream.state_dict()

    def close(self) -> None:
        """Stop the builder and leave the stream where the batches handed out end (its position for the next user)."""
        if self._worker is None:
            return
        self._stop.set()
        if self.process:
            while self._worker.is_alive():  # a child blocked on a full queue: make room until it sees the stop
                try:
                    self._queue.get(timeout=0.1)
                except queue.Empty:
                    pass
            self._worker.join()
            self._queue.close()
            self._queue.join_thread()
        else:
            self._worker.join()
        self._worker = self._queue = None
        self.stream.load_state_dict(self._state)


def to_wire(batch: dict | None) -> tuple[dict, dict] | None:
    """A batch for the pipe to the consumer: its tensors as NumPy arrays, pickled whole (torch's own sharing of
    tensors passes file descriptors that a process which has ended can no longer hand over)."""
    if batch is None:
        return None
    tensors = {k: v.numpy() for k, v in batch.items() if isinstance(v, torch.Tensor)}
    return tensors, {k: None if k in tensors else v for k, v in batch.items()}  # every key, in its order


def from_wire(wire: tuple[dict, dict]) -> dict:
    """The batch again, its keys in their order."""
    tensors, rest = wire
    return {k: torch.from_numpy(tensors[k]) if k in tensors else v for k, v in rest.items()}


def pinned(batch: dict) -> dict:
    return {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def produce_in_process(stream: Any, out: Any, stop: Any) -> None:
    """The forked builder: the stop signals are the training process's to act on (it saves, then stops this one
    through ``stop``), and it ends when that process is gone (a SIGKILL leaves it no chance to say so).

    One thread for torch's own operations: a fork of a parent that ran a parallel operation on the host inherits its
    OpenMP pool but not the pool's threads, and GNU OpenMP's first parallel region in the child waits on them for ever
    (until the stall limit). Today's streams build in NumPy; one that used a large torch operation would hang."""
    torch.set_num_threads(1)
    for number in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None)):
        if number is not None:
            signal.signal(number, signal.SIG_IGN)
    parent = os.getppid()
    produce(stream, out, stop, None, alive=lambda: os.getppid() == parent)


def produce(stream: Any, out: Any, stop: Any, pin_for: torch.device | None,
            alive: Callable[[], bool] = lambda: True) -> None:
    """The builder's loop, on a thread or in the forked process: each batch with the stream's state after it, or the
    error that ended it (raised in the consumer)."""
    if pin_for is not None:  # else this thread's pinned allocations would open a context on GPU 0
        torch.cuda.set_device(pin_for)
    while not stop.is_set():
        try:
            batch = next(stream)
            item = (pinned(batch) if pin_for is not None else batch, stream.state_dict(), None)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            item = (None, None, err)
        if not isinstance(out, queue.Queue):  # across processes
            item = (to_wire(item[0]), item[1], portable(item[2]) if item[2] is not None else None)
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                break
            except queue.Full:
                if not alive():
                    return
        if item[2] is not None:
            return


def portable(err: BaseException) -> BaseException:
    """``err`` if it pickles and unpickles as itself, else a TrainingError with its type, message and traceback."""
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001 - whatever does not survive the trip is carried as text
        text = "".join(traceback.format_exception(err))[-2000:]
        return TrainingError(f"prefetching: {type(err).__name__}: {err}\n{text}")

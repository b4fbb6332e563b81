"""An ordered process pool that a stop signal never strands: ``ordered_map`` runs a function over a stream of inputs
in worker processes and yields the results in input order.

A ``multiprocessing.Pool`` strands itself in two ways, both seen while preparing data (issue 49, and a CI run where a
Ctrl-C between two corpora left a worker holding the test's pipes for ever):

- Its idle workers wait for the next task holding the task queue's lock. A worker that dies there (SIGTERM or SIGHUP
  sent to the whole process group, or the pool's own ``terminate()``) never releases it: the other workers and any
  replacement wait on it for ever, and so does a ``join()`` with tasks in flight.
- An exception raised in the parent inside the pool's own code (a signal handler that raises where the signal
  arrives, as the pipeline's does) can leave a task registered and never sent, or the pool neither closed nor
  joined, so that the interpreter's exit ends the workers and the pool's worker thread forks replacements for them.

So the workers ignore the stop signals (the parent handles them), and the parent holds them while the pool runs:
one that arrives is noted, no further input is sent, the pool is closed and joined (the workers finish what is in
flight, a few blocks), and then the signal goes to the handler that was there before, at once.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def ordered_map(func: Callable[[Any], Any], items: Iterable[Any], workers: int, *,
                initializer: Callable[..., None] | None = None, initargs: tuple = ()) -> Iterator[Any]:
    """``func(item)`` for each item, computed by ``workers`` processes, yielded in input order.

    At most 2 x workers items are in flight: ``Pool.imap`` would read the whole input into its task queue whenever
    reading outpaces the workers. ``func``, ``initializer`` and their arguments must be picklable where processes
    are spawned (not on Linux, where they are forked: in milliseconds, and safe for workers that touch nothing but
    what ``initializer`` opens). A caller that may stop reading early closes it (``contextlib.closing``): the pool
    and the held signals end then, not whenever the generator is collected."""
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    held = _HeldStops()
    try:
        # Blocked while the workers are forked, so that each starts with them pending, not caught by this process's
        # handlers; taken once ``_start_worker`` has replaced those.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        try:
            pool = context.Pool(workers, initializer=_start_worker, initargs=(os.getpid(), initializer, initargs))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # one that came meanwhile is noted here
        try:
            pending: deque = deque()
            for item in items:
                if held.signum is not None:
                    return
                pending.append(pool.apply_async(func, (item,)))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().get()
            while pending and held.signum is None:
                yield pending.popleft().get()
        finally:  # never terminate(): see above. With the signals held, nothing interrupts the two.
            pool.close()
            pool.join()
    finally:
        held.release()


class _HeldStops:
    """SIGINT, SIGTERM and SIGHUP noted instead of handled (Python runs signal handlers in the main thread only, so
    elsewhere nothing is held); ``release`` restores the handlers and gives them the first signal noted."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in STOPS:
                if signal.getsignal(sig) not in (signal.SIG_IGN, None):  # None: a handler not set from Python
                    self._previous[sig] = signal.signal(sig, self._note)

    def _note(self, signum: int, frame: Any) -> None:  # never in a worker: blocked there until replaced
        self.signum = self.signum or signum

    def release(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self.signum is not None:
            signal.raise_signal(self.signum)  # handled before this returns: a raising handler raises from here


def _start_worker(parent: int, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    for sig in STOPS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # those sent since the fork are dropped now
    _end_with(parent)
    if initializer is not None:
        initializer(*initargs)


def _end_with(parent: int) -> None:
    """A worker ignores the stop signals, so it ends with its parent instead (Linux: SIGKILL when the parent dies),
    not to wait for tasks for ever if the parent is killed outright."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        return
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)

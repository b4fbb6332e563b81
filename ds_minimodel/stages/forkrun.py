"""CPU ranks forked from one interpreter that has already imported torch, DeepSpeed and the stages: the ``fork``
launcher (``--launcher fork``).

    python -m ds_minimodel.stages.forkrun --nproc 2 --master-port 29500 run_pretrain.py --config spec.json

On a CPU every process of a launch pays its imports before its first update (about 4 s of CPU for torch,
``torch._dynamo``, which torch's optimizers import at their first step, and DeepSpeed), and the ``deepspeed``
launcher adds two interpreters of its own (its runner and ``deepspeed.launcher.launch``, about 2.5 s each); on a
machine with few cores they run one after another. Here one process imports once, then forks a rank per process
(milliseconds each), so a 2-rank launch costs one import instead of four. What a rank does is what it does under
``torchrun``: the same environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), the
entry script run as ``__main__``, its own signal handling, its watch on its launcher (``train.faults``).

The ranks run in a process group of their own, so that a signal to the launcher's group (a terminal's Ctrl-C, the
pipeline passing a signal on) reaches each rank once: the launcher passes SIGTERM, SIGINT, SIGHUP and SIGUSR1 on to
the ranks, which save and stop, and waits for them (one that arrives while it imports is passed on as soon as the
ranks exist). A launcher killed outright leaves its ranks to notice (``train.faults``), save and stop. Its exit
status is the first nonzero status of a rank (a rank ended by a signal: 128 + its number), else 0. When a rank
fails with no signal passed on, the others get SIGTERM, then SIGKILL after ``GRACE_S``, as under DeepSpeed's
launcher and torchrun.

CPU only: CUDA cannot be used in a process forked from one that has touched it, and importing DeepSpeed looks for
GPUs. Where DS_ACCELERATOR names another device, or DeepSpeed would find one, the launcher refuses before it starts
a rank; use ``deepspeed`` or ``torchrun`` there.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import time
import traceback

PRELOAD = ("torch", "torch._dynamo", "deepspeed", "ds_minimodel.stages.worker")
"""What the ranks would each import: torch, dynamo (torch's optimizers at their first step), DeepSpeed, and every
stage (``stages.worker`` imports them all)."""
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
GRACE_S = 30.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ds_minimodel.stages.forkrun", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, required=True, help="ranks on this machine")
    p.add_argument("--master-port", type=int, required=True, help="the rendezvous port on 127.0.0.1")
    p.add_argument("script", help="the entry script each rank runs as __main__")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """What a rank's environment says about the launch (the variables torchrun and DeepSpeed's launcher set)."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
            "LOCAL_SIZE": str(world), "CROSS_RANK": "0", "CROSS_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}


def accelerator_present() -> str | None:
    """Why forked ranks could not use this machine's accelerator, or None where DeepSpeed would run on the CPU."""
    if os.environ.get("DS_ACCELERATOR", "cpu") != "cpu":
        return f"DS_ACCELERATOR is {os.environ['DS_ACCELERATOR']!r}"
    from ds_minimodel.train.distributed import cpu_only

    return None if cpu_only() else "this machine has an accelerator"


def _run_rank(rank: int, world: int, port: int, script: str, args: list[str]) -> int:
    """In the forked child: become rank ``rank`` and run ``script`` as ``__main__``; its exit status. Its signal
    handlers are the launcher's as they were before it passed anything on (what a started interpreter would have)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
    os.environ.update(rank_env(rank, world, port))
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a SIGINT the script did not handle: as Python's own exit, 130 after the traceback
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - an uncaught error: its traceback, then status 1, as Python's own exit
        traceback.print_exc()
        return 1
    return 0


def _status(wait_status: int) -> int:
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def launch(nproc: int, port: int, script: str, args: list[str]) -> int:
    """Fork ``nproc`` ranks of ``script`` and wait for them all; the launch's exit status (see the module). Called
    with ``PASSED_ON`` held (``main``): one that arrives before the ranks exist is passed on to them all then."""
    ranks: set[int] = set()  # their pids, while they run
    try:
        for name in PRELOAD:
            __import__(name)
        sys.stdout.flush()
        sys.stderr.flush()
        group = 0
        for rank in range(nproc):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.setpgid(0, group)
                    code = _run_rank(rank, nproc, port, script, args)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            with contextlib.suppress(OSError):  # also here: the next rank joins a group that exists by then
                os.setpgid(pid, group or pid)
            group = group or pid
            ranks.add(pid)
        received: list[int] = []

        def pass_on(signum: int, frame: object) -> None:
            received.append(signum)
            _pass_on(ranks, signum)

        for sig in PASSED_ON:
            signal.signal(sig, pass_on)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
    status, deadline = 0, None
    while ranks:
        pid, wait_status = _wait(poll=deadline is not None)
        if pid == 0:  # none ended yet (polling while the others stop after a failure)
            if time.monotonic() > deadline:
                _pass_on(ranks, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.1)
            continue
        ranks.discard(pid)
        code = _status(wait_status)
        if code != 0 and status == 0:
            status = code
            if ranks and not received:  # the others cannot go on without it (after a signal: they are stopping)
                print(f"forkrun: a rank exited with {code}; stopping the other ranks", file=sys.stderr, flush=True)
                _pass_on(ranks, signal.SIGTERM)
                deadline = time.monotonic() + GRACE_S
    return status


def _wait(poll: bool) -> tuple[int, int]:
    """The next rank to end (pid, wait status); with ``poll``, (0, 0) at once when none has."""
    return os.waitpid(-1, os.WNOHANG if poll else 0)  # retried by Python after a signal handler (PEP 475)


def _pass_on(ranks: set[int], signum: int) -> None:
    for pid in list(ranks):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.nproc < 1:
        print(f"forkrun: --nproc must be at least 1, got {args.nproc}", file=sys.stderr)
        return 2
    signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)  # held until the ranks exist (launch)
    why = accelerator_present()
    if why is not None:
        print(f"forkrun: the fork launcher starts CPU ranks only and {why} (CUDA cannot be used in a process forked "
              "after it was looked for): use --launcher deepspeed or torchrun", file=sys.stderr)
        return 2
    return launch(args.nproc, args.master_port, args.script, args.args)


if __name__ == "__main__":
    sys.exit(main())

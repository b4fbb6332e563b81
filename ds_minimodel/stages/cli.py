"""Command-line pieces shared by the entry scripts: the training options every stage has, and error handling."""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ds_minimodel.config import TrainConfig
from ds_minimodel.ds_config import scheduler_total_steps
from ds_minimodel.errors import InputError, TrainingError, report
from ds_minimodel.folders import require_output
from ds_minimodel.train import checkpoint
from ds_minimodel.train.distributed import DEFAULT_DIST_TIMEOUT
from ds_minimodel.train.ds_validate import check_ds_config
from ds_minimodel.train.faults import StopSignals


def number(kind: type, *, low: float, strict: bool = False, below: float | None = None) -> Callable[[str], Any]:
    """An argparse type: ``kind`` (int or float) at least ``low`` (above it where ``strict``), under ``below``."""
    bounds = (f"above {low:g}" if strict else f"at least {low:g}") + (f" and below {below:g}" if below else "")

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'} "
                                             f"{bounds}, got {text!r}") from None
        if value < low or (strict and value == low) or (below is not None and value >= below) or value != value:
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


COUNT, POSITIVE_INT, POSITIVE = number(int, low=0), number(int, low=1), number(float, low=0, strict=True)
FRACTION = number(float, low=0, below=1)  # warm-up shares
PROBABILITY = number(float, low=0, strict=True, below=1)  # mask rates


def add_training_args(p: argparse.ArgumentParser, *, save_every: int = 1000) -> None:
    p.add_argument("--ds-config", type=Path, required=True, help="DeepSpeed JSON (see ds_configs/)")
    p.add_argument("--data", type=Path, required=True, help="folder made by `python -m ds_minimodel prepare`")
    p.add_argument("--out", type=Path, required=True, help="run folder: checkpoints, metrics, TensorBoard logs")
    p.add_argument("--steps", type=POSITIVE_INT, help="optimizer updates (default: the scheduler's total_num_steps)")
    p.add_argument("--seq-len", type=POSITIVE_INT, default=TrainConfig.seq_len, help="tokens per training sequence")
    p.add_argument("--mask-prob", type=PROBABILITY, default=TrainConfig.mask_prob, help="share of tokens masked")
    p.add_argument("--seed", type=COUNT, default=TrainConfig.seed, help="seed of the weights, data order and masks")
    p.add_argument("--save-every", type=POSITIVE_INT, default=save_every, help="updates between checkpoints")
    p.add_argument("--log-every", type=POSITIVE_INT, default=TrainConfig.log_every, help="updates between log lines")
    p.add_argument("--warmup-ratio", type=FRACTION, default=TrainConfig.warmup_ratio,
                   help='warm-up share where the scheduler says "auto" (paper: 10,000 of 125,000 updates)')
    p.add_argument("--keep-checkpoints", type=POSITIVE_INT, help="keep only the newest K checkpoints (default: all)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --out")
    add_run_args(p)
    add_allow_config_change(p)
    p.add_argument("--local_rank", "--local-rank", type=int, default=0, help=argparse.SUPPRESS)  # deepspeed launcher


def add_allow_config_change(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-config-change", action="store_true",
                   help="with --resume: continue although the DeepSpeed JSON or the warm-up share differs from the "
                        "one run.json records (the change is recorded there); the model's settings never may")


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Where a run logs and how long it waits for peers: options of every training entry point."""
    p.add_argument("--log-root", type=Path,
                   help="TensorBoard log root shared by several runs (default: <out>/tensorboard); this run logs to "
                        "<log-root>/<run-name>")
    p.add_argument("--run-name", help="this run's name under --log-root (default: stage, language and system)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each layer in the backward pass: less activation memory, ~1 more forward pass")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model: faster updates after a compilation of about a minute")
    p.add_argument("--prefetch", type=COUNT, metavar="N",
                   help="micro-batches built ahead on a background thread, pinned on a GPU (default: 2 on a GPU, "
                        "0 on a CPU)")
    p.add_argument("--dist-timeout", type=POSITIVE, default=DEFAULT_DIST_TIMEOUT.total_seconds(), metavar="SECONDS",
                   help="a collective that waits longer than this on a dead or hung peer ends the run with an error "
                        "(every process group; default %(default)g)")


def train_config(args: argparse.Namespace, ds_config: dict[str, Any]) -> TrainConfig:
    steps = args.steps or scheduler_total_steps(ds_config)
    if steps is None:
        raise InputError(f"{args.ds_config}: the scheduler's total_num_steps is not a number; pass --steps")
    check_ds_config(ds_config, str(args.ds_config), steps=steps)  # the whole JSON, before anything starts
    return TrainConfig(steps=steps, seq_len=args.seq_len, mask_prob=args.mask_prob, seed=args.seed,
                       save_every=args.save_every, log_every=args.log_every, keep_checkpoints=args.keep_checkpoints,
                       warmup_ratio=args.warmup_ratio, activation_checkpointing=args.activation_checkpointing,
                       compile=args.compile, prefetch=args.prefetch)


def dist_timeout(args: argparse.Namespace) -> datetime.timedelta:
    return datetime.timedelta(seconds=args.dist_timeout)


def run_main(run: Callable[[argparse.Namespace], dict[str, Any]], args: argparse.Namespace) -> int:
    """Run a stage; bad input exits 2 with one line naming the file and the problem, no traceback."""
    import torch.distributed as dist

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    StopSignals.catch_early_usr1()
    # Ctrl-C means the same however the process was started: a shell starts background jobs with SIGINT ignored,
    # and Python then never raises KeyboardInterrupt; an explicit `kill -INT` should still stop the run cleanly.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # Before any work: a run writes only into a new or empty folder or its own earlier run (folders.py).
        require_output(args.out, own=checkpoint.is_run_folder, what="a training run")
        summary = run(args)
    except (InputError, TrainingError) as err:
        return report(err)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began: stop now, no traceback
        print(f"{Path(sys.argv[0]).name}: interrupted; nothing was saved after the newest checkpoint in {args.out}",
              file=sys.stderr, flush=True)
        return 130
    if dist.is_initialized():
        if dist.get_rank() == 0:
            print(json.dumps(summary, sort_keys=True, default=str), flush=True)
        dist.barrier()
        # Free what sits in reference cycles (the DeepSpeed engine, its tensors) while the process group is alive:
        # left to interpreter shutdown, Gloo state freed late can abort the process ("terminate called without an
        # active exception"; seen once in about a hundred 2-rank CPU runs, not since this collect, not proven).
        gc.collect()
        dist.destroy_process_group()
    return 130 if summary.get("stopped_by") == "SIGINT" else 0  # a shell's code for a Ctrl-C'd command


def exit_now(code: int) -> NoReturn:
    """End a training entry script's process with ``code``, skipping Python's finalization.

    By the time a stage's ``main`` returns, its files are closed (metrics, TensorBoard, checkpoints fsynced) and its
    process group destroyed. What finalization would still do is free torch, DeepSpeed and Gloo state object by
    object: measured at 0.9 s per process on CPU, after every handler registered with ``atexit`` had run, and the moment
    at which Gloo state freed late can abort the process (see ``run_main``). The test suite launches such processes
    about a hundred times. An exception raised by ``main`` never gets here: it exits the normal way, with its traceback.
    Under ``mpirun`` MPI is finalized first (mpi4py would do it at exit): a rank that leaves without it is an abnormal
    termination to the MPI launcher.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

"""Command-line pieces shared by the entry scripts: the training options every stage has, and error handling."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ds_minimodel.errors import InputError, TrainingError, report
from ds_minimodel.folders import require_output
from ds_minimodel.stages.specs import MLMSpec, RunSpec, help_of
from ds_minimodel.train import checkpoint
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


def add_training_args(p: argparse.ArgumentParser, spec: type[MLMSpec]) -> None:
    """The options of every MLM stage (``stages.specs.MLMSpec``) and of every stage (``add_run_spec_args``)."""
    doc, default = _docs_and_defaults(spec)
    p.add_argument("--data", type=Path, required=True, help=doc("data"))
    p.add_argument("--steps", type=POSITIVE_INT, help=doc("steps"))
    p.add_argument("--seq-len", type=POSITIVE_INT, default=default["seq_len"], help=doc("seq_len"))
    p.add_argument("--mask-prob", type=PROBABILITY, default=default["mask_prob"], help=doc("mask_prob"))
    p.add_argument("--keep-checkpoints", type=POSITIVE_INT, help=doc("keep_checkpoints"))
    add_run_spec_args(p, spec)


def add_run_spec_args(p: argparse.ArgumentParser, spec: type[RunSpec]) -> None:
    """The options of every training stage (``stages.specs.RunSpec``), their defaults and help texts the spec's, and
    the entry scripts' own: a spec file instead of options, and the launcher's rank."""
    doc, default = _docs_and_defaults(spec)
    p.add_argument("--ds-config", type=Path, required=True, help=doc("ds_config"))
    p.add_argument("--out", type=Path, required=True, help=doc("out"))
    p.add_argument("--seed", type=COUNT, default=default["seed"], help=doc("seed"))
    p.add_argument("--save-every", type=POSITIVE_INT, default=default["save_every"], help=doc("save_every"))
    p.add_argument("--log-every", type=POSITIVE_INT, default=default["log_every"], help=doc("log_every"))
    p.add_argument("--warmup-ratio", type=FRACTION, default=default["warmup_ratio"], help=doc("warmup_ratio"))
    p.add_argument("--resume", action="store_true", help=doc("resume"))
    p.add_argument("--allow-config-change", action="store_true", help=doc("allow_config_change"))
    p.add_argument("--log-root", type=Path, help=doc("log_root"))
    p.add_argument("--run-name", help=doc("run_name"))
    p.add_argument("--activation-checkpointing", action="store_true", help=doc("activation_checkpointing"))
    p.add_argument("--compile", action="store_true", help=doc("compile"))
    p.add_argument("--prefetch", type=COUNT, metavar="N", help=doc("prefetch"))
    p.add_argument("--dist-timeout", type=POSITIVE, default=default["dist_timeout"], metavar="SECONDS",
                   help=doc("dist_timeout") + " (default %(default)g)")
    p.add_argument("--config", type=Path, metavar="SPEC_JSON",
                   help="a spec file (JSON, ds_minimodel.stages.specs; the pipeline writes one per job) holding "
                        "every setting; no other option goes with it")
    p.add_argument("--local_rank", "--local-rank", type=int, default=0, help=argparse.SUPPRESS)  # deepspeed launcher


def _docs_and_defaults(spec: type[RunSpec]) -> tuple[Callable[[str], str], dict[str, Any]]:
    return functools.partial(help_of, spec), {f.name: f.default for f in dataclasses.fields(spec)}


def spec_from_command_line(parser: argparse.ArgumentParser, spec: type[RunSpec], argv: list[str] | None = None
                           ) -> RunSpec:
    """The stage's spec: read from ``--config SPEC_JSON``, or built from the options. The command-line layer
    ends here: below it, stages take specs."""
    argv = sys.argv[1:] if argv is None else list(argv)
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    first.add_argument("--local_rank", "--local-rank", type=int, help=argparse.SUPPRESS)
    given, rest = first.parse_known_args(argv)
    if given.config is None or "-h" in rest or "--help" in rest:
        return spec_from_args(spec, parser.parse_args(argv))
    if rest:
        parser.error(f"--config {given.config} holds every setting; leave out {' '.join(rest)} (or --config)")
    try:
        return spec.from_file(given.config)
    except InputError as err:
        raise SystemExit(report(err)) from None


def spec_from_args(spec: type[RunSpec], args: argparse.Namespace) -> RunSpec:
    """A spec from parsed options named after its fields."""
    values = vars(args)
    return spec(**{f.name: values[f.name] for f in dataclasses.fields(spec)})


SCHEDULER_START = "Attempting to get learning rate from scheduler before it has started"
"""DeepSpeed's warm-up schedulers log this warning from their own constructor (``lr_schedules.py``: ``__init__``
calls ``get_lr`` before the first step), on every rank at every launch; nothing follows from it."""


def drop_scheduler_start(record: logging.LogRecord) -> bool:
    """A logging filter: every record but ``SCHEDULER_START``."""
    return SCHEDULER_START not in record.getMessage()


SUMMARY_FILE = "summary.json"
"""The run's closing summary (``stages.runner.run_stage``), written by rank 0 into the run folder at each end of a
process (finished or stopped): the figures the closing line prints, and every metric of the last update."""


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    tmp = run_dir / f".{SUMMARY_FILE}.tmp"
    tmp.write_text(json.dumps(summary, sort_keys=True, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / SUMMARY_FILE)


def summary_line(summary: dict[str, Any], run_dir: Path) -> str:
    """One line for a person: how the run ended, its last loss, its scores, and its checkpoint."""
    how = f"stopped by {summary['stopped_by']}" if summary.get("stopped_by") else "finished"
    parts = [f"[{summary.get('run', 'run')}] {how} at update {summary['step']:,} of {summary['steps']:,}"]
    if "loss" in summary:
        parts.append(f"loss {summary['loss']:.4f}")
    dev = summary.get("dev")
    if isinstance(dev, dict):
        parts.append("dev " + ", ".join(f"{k} {v:.2f}" for k, v in dev.items() if isinstance(v, (int, float))))
    parts.append(f"checkpoint {summary['checkpoint']}; every figure in {run_dir / SUMMARY_FILE}")
    return "; ".join(parts)


def run_main(run: Callable[[Any], dict[str, Any]], spec: RunSpec) -> int:
    """Run a stage; bad input exits 2 with one line naming the file and the problem, no traceback."""
    import torch.distributed as dist

    # torch warns once per rank that DeepSpeed's ZeRO calls a deprecated all-gather: DeepSpeed's to change, not ours.
    warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.* is deprecated", category=FutureWarning)
    deepspeed_log = logging.getLogger("DeepSpeed")
    deepspeed_log.setLevel(logging.WARNING)
    if drop_scheduler_start not in deepspeed_log.filters:
        deepspeed_log.addFilter(drop_scheduler_start)
    StopSignals.catch_early_usr1()
    # Ctrl-C means the same however the process was started: a shell starts background jobs with SIGINT ignored,
    # and Python then never raises KeyboardInterrupt; an explicit `kill -INT` should still stop the run cleanly.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # Before any work: a run writes only into a new or empty folder or its own earlier run (folders.py).
        require_output(spec.out, own=checkpoint.is_run_folder, what="a training run")
        summary = run(spec)
    except (InputError, TrainingError) as err:
        return report(err)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began: stop now, no traceback
        print(f"{Path(sys.argv[0]).name}: interrupted; nothing was saved after the newest checkpoint in {spec.out}",
              file=sys.stderr, flush=True)
        return 130
    if dist.is_initialized():
        if dist.get_rank() == 0:
            write_summary(Path(spec.out), summary)
            print(summary_line(summary, Path(spec.out)), flush=True)
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

"""Command-line pieces shared by the entry scripts: a stage's options derived from its spec (tyro), and errors."""
from __future__ import annotations

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

from ds_minimodel.errors import InputError, TrainingError, disk_fault, report
from ds_minimodel.folders import require_output
from ds_minimodel.stages.specs import RunSpec, check_fields
from ds_minimodel.train import checkpoint
from ds_minimodel.train.faults import StopSignals

LAUNCHER_RANK = ("--local_rank", "--local-rank")
"""What the ``deepspeed`` launcher appends to every rank's command line; the rank comes from the environment."""
LAUNCHER_RANK_VALUE = tuple(f"{name}=" for name in LAUNCHER_RANK)


def without_launcher_rank(argv: list[str]) -> list[str]:
    """``argv`` without the launcher's ``--local_rank=N`` (or ``--local_rank N``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LAUNCHER_RANK:
            skip = True
        elif not arg.startswith(LAUNCHER_RANK_VALUE):
            out.append(arg)
    return out


def option_name(field: str) -> str:
    """The command-line option that sets a spec field (``from_`` is ``--from``)."""
    return "--" + field.rstrip("_").replace("_", "-")


CONFIG_HELP = ("Or --config SPEC_JSON alone: a spec file (JSON, ds_minimodel.stages.specs; the pipeline writes one "
               "per job) holding every setting.")


def spec_from_command_line(spec: type[RunSpec], argv: list[str] | None = None, *, description: str = "",
                           checks: dict[str, Callable[[Any], None]] | None = None) -> RunSpec:
    """The stage's spec: read from ``--config SPEC_JSON``, or built from options that tyro derives from the spec's
    fields (names, types, defaults, and the fields' docstrings as help). Every value is then checked against its
    field's annotation, as a spec file's are, and by ``checks`` (``specs.check_fields``: the names a registry
    holds); a bad value exits 2 with one line naming the option. The command-line layer ends
    here: below it, stages take specs."""
    import tyro

    argv = without_launcher_rank(sys.argv[1:] if argv is None else list(argv))
    prog = Path(sys.argv[0]).name
    config = [i for i, arg in enumerate(argv) if arg == "--config" or arg.startswith("--config=")]
    asks_help = "-h" in argv or "--help" in argv
    if config and not asks_help:
        at = config[0]
        path = argv[at].split("=", 1)[1] if "=" in argv[at] else (argv[at + 1] if at + 1 < len(argv) else "")
        rest = argv[:at] + argv[at + (1 if "=" in argv[at] else 2):]
        if not path:
            usage_error(prog, "--config needs a spec file")
        if rest:
            usage_error(prog, f"--config {path} holds every setting; leave out {' '.join(rest)} (or --config)")
        try:
            return spec.from_file(Path(path))
        except InputError as err:
            raise SystemExit(report(err)) from None
    text = f"{description.rstrip()}\n\n{CONFIG_HELP}".replace("``", "`")  # the docstring's reST quotes, plainly
    parsed = tyro.cli(spec, args=argv, prog=prog, description=text,
                      config=(tyro.conf.FlagCreatePairsOff,))
    try:
        checked = spec.from_dict(parsed.to_dict(), "", name=option_name)
        check_fields(checked, checks or {}, name=option_name)
    except InputError as err:
        usage_error(prog, str(err))
    return checked


def usage_error(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


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


keep_process_group = False
"""Set by ``stages.worker`` (many jobs in one launch): the process group outlives each run, for the next."""
last_summary: dict[str, Any] | None = None
"""The closing summary of the run ``run_main`` ran last in this process (``stages.worker`` reads how it ended)."""


def run_main(run: Callable[[Any], dict[str, Any]], spec: RunSpec) -> int:
    """Run a stage; bad input exits 2 with one line naming the file and the problem, no traceback."""
    global last_summary
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
        if dist.is_initialized():  # ranks kept from an earlier job (stages.worker): none writes before all checked
            dist.barrier()
        summary = run(spec)
    except (InputError, TrainingError) as err:
        return report(err)
    except OSError as err:  # a full, read-only or forbidden disk: one line, no traceback
        fault = disk_fault(err)
        if fault is None:
            raise
        return report(fault)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began: stop now, no traceback
        print(f"{Path(sys.argv[0]).name}: interrupted; nothing was saved after the newest checkpoint in {spec.out}",
              file=sys.stderr, flush=True)
        return 130
    last_summary = summary
    if dist.is_initialized():
        if dist.get_rank() == 0:
            write_summary(Path(spec.out), summary)
            print(summary_line(summary, Path(spec.out)), flush=True)
        dist.barrier()
        # Free what sits in reference cycles (the DeepSpeed engine, its tensors) while the process group is alive:
        # left to interpreter shutdown, Gloo state freed late can abort the process ("terminate called without an
        # active exception"; seen once in about a hundred 2-rank CPU runs, not since this collect, not proven).
        gc.collect()
        if not keep_process_group:
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

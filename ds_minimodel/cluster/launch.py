"""Start a training entry point on the hosts of a hostfile, after checking the hostfile and the batch arithmetic.

    python -m ds_minimodel launch --hostfile hostfiles/v100_64gpu run_pretrain.py --ds-config ... --out ...

checks the hostfile (``ds_minimodel.cluster.hostfile``) and that the script's ``--ds-config`` batch sizes fit the
hostfile's total slots, then runs the ``deepspeed`` launcher: over ssh (pdsh) from one node by default, or, with
``--no-ssh --node-rank I``, as one command per node (run it on every node with the same arguments and its own
rank; for clusters without passwordless ssh, and what a scheduler's per-node launch does). Nothing starts when a
check fails. ``--print`` shows the command instead of running it.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ds_minimodel.cluster.hostfile import check_batch, read_hostfile, valid_host
from ds_minimodel.config import known_fields, read_json
from ds_minimodel.errors import InputError, report


def free_port() -> int:
    """A TCP port free on this host now (for a rendezvous on loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def option_value(args: list[str], name: str) -> str | None:
    """The value of ``name`` in an argv ('--x v' or '--x=v'), or None."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def deepspeed_runner() -> str:
    """The ``deepspeed`` launcher: on PATH, else next to this interpreter (a venv not activated)."""
    return shutil.which("deepspeed") or str(Path(sys.executable).parent / "deepspeed")


def local_command(launcher: str, ranks: int, master_port: int, script: str, args: list[str], *,
                  verbose: bool = False) -> list[str]:
    """``ranks`` processes of ``script`` on this machine: through the ``deepspeed`` launcher, or through PyTorch's
    ``torchrun``, which starts one interpreter (and one import of DeepSpeed) fewer and passes SIGTERM on to the
    ranks, which save and exit, or (CPU ranks only) forked from one interpreter that imported everything once
    (``forkrun``). The deepspeed launcher logs errors only (on one machine its INFO lines repeat the command and its
    warning says there is no hostfile, every launch), all it has with ``verbose``."""
    if launcher == "fork":
        return [sys.executable, "-m", "ds_minimodel.stages.forkrun", "--nproc", str(ranks), "--master-port",
                str(master_port), script, *args]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port",
                str(master_port), script, *args]
    if launcher == "deepspeed":
        return [deepspeed_runner(), "--num_gpus", str(ranks), "--master_port", str(master_port),
                f"--log_level={'info' if verbose else 'error'}", script, *args]
    raise ValueError(f"launcher must be 'deepspeed', 'torchrun' or 'fork', got {launcher!r}")


@dataclass(frozen=True, kw_only=True)
class LaunchRequest:
    """One multi-node launch (the ``launch`` command's options; each one's ``--help`` says what it is)."""

    hostfile: Path
    script: str
    script_args: list[str] = dataclasses.field(default_factory=list)
    master_addr: str | None = None
    master_port: int = 29500
    no_ssh: bool = False
    node_rank: int = 0
    launcher: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LaunchRequest:
        return cls(**known_fields(cls, vars(args)))


def deepspeed_command(args: LaunchRequest, hosts: dict[str, int]) -> list[str]:
    runner = deepspeed_runner()
    master = args.master_addr or next(iter(hosts))
    cmd = [runner, "--hostfile", str(args.hostfile), "--master_addr", master, "--master_port", str(args.master_port)]
    if args.no_ssh:
        # Per-node mode: this node starts its own ranks; all nodes must agree on the hostfile and the master.
        cmd += ["--no_ssh", f"--node_rank={args.node_rank}", "--num_nodes", str(len(hosts)),
                "--num_gpus", str(next(iter(hosts.values())))]
    if args.launcher:
        cmd += ["--launcher", args.launcher]
    return [*cmd, args.script, *args.script_args]


ENTRY_SCRIPTS = ("run_pretrain.py", "run_minipost.py", "run_head.py", "run_adapt.py", "run_finetune.py")
"""The package's training scripts (one per ``stages.specs.SPECS`` entry, checked by a test): each requires
--ds-config."""

CHECKOUT = Path(__file__).resolve().parents[2]
"""The folder above the package: a checkout's root, holding the entry scripts, when the package is installed from it
editable (the README's install) or imported from it."""


def entry_script(name: str) -> str:
    """The absolute path of the package's entry script ``name`` (``run_jobs.py`` or one of ``ENTRY_SCRIPTS``), so
    that the pipeline's launches start it from any current directory: the checkout's own, else the copy pip put beside
    this interpreter (setup.cfg's ``scripts``, for an install that is not editable). An absolute path is kept."""
    checkout, beside = CHECKOUT, Path(sysconfig.get_path("scripts"))
    for folder in (checkout, beside):
        if (folder / name).is_file():
            return str(folder / name)
    raise InputError(f"{name}: the package's entry script is neither in {checkout} nor in {beside}; install the "
                     "package from its checkout (pip install -e .)")


def check(args: LaunchRequest) -> dict[str, int]:
    hosts = read_hostfile(args.hostfile)
    if args.no_ssh and len(set(hosts.values())) != 1:
        # DeepSpeed's per-node mode takes one --num_gpus for every node.
        raise InputError(f"{args.hostfile}: --no-ssh needs the same slots on every host, got "
                         + ", ".join(f"{h} x{n}" for h, n in hosts.items()))
    if args.no_ssh and not 0 <= args.node_rank < len(hosts):
        raise InputError(f"{args.hostfile}: --node-rank {args.node_rank} but the hostfile has {len(hosts)} host(s)")
    if args.master_addr is not None and not valid_host(args.master_addr):
        raise InputError(f"--master-addr {args.master_addr!r} is not a host name or IPv4 address")
    if not Path(args.script).is_file():
        raise InputError(f"{args.script}: training script not found")
    ds_config = option_value(args.script_args, "--ds-config")
    spec_file = option_value(args.script_args, "--config")
    if ds_config is None and spec_file is not None and Path(args.script).name in ENTRY_SCRIPTS:
        spec = read_json(spec_file)  # a stage spec (stages.specs): its DeepSpeed JSON; the stage checks the rest
        ds_config = spec.get("ds_config") if isinstance(spec, dict) else None
        if not isinstance(ds_config, str):
            raise InputError(f"{spec_file}: a stage spec names its DeepSpeed JSON as \"ds_config\"; no rank was "
                             "started")
    if ds_config is None and Path(args.script).name in ENTRY_SCRIPTS:
        raise InputError(f"{args.script} needs --ds-config <DeepSpeed JSON> (or --config <spec JSON>) among its "
                         "arguments (after the script name); no rank was started")
    if ds_config is not None:
        check_batch(args.hostfile, hosts, Path(ds_config))
    return hosts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ds-minimodel launch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hostfile", type=Path, required=True, help="DeepSpeed hostfile: one 'host slots=N' line per node")
    p.add_argument("--master-addr", help="address every rank reaches the first rank at (default: the first host)")
    p.add_argument("--master-port", type=int, default=29500, help="port of the rendezvous on the master host")
    p.add_argument("--no-ssh", action="store_true", help="start only this node's ranks (run once per node)")
    p.add_argument("--node-rank", type=int, default=0, help="with --no-ssh: this node's line in the hostfile, from 0")
    p.add_argument("--launcher", help="DeepSpeed's multi-node launcher (pdsh, openmpi, mvapich, slurm); default pdsh")
    p.add_argument("--print", action="store_true", help="print the command instead of running it")
    p.add_argument("script", help=", ".join(ENTRY_SCRIPTS[:-1]) + f" or {ENTRY_SCRIPTS[-1]}")
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    request = LaunchRequest.from_args(args)  # the command line ends here
    try:
        cmd = deepspeed_command(request, check(request))
    except InputError as err:
        return report(err)
    print(" ".join(cmd), flush=True)
    if args.print:
        return 0
    os.execv(cmd[0], cmd)

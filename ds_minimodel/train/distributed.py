"""Joining the process group, whichever launcher started the ranks (deepspeed, torchrun, srun, mpirun, plain python)."""
from __future__ import annotations

import datetime
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ds_minimodel.cluster import slurm
from ds_minimodel.cluster.launch import free_port


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int

    def seed_ranks_apart(self, seed: int) -> None:
        """Seed torch's global RNG differently on each rank, deterministically from the run's seed: dropout masks
        differ between ranks and are the same on every rerun (and every resume) of the run."""
        torch.manual_seed(seed * 1_000_003 + 1 + self.rank)


DEFAULT_DIST_TIMEOUT = datetime.timedelta(minutes=5)


# DeepSpeed's accelerators other than CUDA, by the package each needs (deepspeed.accelerator.real_accelerator).
_OTHER_ACCELERATORS = ("intel_extension_for_pytorch", "torch_npu", "torch_sdaa", "habana_frameworks", "torch_mlu",
                       "torch_supa", "torch_xmlir")


def cpu_only() -> bool:
    """Whether DeepSpeed would find no accelerator here and fall back to the CPU (saying so in every process)."""
    mps = getattr(torch.backends, "mps", None)
    return (not torch.cuda.is_available() and not (mps is not None and mps.is_available())
            and not any(importlib.util.find_spec(name) for name in _OTHER_ACCELERATORS))


def init_distributed(timeout: datetime.timedelta = DEFAULT_DIST_TIMEOUT) -> DistInfo:
    """Join (or create) the process group, whichever way the processes were started.

    - ``deepspeed`` / ``torchrun`` with RANK set: use the environment as given.
    - ``srun`` (one task per rank): rank, size and master address from the SLURM_* variables.
    - ``mpirun``: Open MPI's OMPI_COMM_WORLD_* and DeepSpeed's MPI discovery (mpi4py) for the master address.
    - plain ``python``: a one-rank group on loopback (DeepSpeed would otherwise try MPI discovery).

    ``timeout`` bounds every collective on every process group, so a dead or hung peer ends the run with an error
    instead of a hang (see ``_bound_every_group``).
    """
    import deepspeed

    native_build_env(os.environ)
    if dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    env = os.environ
    if "RANK" not in env:
        env.update(slurm.rank_env(env))
    mpi = "RANK" not in env and "OMPI_COMM_WORLD_RANK" in env
    if "RANK" not in env and not mpi:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", str(free_port()))
    _bound_every_group(timeout)
    skip_inference_comm_op()
    deepspeed.init_distributed(auto_mpi_discovery=mpi, timeout=timeout, verbose=False)
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(env.get("LOCAL_RANK", 0)))


def skip_inference_comm_op() -> str | None:
    """Keep DeepSpeed from building and loading its CPU shared-memory communication op; returns the op's name where
    it was skipped (on the CPU accelerator), else None.

    On CPU, ``deepspeed.init_distributed`` compiles that op with g++ the first time a process starts its group
    (about 85 s on 2 cores, needing a C++ compiler on the machine), then on every launch loads it, prints "built
    successfully" from each rank and maps a 69 MB /dev/shm buffer per rank, which it never unlinks. It serves one
    function, ``inference_all_reduce``: the all-reduce of tensor-parallel inference (``deepspeed.module_inject``),
    which training never calls; training's collectives go through torch.distributed. DeepSpeed decides from its
    per-process table of compatible ops (``deepspeed.ops.__compatible_ops__``, kept as one editable dict); marked
    incompatible there, the op is neither built nor loaded, and ``inference_all_reduce`` would use torch's
    all-reduce."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        return None
    builder = accelerator.create_op_builder("ShareMemCommBuilder")
    if builder is None:
        return None
    deepspeed.ops.__compatible_ops__[builder.NAME] = False
    return builder.NAME


def native_build_env(env: dict[str, str] | os._Environ) -> None:
    """Make ``env`` one in which DeepSpeed's JIT op builds (FusedAdam on a GPU, any op a DeepSpeed config asks for)
    find what they built last time: a readable ``TORCH_CUDA_ARCH_LIST`` (``readable_arch_list``) and this
    environment's own ninja first on PATH (``own_ninja_first``)."""
    readable_arch_list(env)
    own_ninja_first(env)


def own_ninja_first(env: dict[str, str] | os._Environ) -> None:
    """Put the ninja installed beside this interpreter (the pip package DeepSpeed depends on) first on ``env``'s PATH.

    torch builds an op by running whichever ``ninja`` PATH finds, in one build folder per op. Two ninja versions
    do not share that folder: ninja 1.12 changed how its build log hashes commands, so a system ninja (Debian 12:
    1.11) and the pip one (1.13) each find every command changed since the other built, and rebuild the op
    (measured: DeepSpeed's CPU comm op rebuilt in full, about 85 s on this 2-core machine, at each switch between a
    shell with the venv's bin on PATH and one without). With the interpreter's own ninja always first, every
    process of one environment builds with the same ninja, and an op is built once."""
    own = Path(sys.executable).parent
    if not (own / "ninja").is_file():
        return
    entries = env.get("PATH", "").split(os.pathsep)
    if entries[0] != str(own):
        env["PATH"] = os.pathsep.join([str(own), *(e for e in entries if e and e != str(own))])


def readable_arch_list(env: dict[str, str] | os._Environ) -> str | None:
    """Make ``TORCH_CUDA_ARCH_LIST`` in ``env`` one that DeepSpeed's JIT op builds can read; returns the value it had
    if it was changed. DeepSpeed 0.19 parses each entry as integers ("9.0", "8.6+PTX") and fails on an
    architecture-specific entry such as "9.0a", which CUDA images for Hopper set ("ValueError: invalid literal for
    int() with base 10: '0a'" when FusedAdam compiles, measured on the H200 machine). Such an entry becomes its
    plain form ("9.0"), whose code runs on the same GPUs."""
    value = env.get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return None
    entries = value.replace(" ", ";").split(";")
    readable = [re.sub(r"^(\d+)\.(\d+)[a-z]+", r"\1.\2", e.strip()) for e in entries if e.strip()]
    if ";".join(readable) == value:
        return None
    env["TORCH_CUDA_ARCH_LIST"] = ";".join(dict.fromkeys(readable))
    return value


def _bound_every_group(timeout: datetime.timedelta) -> None:
    """Make ``timeout`` the default of every process group created from now on.

    ``deepspeed.init_distributed(timeout=...)`` reaches only the main group. DeepSpeed's data-parallel (and ZeRO,
    sequence- and expert-parallel) groups come from ``dist.new_group(ranks)`` with no timeout, which torch fills
    from its module-level defaults: 30 minutes for Gloo, 10 for NCCL. Measured on two hosts (network namespaces):
    with a frozen (SIGSTOPped) peer the other rank hung in the gradient-clipping all-reduce, on DeepSpeed's
    data-parallel group, for the full 30 minutes despite ``init_distributed(timeout=20 s)``; with these defaults
    lowered it failed after ~22 s. ``new_group`` reads the defaults at call time, hence setting them here.
    """
    import torch.distributed.distributed_c10d as c10d

    c10d.default_pg_timeout = timeout
    if isinstance(getattr(c10d, "default_pg_nccl_timeout", None), datetime.timedelta):
        c10d.default_pg_nccl_timeout = timeout



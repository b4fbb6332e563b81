"""One setup path for every training stage: ``run_stage(spec)``.

Each stage module contributes a ``build(spec, context) -> Built``: its model, data stream, ``Stage`` and what its
``run.json`` records beyond what every stage records. ``run_stage`` does the rest, the same way for all: read the
DeepSpeed JSON, start the process group, resolve the batch, record the run (rank 0) and wait for it, seed the
ranks apart, train, and summarise.
"""
from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel.config import TrainConfig
from ds_minimodel.ds_config import BatchSizes, load_ds_config, resolve_batch, scheduler_total_steps, uses_bf16
from ds_minimodel.errors import InputError
from ds_minimodel.stages.specs import MLMSpec, RunSpec
from ds_minimodel.train.distributed import DistInfo, init_distributed
from ds_minimodel.train.ds_validate import check_ds_config
from ds_minimodel.train.engine import Stage, TrainResult, train
from ds_minimodel.train.run_record import write_run_description


@dataclass
class Context:
    """What ``run_stage`` has set up when a stage's ``build`` runs."""

    ds_config: dict[str, Any]
    info: DistInfo
    batch: BatchSizes
    train_cfg: TrainConfig | None
    """An MLM stage's training settings, checked with the DeepSpeed JSON before the process group started; None
    for a stage whose update count follows from its data (Step 3)."""


@dataclass
class Built:
    """A stage, ready to train."""

    stage: Stage
    stream: Any
    train_cfg: TrainConfig
    record: dict[str, Any]
    """What ``run.json`` records beyond the keys every stage records (``run_record.IDENTITY_KEYS`` among them)."""
    banner: str = ""
    """Rank 0's line before training: what is about to train."""
    ds_config: dict[str, Any] | None = None
    """The DeepSpeed JSON as this stage changed it (Step 2's fixed anchors drop weight decay); None: unchanged."""
    summary: Callable[[TrainResult], dict[str, Any]] = field(default=lambda result: {})
    """What the stage adds to the run's closing summary."""


Builder = Callable[[Any, Context], Built]


@dataclass
class Outcome:
    """What a stage's run gives back: the summary rank 0 prints, and the built stage and training result for
    callers in the same process (tests inspect the trained model and the optimizer)."""

    summary: dict[str, Any]
    built: Built
    result: TrainResult


def train_config(spec: RunSpec, ds_config: dict[str, Any], steps: int | None = None, **shape: Any) -> TrainConfig:
    """A stage's training settings from its spec, after the whole DeepSpeed JSON is checked against them. An MLM
    stage's update count and shape come from its spec (``steps``: the scheduler's when it gives none); another
    stage passes ``steps`` and its ``shape`` (``seq_len``...)."""
    if isinstance(spec, MLMSpec):
        steps = spec.steps or scheduler_total_steps(ds_config)
        if steps is None:
            raise InputError(f"{spec.ds_config}: the scheduler's total_num_steps is not a number; pass --steps")
        shape = {"seq_len": spec.seq_len, "mask_prob": spec.mask_prob, "packing": spec.packing,
                 "keep_checkpoints": spec.keep_checkpoints}
    check_ds_config(ds_config, str(spec.ds_config), steps=steps)
    return TrainConfig(steps=steps, seed=spec.seed, save_every=spec.save_every, log_every=spec.log_every,
                       warmup_ratio=spec.warmup_ratio, activation_checkpointing=spec.activation_checkpointing,
                       qkv_views=spec.qkv_views, compile=spec.compile, prefetch=spec.prefetch,
                       prefetch_process=spec.prefetch_process, profile_updates=spec.profile_updates, **shape)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX-512 BF16 or AMX tiles, as PyTorch detects them)."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def fp32_twin(ds_config: dict[str, Any], path: Path) -> Path | None:
    """The file beside ``path`` named with fp32 for bf16 (cpu_bf16_reference.json: cpu_fp32_reference.json) where it
    holds ``ds_config`` but for the bf16 section, else None."""
    twin = path.with_name(path.name.replace("bf16", "fp32", 1))
    if twin == path or not twin.is_file():
        return None
    try:
        same = load_ds_config(twin) == {key: value for key, value in ds_config.items() if key != "bf16"}
    except InputError:
        return None
    return twin if same else None


def bf16_notice(ds_config: dict[str, Any], source: Path | str, *, cuda: bool, native: bool) -> str | None:
    """What to say before a CPU run in bf16 on a CPU without native bf16, where its matrix products are emulated,
    several times slower than fp32 (README, "Testing"); None where there is nothing to say."""
    if cuda or native or not uses_bf16(ds_config):
        return None
    twin = fp32_twin(ds_config, Path(source))
    instead = (f"{twin} is the same file in fp32" if twin is not None
               else "ds_configs/cpu_fp32.json (or your config with bf16 off) trains the same stage in fp32")
    return (f"note: {source} trains in bf16, but this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native "
            f"bf16 (AVX-512 BF16 or AMX): its matrix products will run several times slower than in fp32; {instead}")


def run_stage(spec: RunSpec, build: Builder) -> Outcome:
    """Run one stage on every rank from its spec."""
    started = time.perf_counter()
    ds_config = load_ds_config(spec.ds_config)
    # The whole DeepSpeed JSON is checked before the process group starts, where the update count is known.
    train_cfg = train_config(spec, ds_config) if isinstance(spec, MLMSpec) else None
    info = init_distributed(datetime.timedelta(seconds=spec.dist_timeout))
    batch = resolve_batch(ds_config, info.world_size, source=str(spec.ds_config))
    notice = bf16_notice(ds_config, spec.ds_config, cuda=torch.cuda.is_available(), native=cpu_has_native_bf16())
    if notice and info.rank == 0:
        print(notice, flush=True)
    built = build(spec, Context(ds_config=ds_config, info=info, batch=batch, train_cfg=train_cfg))
    ds_config = built.ds_config or ds_config
    description = {
        "stage": spec.STAGE, **built.record, "seed": spec.seed, "global_batch": batch.global_batch,
        "ds_config": ds_config, "ds_config_path": str(spec.ds_config), "train": built.train_cfg.to_dict(),
        "world_size": info.world_size, "spec": spec.to_dict(),
    }
    if info.rank == 0:
        write_run_description(spec.out, description, resume=spec.resume,
                              allow_config_change=spec.allow_config_change)
        if built.banner:
            print(built.banner, flush=True)
    dist.barrier()
    info.seed_ranks_apart(spec.seed)
    result = train(built.stage, built.stream, ds_config=ds_config, train_cfg=built.train_cfg, run_dir=Path(spec.out),
                   log_root=spec.log_root, resume=spec.resume, batch=batch)
    summary = {"run": built.stage.name, "step": result.step, "steps": built.train_cfg.steps,
               "tokens": result.tokens, "flops": result.flops,
               "checkpoint": str(result.checkpoint), "stopped_by": result.stopped_by,
               "update_seconds": result.update_seconds, "save_seconds": result.save_seconds, **result.last_metrics,
               **built.summary(result)}
    summary["job_seconds"] = time.perf_counter() - started  # set-up, updates, checkpoints and the summary's own work
    return Outcome(summary=summary, built=built, result=result)

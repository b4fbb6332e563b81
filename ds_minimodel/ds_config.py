"""A ``ds_configs/`` JSON: reading it, and the batch arithmetic it owns (STYLE habit 4). No torch here, so that the
cluster tools (hostfile and launch checks) can do the same arithmetic without importing it."""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any

from ds_minimodel.config import read_json
from ds_minimodel.errors import InputError

BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


@dataclass(frozen=True)
class BatchSizes:
    micro: int
    """Sequences per rank per forward pass."""
    accumulation: int
    """Micro-batches per optimizer update."""
    world_size: int
    """Data-parallel ranks."""

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer update (the paper's B = 2,048)."""
        return self.micro * self.accumulation * self.world_size


def load_ds_config(path: str | os.PathLike) -> dict[str, Any]:
    config = read_json(path)
    if not isinstance(config, dict):
        raise InputError(f"{path}: a DeepSpeed config must be a JSON object")
    for key in BATCH_KEYS:
        value = config.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise InputError(f"{path}: {key} must be a positive integer, got {value!r}")
    for key in ("fp16", "bf16", "bfloat16"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise InputError(f'{path}: {key} must be an object such as {{"enabled": true}}, got {config[key]!r}')
        if "enabled" in (config.get(key) or {}) and not isinstance(config[key]["enabled"], bool):
            # DeepSpeed reads the string "false" as false; Python's truth would call it true: the two must agree.
            raise InputError(f"{path}: {key}.enabled must be true or false, got {config[key]['enabled']!r}")
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict) or zero.get("stage", 0) not in (0, 1, 2, 3) or isinstance(zero.get("stage"), bool):
        raise InputError(f"{path}: zero_optimization.stage must be 0, 1, 2 or 3, got "
                         f"{zero.get('stage') if isinstance(zero, dict) else zero!r}")
    if uses_fp16(config) and not zero.get("stage"):
        # Measured with DeepSpeed 0.19.8: engine.backward() scales the loss only for ZeRO optimizers, while the
        # stage-0 fp16 optimizers divide every gradient by the loss scale in step(), so each update is loss-scale
        # times too small and nothing overflows however high the scale (deepspeedai/DeepSpeed PR 8393, open).
        raise InputError(
            f"{path}: fp16 needs ZeRO stage 1 or higher: under ZeRO stage 0 DeepSpeed's engine never applies the "
            "loss scale that its fp16 optimizer divides out, so training silently stalls. Set "
            '"zero_optimization": {"stage": 1} (on one GPU it costs the same as stage 0), or use bf16')
    bf16 = bf16_section(config)
    if isinstance(bf16, dict) and "check_grad_overflow" in bf16 and not isinstance(bf16["check_grad_overflow"], bool):
        # DeepSpeed would read "false" or 0 as false too; the loop's save guard keys on the JSON boolean alone.
        raise InputError(f"{path}: bf16.check_grad_overflow must be true or false, got "
                         f"{bf16['check_grad_overflow']!r}")
    return config


def resolve_batch(ds_config: dict[str, Any], world_size: int, *, source: str) -> BatchSizes:
    """Check train_batch_size = micro x accumulation x world size; derive the one missing value.

    ``world_size`` is the real number of ranks (or a hostfile's total slots before launch). The error names the
    file and every number involved, since the usual cause is a config written for another cluster size.
    """
    total, micro, accum = (ds_config.get(k) for k in BATCH_KEYS)
    given = sum(v is not None for v in (total, micro, accum))
    if given < 2:
        raise InputError(f"{source}: give at least two of {', '.join(BATCH_KEYS)}")
    def derive(given_name: str, given: int) -> int:
        """train_batch_size / (given x world size), which must divide exactly."""
        derived, rest = divmod(total, given * world_size)
        if rest or derived == 0:
            raise InputError(
                f"{source}: train_batch_size {total} is not divisible by {given_name} {given} "
                f"x world size {world_size} = {given * world_size}")
        return derived

    if micro is None:
        micro = derive("gradient_accumulation_steps", accum)
    elif accum is None:
        accum = derive("train_micro_batch_size_per_gpu", micro)
    elif total is not None and total != micro * accum * world_size:
        raise InputError(
            f"{source}: train_batch_size {total} != train_micro_batch_size_per_gpu {micro} x "
            f"gradient_accumulation_steps {accum} x world size {world_size} = {micro * accum * world_size}")
    return BatchSizes(micro=micro, accumulation=accum, world_size=world_size)


def scheduler_params(ds_config: dict[str, Any]) -> dict[str, Any]:
    """The scheduler's params object itself (edits reach the config), or an empty dict where the config has none or
    where either is not an object (``ds_validate.scheduler_problems`` names that)."""
    scheduler = ds_config.get("scheduler")
    params = scheduler.get("params") if isinstance(scheduler, dict) else None
    return params if isinstance(params, dict) else {}


def scheduler_total_steps(ds_config: dict[str, Any]) -> int | None:
    total = scheduler_params(ds_config).get("total_num_steps")
    return total if isinstance(total, int) else None  # "auto": the run's own update count (fill_schedule)


def fill_schedule(ds_config: dict[str, Any], steps: int, warmup_ratio: float) -> dict[str, Any]:
    """A copy of the config with the scheduler's ``"auto"`` lengths filled in: ``total_num_steps`` becomes the run's
    update count and ``warmup_num_steps`` that times ``warmup_ratio`` (at least 1), so one JSON serves runs of any
    length, as HF Trainer's ``"auto"`` values do."""
    config = copy.deepcopy(ds_config)
    params = scheduler_params(config)
    if params.get("total_num_steps") == "auto":
        params["total_num_steps"] = steps
    if params.get("warmup_num_steps") == "auto":
        params["warmup_num_steps"] = max(1, round(warmup_ratio * steps))
    return config


def uses_fp16(ds_config: dict[str, Any]) -> bool:
    return bool((ds_config.get("fp16") or {}).get("enabled"))


def bf16_section(ds_config: dict[str, Any]) -> Any:
    """The bf16 section as DeepSpeed reads it: ``bf16``, or where that is absent its old name ``bfloat16``."""
    section = ds_config.get("bf16")
    return ds_config.get("bfloat16") if section is None else section


def uses_bf16(ds_config: dict[str, Any]) -> bool:
    return bool((bf16_section(ds_config) or {}).get("enabled"))


def half_precision(ds_config: dict[str, Any]) -> bool:
    """fp16 or bf16: DeepSpeed then converts the whole module, frozen parameters included, to 16 bits."""
    return uses_fp16(ds_config) or uses_bf16(ds_config)


def unchecked_bf16(ds_config: dict[str, Any]) -> bool:
    """bf16 with DeepSpeed's gradient overflow check turned off (``"bf16": {"check_grad_overflow": false}``): an update
    with an infinite or NaN gradient is then applied, not skipped (measured on an H200: 5% less time per update)."""
    return uses_bf16(ds_config) and bf16_section(ds_config).get("check_grad_overflow", True) is False



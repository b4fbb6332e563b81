"""The whole DeepSpeed JSON checked before any work: what DeepSpeed itself would refuse only once the engine builds
the optimizer and scheduler (names, rates, betas), DeepSpeed's own config classes run without an engine (precision
flags, ZeRO and the other sections' fields), and a schedule shorter than the run. Every problem found is reported,
one line each, naming the file and the key. ``ds_config.py`` keeps the batch arithmetic, torch-free for the cluster
tools. DeepSpeed is imported where it is used, as ``engine.train`` does: importing it takes seconds and prints
its accelerator choice, which a command refused for a bad option should not wait for or show.
"""
from __future__ import annotations

import copy
from numbers import Real
from typing import Any

import torch

from ds_minimodel.ds_config import scheduler_total_steps, uses_bf16, uses_fp16
from ds_minimodel.errors import InputError


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def optimizer_problems(config: dict[str, Any]) -> list[str]:
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    optimizer = config.get("optimizer")
    if optimizer is None:
        return [('no optimizer section: every stage takes its optimizer from this file (e.g. "optimizer": {"type": '
                 '"AdamW", "params": {"lr": 1e-4}}); DeepSpeed would build an engine without one and fail at the '
                 "first update")]
    if not isinstance(optimizer, dict):
        return [f"optimizer must be an object with type and params, got {optimizer!r}"]
    name, params = optimizer.get("type"), optimizer.get("params") or {}
    problems = []
    if not isinstance(name, str) or (name.lower() not in DEEPSPEED_OPTIMIZERS and not hasattr(torch.optim, name)):
        problems.append(f"optimizer.type {name!r} is neither one of DeepSpeed's ({', '.join(DEEPSPEED_OPTIMIZERS)}) "
                        "nor a torch.optim class")
    if not isinstance(params, dict):
        return [*problems, f"optimizer.params must be an object, got {params!r}"]
    if "lr" in params and not (_number(params["lr"]) and params["lr"] > 0):
        problems.append(f"optimizer.params.lr must be a positive number, got {params['lr']!r}")
    if "betas" in params and not (isinstance(params["betas"], (list, tuple)) and len(params["betas"]) == 2
                                  and all(_number(b) and 0 <= b < 1 for b in params["betas"])):
        problems.append(f"optimizer.params.betas must be two numbers in [0, 1), got {params['betas']!r}")
    for key, low, strict in (("eps", 0, True), ("weight_decay", 0, False)):
        if key in params and not (_number(params[key]) and (params[key] > low if strict else params[key] >= low)):
            problems.append(f"optimizer.params.{key} must be a {'positive' if strict else 'non-negative'} number, "
                            f"got {params[key]!r}")
    return problems


# DeepSpeed's modules that name the keys its config reads; one that an installed version lacks is skipped.
_KEY_MODULES = ("runtime.constants", "runtime.zero.config", "runtime.activation_checkpointing.config",
                "runtime.data_pipeline.constants", "runtime.swap_tensor.constants", "profiling.constants",
                "autotuning.constants", "checkpoint.constants", "compile.constants", "comm.constants", "monitor.config")


def key_problems(config: dict[str, Any]) -> list[str]:
    """Top-level keys DeepSpeed does not know that are a typo of one it does. DeepSpeed ignores unknown keys, so
    ``train_batch_sise`` would silently leave the batch to its defaults. Unknown keys not close to a known one are
    left alone: DeepSpeed has sections this list may not name."""
    import difflib
    import importlib

    known: set[str] = set()
    for name in _KEY_MODULES:
        try:
            module = importlib.import_module(f"deepspeed.{name}")
        except ImportError:
            continue
        known |= {v for k, v in vars(module).items()
                  if k.isupper() and isinstance(v, str) and v.replace("_", "").isalnum()}
    problems = []
    for key in config:
        close = [] if key in known else difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if close:
            problems.append(f"{key!r} is not a DeepSpeed key (DeepSpeed would ignore it); did you mean {close[0]!r}?")
    return problems


def scheduler_problems(config: dict[str, Any]) -> list[str]:
    from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES

    scheduler = config.get("scheduler")
    if scheduler is None:
        return []
    if not isinstance(scheduler, dict):
        return [f"scheduler must be an object with type and params, got {scheduler!r}"]
    name, params = scheduler.get("type"), scheduler.get("params", {})
    params = {} if params is None else params
    problems = []
    if name not in VALID_LR_SCHEDULES and not (isinstance(name, str) and hasattr(torch.optim.lr_scheduler, name)):
        problems.append(f"scheduler.type {name!r} is neither one of DeepSpeed's ({', '.join(VALID_LR_SCHEDULES)}) "
                        "nor a torch.optim.lr_scheduler class")
    if not isinstance(params, dict):
        return [*problems, f"scheduler.params must be an object, got {params!r}"]
    for key, value in params.items():
        if key.endswith("_lr") and not (_number(value) and value >= 0):
            problems.append(f"scheduler.params.{key} must be a non-negative number, got {value!r}")
        if key.endswith("_steps") and value != "auto" and not (isinstance(value, int) and not isinstance(value, bool)
                                                               and value >= 0):
            problems.append(f'scheduler.params.{key} must be a whole number of updates or "auto", got {value!r}')
    low, high = params.get("warmup_min_lr"), params.get("warmup_max_lr")
    if _number(low) and _number(high) and low > high:
        problems.append(f"scheduler.params.warmup_min_lr {low} is above warmup_max_lr {high}")
    return problems


def deepspeed_problems(config: dict[str, Any]) -> list[str]:
    """What DeepSpeed's config class refuses, built as the engine builds it but for one rank: the batch keys and the
    scheduler's "auto" lengths are set to values it accepts (``ds_config.resolve_batch`` checks the batch)."""
    import pydantic
    from deepspeed.runtime.config import DeepSpeedConfig

    probe = copy.deepcopy(config)
    # Micro-batch and accumulation only: DeepSpeed derives the global batch from them and the world size it finds
    # (one rank before the process group starts, every rank after).
    probe.pop("train_batch_size", None)
    probe.update(train_micro_batch_size_per_gpu=probe.get("train_micro_batch_size_per_gpu") or 1,
                 gradient_accumulation_steps=1)
    params = (probe.get("scheduler") or {}).get("params")
    if isinstance(params, dict):
        params.update({k: 1 for k, v in params.items() if v == "auto"})
    try:
        DeepSpeedConfig(probe)
    except pydantic.ValidationError as err:
        return [f"{err.title}: {'.'.join(map(str, e['loc'])) or '(section)'}: {e['msg']}" for e in err.errors()]
    except (AssertionError, ValueError, TypeError, KeyError) as err:
        return [f"DeepSpeed refuses it: {err}"]
    return []


def check_ds_config(config: dict[str, Any], source: str, *, steps: int | None = None) -> None:
    """Raise one InputError listing every problem of a loaded DeepSpeed JSON (``ds_config.load_ds_config``);
    ``steps``: the run's update count, which the scheduler's total_num_steps must not be below."""
    problems = key_problems(config) + optimizer_problems(config) + scheduler_problems(config)
    if uses_fp16(config) and uses_bf16(config):
        problems.append("fp16.enabled and bf16.enabled are both true; choose one (bf16 where the hardware has it)")
    clip = config.get("gradient_clipping")
    if clip is not None and not (_number(clip) and clip >= 0):
        problems.append(f"gradient_clipping must be a non-negative number, got {clip!r}")
    total = scheduler_total_steps(config)
    if steps is not None and total is not None and steps > total:
        problems.append(f"the run asks for {steps} updates but scheduler.params.total_num_steps is {total} (the "
                        "learning rate would be 0 after it); lower the steps or raise total_num_steps")
    if not problems:  # DeepSpeed's own messages only where ours found nothing: theirs repeat ours less clearly
        problems = deepspeed_problems(config)
    if problems:
        raise InputError("\n".join(f"{source}: {p}" for p in problems))

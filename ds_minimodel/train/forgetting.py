"""Active forgetting in Step 1 (Chen, Marchisio et al., 2023: "Improving language plasticity via pretraining with
active forgetting"): every K updates the token embeddings are drawn afresh and their optimizer state cleared, so
that the body learns to work with embeddings it has not seen for long, which is what Step 2 later gives it.

The embeddings sit in an optimizer parameter group of their own (``param_groups``), which is what lets their
state be cleared without touching the body's. A reset writes the new rows into the model's copy, into the fp32
master copy where DeepSpeed keeps one (ZeRO stages 1-2, the bf16 optimizer: ``deepspeed.utils.
safe_set_full_fp32_param``; bf16 under ZeRO 0: ``checkpoint.unfused_masters``), zeroes Adam's moments for them and
restarts that group's step count. The rows are drawn from a generator seeded by (seed, update), so a run resumed
across a reset draws the same rows.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ds_minimodel.errors import InputError
from ds_minimodel.train.checkpoint import unfused_masters


def param_groups(model: nn.Module) -> list[dict[str, Any]]:
    """The trainable parameters in two optimizer groups: everything but the token embeddings, then those."""
    embeddings = model.embeddings.tokens.weight
    rest = [p for p in model.parameters() if p.requires_grad and p is not embeddings]
    return [{"params": rest}, {"params": [embeddings]}]


class ActiveForgetting:
    """Called by the training loop after every update (``Stage.after_update``); resets at multiples of ``every``
    below ``total`` (the final embeddings are trained for the last ``every`` updates, never reset at the end)."""

    def __init__(self, every: int, total: int, seed: int, std: float) -> None:
        if every < 1:
            raise InputError(f"--forget-every must be at least 1 (0 turns forgetting off), got {every}")
        self.every, self.total, self.seed, self.std = every, total, seed, std

    def resets(self) -> list[int]:
        return list(range(self.every, self.total, self.every))

    def __call__(self, engine: Any, step: int) -> None:
        if step % self.every == 0 and step < self.total:
            reset_embeddings(engine, engine.module, self.rows(step, engine.module.embeddings.tokens.weight.shape))

    def rows(self, step: int, shape: torch.Size) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return torch.empty(shape).normal_(0.0, self.std, generator=generator)


def reset_embeddings(engine: Any, model: nn.Module, rows: torch.Tensor) -> None:
    """Put ``rows`` (fp32, CPU) in as the token embeddings everywhere a copy is kept, and clear their optimizer
    state: Adam's moments zeroed and the embedding group's step count at 0."""
    from deepspeed.utils import safe_set_full_fp32_param

    weight = model.embeddings.tokens.weight
    optimizer = engine.optimizer
    # The optimizer that holds the state: DeepSpeed's mixed-precision and ZeRO wrappers keep it in .optimizer.
    base = getattr(optimizer, "optimizer", optimizer)
    mastered = hasattr(weight, "_hp_mapping")
    unfused = [master for p, master in unfused_masters(optimizer) if p is weight]  # bf16 under ZeRO 0
    if hasattr(weight, "ds_id") or not (mastered or unfused or isinstance(optimizer, torch.optim.Optimizer)):
        raise InputError("active forgetting needs ZeRO stage 0-2 with bf16 or fp32, or stage 1-2 with fp16; this "
                         f"run's optimizer ({type(optimizer).__name__}) keeps copies it cannot reset")
    with torch.no_grad():
        weight.data.copy_(rows.to(device=weight.device, dtype=weight.dtype))
        if mastered:
            safe_set_full_fp32_param(weight, rows.to(weight.device))
        for master in unfused:
            master.copy_(rows.to(master.device))
        # The group's state: the embeddings alone (their own tensor, or the flat fp32 partition a ZeRO or bf16
        # optimizer made of that group), so zeroing every tensor of it clears exactly their moments.
        group = base.param_groups[-1]
        for param in group["params"]:
            state = base.state.get(param, {})
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    value.zero_()  # Adam's moments (no-master case) and a tensor step count
                elif key == "step":
                    state[key] = 0
        if "step" in group:
            group["step"] = 0  # optimizers that count steps per group (DeepSpeed's FusedAdam, CPUAdam)

"""One ``log(metrics, step)`` interface with TensorBoard and JSONL backends (rank 0 writes; other ranks do nothing),
and the one all-reduce per update that gives every rank the same figures (``reduce_update``).

Every stage writes under one log root (``<run>/tensorboard/<run name>``), so ``tensorboard --logdir`` on a parent
folder shows all runs side by side.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel.config import atomic_open
from ds_minimodel.ds_config import BatchSizes


class MetricsLogger:
    def __init__(self, jsonl_path: Path, tensorboard_dir: Path | None, *, enabled: bool, resume_step: int = 0):
        """``resume_step``: a resumed run drops records after its checkpoint, so a crash leaves no duplicate steps."""
        self.enabled = enabled
        self._jsonl = None
        self._writer = None
        if not enabled:
            return
        jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step and jsonl_path.exists():
            kept = [line for line in jsonl_path.read_text(encoding="utf-8").splitlines()
                    if _step_of(line) is not None and _step_of(line) <= resume_step]
            with atomic_open(jsonl_path) as f:  # the run's only loss history: never left half-written
                f.write("".join(line + "\n" for line in kept))
        elif not resume_step:
            jsonl_path.unlink(missing_ok=True)
        self._jsonl = open(jsonl_path, "a", encoding="utf-8")
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step hides events a crashed run wrote after the checkpoint it resumes from.
            self._writer = SummaryWriter(str(tensorboard_dir), purge_step=resume_step + 1 if resume_step else None)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if not self.enabled:
            return
        record = {"step": step, **metrics}
        self._jsonl.write(json.dumps(record, sort_keys=True, default=float) + "\n")
        self._jsonl.flush()
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._writer is not None:
            self._writer.close()


def last_logged_step(jsonl_path: Path, *, tail_bytes: int = 4096) -> int | None:
    """The step of the last whole record in a run's metrics.jsonl (read from its tail), or None: no file, no record
    yet. A line being written (no newline yet) is not whole and is skipped."""
    try:
        with open(jsonl_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode("utf-8", errors="replace").split("\n")[:-1]
    except OSError:
        return None
    steps = [step for step in map(_step_of, lines) if step is not None]
    return steps[-1] if steps else None


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class UpdateStats:
    """One update's figures, the same on every rank."""

    losses: dict[str, float]
    """Each loss term averaged over the ranks and their micro-batches."""
    tokens: int
    """Tokens the update trained on, summed over the ranks."""
    stop: bool
    """Whether any rank was asked to stop: then every rank saves and leaves together."""


def reduce_update(sums: dict[str, torch.Tensor], local_tokens: int, stop: bool, batch: BatchSizes) -> UpdateStats:
    """One small all-reduce per update, of this rank's loss sums over its micro-batches, its tokens and its stop
    request, packed into one tensor on the device the losses are on."""
    names = sorted(sums)
    losses = torch.stack([sums[n] for n in names])
    packed = torch.cat([losses, torch.tensor([float(local_tokens), float(stop)], device=losses.device)])
    dist.all_reduce(packed)
    values = (packed[:-2] / (batch.accumulation * batch.world_size)).tolist()
    return UpdateStats(dict(zip(names, values)), int(packed[-2].item()), bool(packed[-1].item()))

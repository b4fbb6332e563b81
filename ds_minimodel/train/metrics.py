"""One ``log(metrics, step)`` interface with TensorBoard and JSONL backends. Rank 0 writes; other ranks do nothing.

Every stage writes under one log root (``<run>/tensorboard/<run name>``), so ``tensorboard --logdir`` on a parent
folder shows all runs side by side.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


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
            jsonl_path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
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


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None

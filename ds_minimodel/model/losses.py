"""Losses. Masking happens in the data pipeline; the model returns logits of the masked positions only."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ds_minimodel.data.tokenizer import IGNORE_INDEX


def mlm_losses(logits: dict[str, torch.Tensor], labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Cross-entropy of every head over the masked positions, and their mean as ``"loss"``.

    ``logits[name]`` is (n_masked, V), computed at ``labels != IGNORE_INDEX`` in row-major order, which is the
    order ``labels[labels != IGNORE_INDEX]`` yields. MiniJoint trains on the average of its two heads' losses
    (paper section 2.2); with one head the mean is that head's loss. The caller backpropagates ``"loss"`` once.
    """
    targets = labels[labels != IGNORE_INDEX]
    count = max(targets.numel(), 1)  # a batch with nothing masked gives loss 0, not NaN
    # fp32 softmax even under fp16/bf16: the vocabulary-wide log-sum-exp is where half precision loses accuracy.
    losses = {
        f"loss_{name}": F.cross_entropy(head.float(), targets, reduction="sum") / count
        for name, head in logits.items()
    }
    losses["loss"] = torch.stack(list(losses.values())).mean()
    return losses


def mlm_step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One MLM forward: only the positions with a target go through the vocabulary projection."""
    labels = batch["labels"]
    logits = model(batch["input_ids"], batch["attention_mask"], labels != IGNORE_INDEX)
    return mlm_losses(logits, labels)

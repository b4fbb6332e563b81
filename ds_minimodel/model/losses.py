"""Losses. Masking happens in the data pipeline; the model returns logits of the masked positions only."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ds_minimodel.data.streams import PADDED
from ds_minimodel.data.tokenizer import IGNORE_INDEX
from ds_minimodel.model.encoder import AUX_HEAD, MAIN_HEAD
from ds_minimodel.systems import AUX_WEIGHT


def mlm_losses(logits: dict[str, torch.Tensor], labels: torch.Tensor,
               aux_weight: float = AUX_WEIGHT) -> dict[str, torch.Tensor]:
    """Cross-entropy of every head over the masked positions, and the loss trained as ``"loss"``.

    ``logits[name]`` is (n_masked, V), computed at ``labels != IGNORE_INDEX`` in row-major order, which is the
    order ``labels[labels != IGNORE_INDEX]`` yields. With one head ``"loss"`` is its loss; MiniJoint's two heads are
    weighed ``1 - aux_weight`` (the top head) and ``aux_weight`` (the second head): at 0.5, the mean of both (paper
    section 2.2). The caller backpropagates ``"loss"`` once.
    """
    targets = labels[labels != IGNORE_INDEX]
    count = max(targets.numel(), 1)  # a batch with nothing masked gives loss 0, not NaN
    # fp32 softmax even under fp16/bf16: the vocabulary-wide log-sum-exp is where half precision loses accuracy.
    losses = {
        f"loss_{name}": F.cross_entropy(head.float(), targets, reduction="sum") / count
        for name, head in logits.items()
    }
    if AUX_HEAD in logits:  # scaling by a power of two is exact: at 0.5 this is the mean to the last bit
        losses["loss"] = (1 - aux_weight) * losses[f"loss_{MAIN_HEAD}"] + aux_weight * losses[f"loss_{AUX_HEAD}"]
    else:
        losses["loss"] = torch.stack(list(losses.values())).mean()
    return losses


def mlm_step(model: torch.nn.Module, batch: dict[str, torch.Tensor],
             aux_weight: float = AUX_WEIGHT) -> dict[str, torch.Tensor]:
    """One MLM forward: only the positions with a target go through the vocabulary projection. A batch whose
    ``PADDED`` is False (every block full, known on the host) goes in without its attention mask."""
    labels = batch["labels"]
    mask = batch["attention_mask"] if batch.get(PADDED, True) else None
    logits = model(batch["input_ids"], mask, labels != IGNORE_INDEX)
    return mlm_losses(logits, labels, aux_weight)

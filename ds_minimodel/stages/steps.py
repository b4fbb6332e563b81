"""Each training step's model from fresh weights, with the trainable set, loss and FLOP count its stage trains with.

The benchmark (``tools.bench``) times these and the FLOP cross-check (``tools.flops_check``) counts them. The
transforms are the stages' own (``model.transforms``: ``build_minipost``, ``freeze_for_adaptation``,
``freeze_for_finetuning``; ``model.bodies``: a system's Step-2 body), the losses are the ones ``Stage.loss_fn``
takes and the FLOPs come from ``flops.per_update_flops`` as the training logs' do, so what is measured is what is
trained: only the weights differ (random here, loaded from the previous step there).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ds_minimodel import flops
from ds_minimodel.config import ModelConfig
from ds_minimodel.errors import InputError
from ds_minimodel.model.bodies import body_of
from ds_minimodel.model.encoder import MaskedLM, TaskModel
from ds_minimodel.model.losses import mlm_step
from ds_minimodel.model.transforms import build_minipost, freeze_for_adaptation, freeze_for_finetuning
from ds_minimodel.systems import Depths, Step, get_primary, get_system
from ds_minimodel.tasks.formats import task_loss
from ds_minimodel.train.engine import LossFn

LOSSES: dict[Step, LossFn] = {Step.PRETRAIN: mlm_step, Step.MINIPOST: mlm_step, Step.ADAPT: mlm_step,
                              Step.FINETUNE: task_loss}
"""The loss each step's stage trains with (its ``Stage.loss_fn``)."""


@dataclass(frozen=True)
class StepModel:
    """One step's model as its stage trains it."""

    step: Step
    model: torch.nn.Module
    """Its trainable parameters are the step's (``requires_grad``), the rest frozen."""
    trainable_layers: int = 0
    """Step 1b: the new layers trained over the copied ones (the A4 formula's l_t)."""

    @property
    def loss_fn(self) -> LossFn:
        return LOSSES[self.step]

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    def flops_per_update(self, *, seq_len: int, batch: int, mask_prob: float = 0.15) -> float:
        """The analytic FLOPs of one update of ``batch`` sequences, as the step's stage logs them."""
        return flops.per_update_flops(self.step, self.cfg, seq_len=seq_len, batch=batch, mask_prob=mask_prob,
                                      trainable_layers=self.trainable_layers)


def fresh(step: Step, cfg: ModelConfig, depths: Depths, *, system: str | None = None, num_labels: int = 3,
          seed: int = 0) -> StepModel:
    """``step``'s model from randomly initialised weights of ``cfg``'s width.

    Step 1: ``cfg`` itself (MiniJoint's second head where ``cfg`` has one). Step 1b: a primary of ``depths.keep``
    layers cut by ``build_minipost`` into ``keep + new`` layers, the new ones trainable. Step 2: ``system``'s
    primary at ``depths``, cut to the system's body (``model.bodies``), frozen for adaptation. Step 3: ``cfg``'s
    body under a ``num_labels``-way sequence head, embeddings frozen.
    """
    torch.manual_seed(seed)
    if step == Step.PRETRAIN:
        return StepModel(step, MaskedLM(cfg))
    if step == Step.MINIPOST:  # (a system's own Step-1b depths where ``system`` is named)
        own = get_system(system).depths_of(depths) if system is not None else depths
        primary = MaskedLM(cfg.replace(num_layers=own.keep, aux_head_layer=None))
        return StepModel(step, build_minipost(primary, keep_layers=own.keep, new_layers=own.new, seed=seed),
                         trainable_layers=own.new)
    if step == Step.ADAPT:
        if system is None:
            raise InputError("Step 2's model is a system's body: name the system")
        entry = get_system(system)
        primary = get_primary(entry.primary)
        model = MaskedLM(cfg.replace(num_layers=primary.num_layers(depths),
                                     aux_head_layer=primary.aux_head_layer(depths)))
        model = body_of(entry).cut(model, entry.depths_of(depths))
        freeze_for_adaptation(model)
        return StepModel(step, model)
    if step == Step.FINETUNE:
        model = TaskModel(cfg.replace(aux_head_layer=None), "sequence", num_labels)
        freeze_for_finetuning(model)
        return StepModel(step, model)
    raise InputError(f"{step!r} trains no model")

"""Step 1: pretrain a source-language MLM (BL_BASE, BL_SMALL, or MiniJoint's dual-head model), and MiniPost's
Step 1b (train k new layers on top of the bottom N layers cut from a pretrained model; everything copied is frozen).
``--variant head`` trains only the MLM head of a pretrained encoder imported without one (``ds_minimodel.model.hf``).
``--from`` takes our checkpoints and model folders or a Hugging Face BERT/RoBERTa folder (imported on the fly).

Entry point of ``run_pretrain.py``; works as a plain process, under the ``deepspeed`` launcher and under ``mpirun``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ds_minimodel import flops
from ds_minimodel.config import ModelConfig, get_preset, read_json
from ds_minimodel.data.prepare import tokenizer_path
from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards
from ds_minimodel.errors import InputError
from ds_minimodel.model import hf
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.transforms import build_minipost, freeze_for_head_training
from ds_minimodel.stages.cli import run_main, spec_from_command_line
from ds_minimodel.stages.runner import Built, Context, run_stage
from ds_minimodel.stages.specs import PretrainSpec, check_fields
from ds_minimodel.stages.steps import LOSSES
from ds_minimodel.systems import Depths, Step, get_primary
from ds_minimodel.train import checkpoint
from ds_minimodel.train.engine import Stage
from ds_minimodel.train.forgetting import ActiveForgetting, param_groups

STEP1B_VARIANTS = ("minipost", "head")
"""Variants that start from a pretrained model (``--from``) instead of a registered primary (``systems.PRIMARIES``)."""


def check_variant(name: str) -> None:
    """A primary (``systems.PRIMARIES``, ``minijoint@N`` too) or one of ``STEP1B_VARIANTS``."""
    if name in STEP1B_VARIANTS:
        return
    try:
        get_primary(name, source="")
    except InputError as err:
        raise InputError(f"{err} (or one of {', '.join(STEP1B_VARIANTS)})") from None


CHECKS = {"variant": check_variant}
"""What the spec's annotations cannot say about its values (``specs.check_fields``)."""


def model_config(spec: PretrainSpec, vocab_size: int) -> ModelConfig:
    cfg = get_preset(spec.preset)
    if spec.model_config is not None:
        overrides = read_json(spec.model_config)
        cfg = ModelConfig.from_dict({**cfg.to_dict(), **overrides}, source=str(spec.model_config))
    primary = get_primary(spec.variant)
    depths = Depths(layers=cfg.num_layers, small=spec.small_layers, aux=spec.aux_layer)  # a primary's depths
    changes: dict[str, Any] = {"vocab_size": vocab_size, "num_layers": primary.num_layers(depths)}
    if primary.aux_head_layer(depths) is not None:
        changes["aux_head_layer"] = primary.aux_head_layer(depths)
    try:
        return cfg.replace(**changes)
    except InputError as err:
        raise InputError(f"--variant {spec.variant}: {err}") from None


def build_model(spec: PretrainSpec, shards: TokenShards) -> tuple[MaskedLM, dict[str, Any]]:
    """The model this variant trains, and what its checkpoints must record about where it came from."""
    tokenizer = {"path": str(tokenizer_path(spec.data).resolve()), "sha256": shards.tokenizer_sha256}
    torch.manual_seed(spec.seed)  # identical initial weights on every rank
    if spec.variant not in STEP1B_VARIANTS:
        if spec.from_ is not None:
            raise InputError(f"--from is only for --variant minipost or head (got --variant {spec.variant})")
        model = MaskedLM(model_config(spec, shards.vocab_size))
        return model, {"tokenizer": tokenizer}
    if spec.from_ is None:
        raise InputError(f"--variant {spec.variant} needs --from <pretrained primary model: checkpoint, model folder "
                         "or Hugging Face folder>")
    primary, primary_meta = load_mlm(spec.from_)
    primary_tokenizer = primary_meta.tokenizer_dict or {}
    if primary_tokenizer.get("sha256") != shards.tokenizer_sha256:
        raise InputError(
            f"{spec.data}: tokenized with {shards.tokenizer_sha256[:12]}, but the primary model {spec.from_} uses "
            f"tokenizer {str(primary_tokenizer.get('sha256'))[:12]}; prepare the data with --tokenizer "
            f"{primary_tokenizer.get('path')}")
    if spec.variant == "head":
        freeze_for_head_training(primary)
        # The body is the primary's, unchanged: descendants keep its lineage, so Step-2 embeddings trained over a
        # MiniPost built from this model plug into the imported model too.
        return primary, {"tokenizer": tokenizer, "primary_sha256": primary_meta.lineage,
                         "kind": checkpoint.Kind.MLM_HEAD.value, "mlm_head": "trained",
                         "head_trained_from": str(Path(spec.from_).resolve())}
    hf.require_trained_head(primary_meta, spec.from_, "MiniPost (it copies the head and keeps it frozen)")
    try:
        model = build_minipost(primary, keep_layers=spec.keep_layers, new_layers=spec.new_layers, seed=spec.seed)
    except ValueError as err:
        raise InputError(f"{spec.from_}: {err}") from None
    return model, {"tokenizer": tokenizer, "primary_sha256": primary_meta.lineage,
                   "cut_from": str(Path(spec.from_).resolve()), "kind": checkpoint.Kind.MINIPOST_MINI.value,
                   "keep_layers": spec.keep_layers, "new_layers": spec.new_layers}


def build(spec: PretrainSpec, ctx: Context) -> Built:
    # Every input is checked before anything is written: a refused run leaves --out as it was.
    check_fields(spec, CHECKS)  # a spec file's unknown variant, refused by name
    train_cfg = ctx.train_cfg
    info, batch = ctx.info, ctx.batch
    shards = TokenShards.open(spec.data)
    model, provenance = build_model(spec, shards)
    cfg = model.cfg
    if train_cfg.seq_len > cfg.max_positions:
        raise InputError(f"--seq-len {train_cfg.seq_len} exceeds the model's max_positions {cfg.max_positions}")

    forgetting = None
    if spec.forget_every:
        if spec.variant in STEP1B_VARIANTS:
            raise InputError(f"--forget-every is for pretraining a primary, not --variant {spec.variant}")
        forgetting = ActiveForgetting(spec.forget_every, train_cfg.steps, spec.seed, cfg.init_std)
    dataset = PackedDataset(shards, train_cfg.seq_len)  # refuses data too small for one update
    stream = MLMBatchStream(dataset, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                            seed=spec.seed, vocab_size=cfg.vocab_size, seq_len=train_cfg.seq_len,
                            mask_prob=train_cfg.mask_prob)
    step = Step.MINIPOST if spec.variant in STEP1B_VARIANTS else Step.PRETRAIN
    if spec.variant == "head":  # frozen body and embeddings
        flops_per_update = flops.head_training_per_update(cfg, seq_len=train_cfg.seq_len, batch=batch.global_batch,
                                                          mask_prob=train_cfg.mask_prob)
    else:  # A1 (with the second head's 3 FLOP_lm where cfg has one), or A4 over l_t new layers
        flops_per_update = flops.per_update_flops(step, cfg, seq_len=train_cfg.seq_len, batch=batch.global_batch,
                                                  mask_prob=train_cfg.mask_prob, trainable_layers=spec.new_layers)
    stage = Stage(
        name=spec.run_name or f"{step}-{spec.variant}",
        model=model,
        loss_fn=LOSSES[step],
        flops_per_update=flops_per_update,
        meta={"variant": spec.variant, "model_config": cfg.to_dict(), "num_parameters": model.num_parameters(),
              **provenance, **({"forget_every": spec.forget_every} if forgetting else {})},
        param_groups=param_groups(model) if forgetting else None,
        after_update=forgetting,
    )
    trainable = sum(p.numel() for p in stage.trainable_parameters())
    return Built(
        stage=stage, stream=stream, train_cfg=train_cfg,
        record={"variant": spec.variant, "forget_every": spec.forget_every, "model": cfg.to_dict(),
                "data": str(Path(spec.data).resolve()), "tokenizer_sha256": shards.tokenizer_sha256,
                "seq_len": spec.seq_len, "mask_prob": spec.mask_prob, "source": provenance.get("primary_sha256")},
        banner=f"[{stage.name}] {cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, "
               f"{model.num_parameters():,} parameters ({trainable:,} trainable); {len(dataset):,} blocks of <= "
               f"{train_cfg.seq_len} tokens; global batch {batch.global_batch} = {batch.micro} x {batch.accumulation}"
               f" x {batch.world_size} ranks")


def run(spec: PretrainSpec) -> dict[str, Any]:
    return run_stage(spec, build).summary


def main(argv: list[str] | None = None) -> int:
    return run_main(run, spec_from_command_line(PretrainSpec, argv, description=__doc__, checks=CHECKS))

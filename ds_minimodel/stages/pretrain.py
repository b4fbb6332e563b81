"""The jobs that train a model with the MLM loss on source-language text, one spec and entry script each:

- Step 1 (``run_pretrain.py``, ``PretrainSpec``): a registered primary from scratch (BL_BASE, BL_SMALL, or
  MiniJoint's dual-head model);
- Step 1b (``run_minipost.py``, ``MiniPostSpec``): MiniPost's mini-model, k new layers trained on top of the bottom N
  layers cut from a pretrained model, everything copied frozen;
- head training (``run_head.py``, ``HeadSpec``): only the MLM head of a pretrained encoder imported without one
  (``ds_minimodel.model.hf``).

``--from`` takes our checkpoints and model folders or a Hugging Face BERT/DistilBERT/RoBERTa folder (imported on the
fly). Each entry works as a plain process, under the ``deepspeed`` launcher and under ``mpirun``.
"""
from __future__ import annotations

import functools
import sys
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
from ds_minimodel.model.losses import mlm_step
from ds_minimodel.model.transforms import build_minipost, freeze_for_head_training
from ds_minimodel.stages.cli import run_main, spec_from_command_line, usage_error
from ds_minimodel.stages.runner import Built, Context, run_stage
from ds_minimodel.stages.specs import FromModelSpec, HeadSpec, MiniPostSpec, MLMSpec, PretrainSpec, check_fields
from ds_minimodel.stages.steps import LOSSES
from ds_minimodel.systems import AUX_WEIGHT, Depths, Step, get_primary
from ds_minimodel.train import checkpoint
from ds_minimodel.train.engine import LossFn, Stage
from ds_minimodel.train.forgetting import ActiveForgetting, param_groups

FROM_MODEL_ENTRIES = {"minipost": "run_minipost.py", "head": "run_head.py"}
"""Jobs that start from a pretrained model (``--from``), each with its own spec and entry script; ``--variant
minipost|head`` of earlier versions is refused with the entry script to use."""


def check_variant(name: str) -> None:
    """A primary (``systems.PRIMARIES``, ``minijoint@N`` too)."""
    if name in FROM_MODEL_ENTRIES:
        raise InputError(f"{name} is its own job now: {FROM_MODEL_ENTRIES[name]}, with the same options but no "
                         "--variant")
    get_primary(name, source="")


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


def _shape(ctx: Context) -> dict[str, Any]:
    """One update's shape, as the FLOP formulas take it."""
    return {"seq_len": ctx.train_cfg.seq_len, "batch": ctx.batch.global_batch, "mask_prob": ctx.train_cfg.mask_prob}


def _tokenizer(spec: MLMSpec, shards: TokenShards) -> dict[str, str]:
    return {"path": str(tokenizer_path(spec.data).resolve()), "sha256": shards.tokenizer_sha256}


def _pretrained(spec: FromModelSpec, shards: TokenShards) -> tuple[MaskedLM, checkpoint.Record]:
    """The model ``--from`` names, which must read the tokens ``--data`` holds."""
    torch.manual_seed(spec.seed)  # identical new weights on every rank
    primary, primary_meta = load_mlm(spec.from_)
    primary_tokenizer = primary_meta.tokenizer_dict or {}
    if primary_tokenizer.get("sha256") != shards.tokenizer_sha256:
        raise InputError(
            f"{spec.data}: tokenized with {shards.tokenizer_sha256[:12]}, but the primary model {spec.from_} uses "
            f"tokenizer {str(primary_tokenizer.get('sha256'))[:12]}; prepare the data with --tokenizer "
            f"{primary_tokenizer.get('path')}")
    return primary, primary_meta


def _mlm_built(spec: MLMSpec, ctx: Context, shards: TokenShards, model: MaskedLM, *, name: str, step: Step,
               flops_per_update: float, meta: dict[str, Any], record: dict[str, Any],
               forgetting: ActiveForgetting | None = None, loss_fn: LossFn | None = None) -> Built:
    """A model trained with the MLM loss on ``--data``'s blocks: what Steps 1, 1b and head training share."""
    train_cfg, info, batch, cfg = ctx.train_cfg, ctx.info, ctx.batch, model.cfg
    if train_cfg.seq_len > cfg.max_positions:
        raise InputError(f"--seq-len {train_cfg.seq_len} exceeds the model's max_positions {cfg.max_positions}")
    dataset = PackedDataset(shards, train_cfg.seq_len, train_cfg.packing)  # refuses data too small for one update
    stream = MLMBatchStream(dataset, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                            seed=spec.seed, vocab_size=cfg.vocab_size, seq_len=train_cfg.seq_len,
                            mask_prob=train_cfg.mask_prob)
    stage = Stage(
        name=spec.run_name or name, model=model, loss_fn=loss_fn or LOSSES[step], flops_per_update=flops_per_update,
        meta={**meta, "model_config": cfg.to_dict(), "num_parameters": model.num_parameters()},
        param_groups=param_groups(model) if forgetting else None, after_update=forgetting,
    )
    trainable = sum(p.numel() for p in stage.trainable_parameters())
    return Built(
        stage=stage, stream=stream, train_cfg=train_cfg,
        record={**record, "model": cfg.to_dict(), "data": str(Path(spec.data).resolve()),
                "tokenizer_sha256": shards.tokenizer_sha256, "seq_len": spec.seq_len, "mask_prob": spec.mask_prob,
                "packing": spec.packing},
        banner=f"[{stage.name}] {cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, "
               f"{model.num_parameters():,} parameters ({trainable:,} trainable); {len(dataset):,} blocks of <= "
               f"{train_cfg.seq_len} tokens; global batch {batch.global_batch} = {batch.micro} x {batch.accumulation}"
               f" x {batch.world_size} ranks")


def build(spec: PretrainSpec, ctx: Context) -> Built:
    """Step 1. Every input is checked before anything is written: a refused run leaves --out as it was."""
    check_fields(spec, CHECKS)  # a spec file's unknown variant, refused by name
    shards = TokenShards.open(spec.data)
    torch.manual_seed(spec.seed)  # identical initial weights on every rank
    model = MaskedLM(model_config(spec, shards.vocab_size))
    if model.cfg.aux_head_layer is None and spec.aux_weight != AUX_WEIGHT:
        raise InputError(f"--aux-weight {spec.aux_weight}: the variant {spec.variant} has one MLM head; the weight "
                         "is MiniJoint's second head's share of the loss")
    forgetting = None
    if spec.forget_every:
        forgetting = ActiveForgetting(spec.forget_every, ctx.train_cfg.steps, spec.seed, model.cfg.init_std)
    # A1, with the second head's 3 FLOP_lm where the model has one
    flops_per_update = flops.per_update_flops(Step.PRETRAIN, model.cfg, **_shape(ctx))
    return _mlm_built(spec, ctx, shards, model, name=f"{Step.PRETRAIN}-{spec.variant}", step=Step.PRETRAIN,
                      flops_per_update=flops_per_update, forgetting=forgetting,
                      loss_fn=functools.partial(mlm_step, aux_weight=spec.aux_weight),
                      meta={"variant": spec.variant, "tokenizer": _tokenizer(spec, shards),
                            **({"forget_every": spec.forget_every} if forgetting else {})},
                      record={"variant": spec.variant, "forget_every": spec.forget_every, "source": None})


def minipost_model(spec: MiniPostSpec, shards: TokenShards) -> tuple[MaskedLM, dict[str, Any]]:
    """MiniPost's mini-model over ``--from`` (its bottom ``keep_layers``, embeddings and head copied and frozen,
    ``new_layers`` new), and what its checkpoints record about where it came from."""
    primary, primary_meta = _pretrained(spec, shards)
    hf.require_trained_head(primary_meta, spec.from_, "MiniPost (it copies the head and keeps it frozen)")
    try:
        model = build_minipost(primary, keep_layers=spec.keep_layers, new_layers=spec.new_layers, seed=spec.seed)
    except ValueError as err:
        raise InputError(f"{spec.from_}: {err}") from None
    return model, {"tokenizer": _tokenizer(spec, shards), "primary_sha256": primary_meta.lineage,
                   "cut_from": str(Path(spec.from_).resolve()), "kind": checkpoint.Kind.MINIPOST_MINI.value,
                   "keep_layers": spec.keep_layers, "new_layers": spec.new_layers}


def head_model(spec: HeadSpec, shards: TokenShards) -> tuple[MaskedLM, dict[str, Any]]:
    """The bare encoder ``--from`` with its MLM head trainable (``--train-body``: everything), and what its
    checkpoints record."""
    model, primary_meta = _pretrained(spec, shards)
    source = str(Path(spec.from_).resolve())
    if spec.train_body:  # a Step-1 model of its own: no kind recorded, its own weights its lineage
        for param in model.parameters():
            param.requires_grad_(True)
        return model, {"tokenizer": _tokenizer(spec, shards), "mlm_head": "trained", "continued_from": source,
                       "continued_from_sha256": primary_meta.lineage}
    freeze_for_head_training(model)
    # The body is the primary's, unchanged: descendants keep its lineage, so Step-2 embeddings trained over a
    # MiniPost built from this model plug into the imported model too.
    return model, {"tokenizer": _tokenizer(spec, shards), "primary_sha256": primary_meta.lineage,
                   "kind": checkpoint.Kind.MLM_HEAD.value, "mlm_head": "trained", "head_trained_from": source}


def build_step1b(spec: MiniPostSpec, ctx: Context) -> Built:
    """Step 1b: MiniPost's new layers trained over the bottom layers of a pretrained model."""
    shards = TokenShards.open(spec.data)
    model, provenance = minipost_model(spec, shards)
    # A4 over the l_t new layers
    flops_per_update = flops.per_update_flops(Step.MINIPOST, model.cfg, trainable_layers=spec.new_layers,
                                              **_shape(ctx))
    return _mlm_built(spec, ctx, shards, model, name=f"{Step.MINIPOST}-minipost", step=Step.MINIPOST,
                      flops_per_update=flops_per_update, meta={"variant": "minipost", **provenance},
                      record={"variant": "minipost", "forget_every": 0, "source": provenance["primary_sha256"]})


def build_head(spec: HeadSpec, ctx: Context) -> Built:
    """The MLM head of a bare encoder, its body and embeddings frozen."""
    shards = TokenShards.open(spec.data)
    model, provenance = head_model(spec, shards)
    if spec.train_body:  # A1: every layer forward and backward, as Step 1
        flops_per_update = flops.per_update_flops(Step.PRETRAIN, model.cfg, **_shape(ctx))
    else:
        flops_per_update = flops.head_training_per_update(model.cfg, **_shape(ctx))
    variant = "continued" if spec.train_body else "head"  # run.json's identity: a resume cannot switch them
    return _mlm_built(spec, ctx, shards, model, name=f"{Step.MINIPOST}-{variant}", step=Step.MINIPOST,
                      flops_per_update=flops_per_update, meta={"variant": variant, **provenance},
                      record={"variant": variant, "forget_every": 0, "source": provenance.get("primary_sha256")})


def run(spec: PretrainSpec) -> dict[str, Any]:
    return run_stage(spec, build).summary


def _moved_variant(argv: list[str]) -> None:
    """``--variant minipost|head`` of earlier versions, refused with the entry script to use before the options are
    parsed (its ``--from`` would be refused first, as an unknown option)."""
    for at, arg in enumerate(argv):
        option, _, value = arg.partition("=")
        value = value or (argv[at + 1] if option == "--variant" and at + 1 < len(argv) else "")
        if option == "--variant" and value in FROM_MODEL_ENTRIES:
            try:
                check_variant(value)
            except InputError as err:
                usage_error(Path(sys.argv[0]).name, f"--variant: {err}")


def main(argv: list[str] | None = None) -> int:
    """``run_pretrain.py``: Step 1."""
    _moved_variant(sys.argv[1:] if argv is None else argv)
    return run_main(run, spec_from_command_line(PretrainSpec, argv, description=__doc__, checks=CHECKS))


def main_minipost(argv: list[str] | None = None) -> int:
    """``run_minipost.py``: Step 1b."""
    return run_main(lambda spec: run_stage(spec, build_step1b).summary,
                    spec_from_command_line(MiniPostSpec, argv, description=build_step1b.__doc__))


def main_head(argv: list[str] | None = None) -> int:
    """``run_head.py``: a bare encoder's MLM head."""
    return run_main(lambda spec: run_stage(spec, build_head).summary,
                    spec_from_command_line(HeadSpec, argv, description=build_head.__doc__))

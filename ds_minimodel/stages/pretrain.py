"""Step 1: pretrain a source-language MLM (BL_BASE, BL_SMALL, or MiniJoint's dual-head model), and MiniPost's
Step 1b (train k new layers on top of the bottom N layers cut from a pretrained model; everything copied is frozen).
``--variant head`` trains only the MLM head of a pretrained encoder imported without one (``ds_minimodel.model.hf``).
``--from`` takes our checkpoints and model folders or a Hugging Face BERT/RoBERTa folder (imported on the fly).

Entry point of ``run_pretrain.py``; works as a plain process, under the ``deepspeed`` launcher and under ``mpirun``.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel import flops
from ds_minimodel.config import ModelConfig, get_preset, read_json
from ds_minimodel.data.prepare import tokenizer_path
from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards
from ds_minimodel.ds_config import load_ds_config, resolve_batch
from ds_minimodel.errors import InputError
from ds_minimodel.model import hf
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.losses import mlm_step
from ds_minimodel.model.transforms import build_minipost, freeze_for_head_training
from ds_minimodel.stages.cli import COUNT, POSITIVE_INT, add_training_args, dist_timeout, run_main, train_config
from ds_minimodel.systems import Depths, get_primary
from ds_minimodel.train import checkpoint
from ds_minimodel.train.distributed import init_distributed
from ds_minimodel.train.engine import Stage, train
from ds_minimodel.train.forgetting import ActiveForgetting, param_groups
from ds_minimodel.train.run_record import write_run_description

STEP1B_VARIANTS = ("minipost", "head")
"""Variants that start from a pretrained model (``--from``) instead of a registered primary (``systems.PRIMARIES``)."""


def _variant(name: str) -> str:
    if name in STEP1B_VARIANTS:
        return name
    try:
        get_primary(name)
    except InputError as err:
        raise argparse.ArgumentTypeError(f"{err} (or one of {', '.join(STEP1B_VARIANTS)})") from None
    return name


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variant", type=_variant, default="base",
                   help="a primary (systems.PRIMARIES): base: BL_BASE's model; small: BL_SMALL (--small-layers "
                        "deep); minijoint: second MLM head after layer --aux-layer, loss = mean of both heads; "
                        "minijoint@N: the same with the head after layer N (the depth study). Or: "
                        "minipost: Step 1b over --from; head: train only the MLM head of --from (a bare encoder "
                        "imported from Hugging Face)")
    p.add_argument("--aux-layer", type=POSITIVE_INT, default=Depths.aux,
                   help="MiniJoint: layer N the second head reads (paper N=4)")
    p.add_argument("--small-layers", type=POSITIVE_INT, default=Depths.small, help="BL_SMALL's depth")
    p.add_argument("--preset", default="base", help="model size preset: tiny, demo, base, small")
    p.add_argument("--model-config", type=Path, help="JSON object of ModelConfig fields overriding the preset")
    p.add_argument("--from", dest="from_", type=Path,
                   help="minipost, head: the pretrained primary model (checkpoint, model folder, or a Hugging Face "
                        "BERT/RoBERTa folder)")
    p.add_argument("--keep-layers", type=POSITIVE_INT, default=Depths.keep,
                   help="MiniPost: bottom layers N copied from the primary")
    p.add_argument("--new-layers", type=POSITIVE_INT, default=Depths.new,
                   help="MiniPost: new layers k trained on top (paper: 2)")
    p.add_argument("--forget-every", type=COUNT, default=0, metavar="K",
                   help="active forgetting (Chen, Marchisio et al. 2023): draw the token embeddings afresh and "
                        "clear their optimizer state every K updates; 0: never (primaries only)")
    add_training_args(p)
    return p


def model_config(args: argparse.Namespace, vocab_size: int) -> ModelConfig:
    cfg = get_preset(args.preset)
    if args.model_config is not None:
        overrides = read_json(args.model_config)
        cfg = ModelConfig.from_dict({**cfg.to_dict(), **overrides}, source=str(args.model_config))
    primary = get_primary(args.variant)
    depths = Depths(layers=cfg.num_layers, small=args.small_layers, aux=args.aux_layer)  # a primary's depths
    changes: dict[str, Any] = {"vocab_size": vocab_size, "num_layers": primary.num_layers(depths)}
    if primary.aux_head_layer(depths) is not None:
        changes["aux_head_layer"] = primary.aux_head_layer(depths)
    try:
        return cfg.replace(**changes)
    except InputError as err:
        raise InputError(f"--variant {args.variant}: {err}") from None


def build_model(args: argparse.Namespace, shards: TokenShards) -> tuple[MaskedLM, dict[str, Any]]:
    """The model this variant trains, and what its checkpoints must record about where it came from."""
    tokenizer = {"path": str(tokenizer_path(args.data)), "sha256": shards.tokenizer_sha256}
    torch.manual_seed(args.seed)  # identical initial weights on every rank
    if args.variant not in STEP1B_VARIANTS:
        if args.from_ is not None:
            raise InputError(f"--from is only for --variant minipost or head (got --variant {args.variant})")
        model = MaskedLM(model_config(args, shards.vocab_size))
        return model, {"tokenizer": tokenizer}
    if args.from_ is None:
        raise InputError(f"--variant {args.variant} needs --from <pretrained primary model: checkpoint, model folder "
                         "or Hugging Face folder>")
    primary, primary_meta = load_mlm(args.from_)
    primary_tokenizer = primary_meta.get("tokenizer") or {}
    if primary_tokenizer.get("sha256") != shards.tokenizer_sha256:
        raise InputError(
            f"{args.data}: tokenized with {shards.tokenizer_sha256[:12]}, but the primary model {args.from_} uses "
            f"tokenizer {str(primary_tokenizer.get('sha256'))[:12]}; prepare the data with --tokenizer "
            f"{primary_tokenizer.get('path')}")
    if args.variant == "head":
        freeze_for_head_training(primary)
        # The body is the primary's, unchanged: descendants keep its lineage, so Step-2 embeddings trained over a
        # MiniPost built from this model plug into the imported model too.
        return primary, {"tokenizer": tokenizer, "primary_sha256": checkpoint.lineage(primary_meta),
                         "kind": checkpoint.Kind.MLM_HEAD.value, "mlm_head": "trained",
                         "head_trained_from": str(Path(args.from_).resolve())}
    hf.require_trained_head(primary_meta, args.from_, "MiniPost (it copies the head and keeps it frozen)")
    try:
        model = build_minipost(primary, keep_layers=args.keep_layers, new_layers=args.new_layers, seed=args.seed)
    except ValueError as err:
        raise InputError(f"{args.from_}: {err}") from None
    return model, {"tokenizer": tokenizer, "primary_sha256": checkpoint.lineage(primary_meta),
                   "cut_from": str(Path(args.from_).resolve()), "kind": checkpoint.Kind.MINIPOST_MINI.value,
                   "keep_layers": args.keep_layers, "new_layers": args.new_layers}


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Every input is checked before anything is written: a refused run leaves --out as it was.
    ds_config = load_ds_config(args.ds_config)
    train_cfg = train_config(args, ds_config)
    info = init_distributed(dist_timeout(args))
    batch = resolve_batch(ds_config, info.world_size, source=str(args.ds_config))
    shards = TokenShards.open(args.data)
    model, provenance = build_model(args, shards)
    cfg = model.cfg
    if train_cfg.seq_len > cfg.max_positions:
        raise InputError(f"--seq-len {train_cfg.seq_len} exceeds the model's max_positions {cfg.max_positions}")

    forgetting = None
    if args.forget_every:
        if args.variant in STEP1B_VARIANTS:
            raise InputError(f"--forget-every is for pretraining a primary, not --variant {args.variant}")
        forgetting = ActiveForgetting(args.forget_every, train_cfg.steps, args.seed, cfg.init_std)
    dataset = PackedDataset(shards, train_cfg.seq_len)  # refuses data too small for one update
    stream = MLMBatchStream(dataset, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                            seed=args.seed, vocab_size=cfg.vocab_size, seq_len=train_cfg.seq_len,
                            mask_prob=train_cfg.mask_prob)
    description = {
        "stage": "pretrain", "variant": args.variant, "forget_every": args.forget_every, "model": cfg.to_dict(),
        "data": str(Path(args.data).resolve()),
        "tokenizer_sha256": shards.tokenizer_sha256, "seed": args.seed, "seq_len": args.seq_len,
        "mask_prob": args.mask_prob, "global_batch": batch.global_batch, "ds_config": ds_config,
        "ds_config_path": str(args.ds_config), "train": train_cfg.to_dict(), "world_size": info.world_size,
        "source": provenance.get("primary_sha256"),
    }
    if info.rank == 0:
        write_run_description(args.out, description, resume=args.resume,
                              allow_config_change=args.allow_config_change)
    dist.barrier()

    info.seed_ranks_apart(args.seed)
    if args.variant == "head":  # frozen body and embeddings
        flops_per_update = flops.head_training_per_update(cfg, seq_len=train_cfg.seq_len, batch=batch.global_batch,
                                                          mask_prob=train_cfg.mask_prob)
    else:
        if args.variant == "minipost":  # A4: frozen copied layers and head, l_t trainable layers
            flop_stage, trainable_layers = "minipost", args.new_layers
        else:
            flop_stage, trainable_layers = ("pretrain_dual" if cfg.aux_head_layer is not None else "pretrain"), 0
        flops_per_update = flops.per_update_flops(flop_stage, cfg, seq_len=train_cfg.seq_len,
                                                  batch=batch.global_batch, mask_prob=train_cfg.mask_prob,
                                                  trainable_layers=trainable_layers)
    stage = Stage(
        name=args.run_name or f"pretrain-{args.variant}",
        model=model,
        loss_fn=mlm_step,
        flops_per_update=flops_per_update,
        meta={"variant": args.variant, "model_config": cfg.to_dict(), "num_parameters": model.num_parameters(),
              **provenance, **({"forget_every": args.forget_every} if forgetting else {})},
        param_groups=param_groups(model) if forgetting else None,
        after_update=forgetting,
    )
    if info.rank == 0:
        trainable = sum(p.numel() for p in stage.trainable_parameters())
        print(f"[{stage.name}] {cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, "
              f"{model.num_parameters():,} parameters ({trainable:,} trainable); {len(dataset):,} blocks of <= "
              f"{train_cfg.seq_len} tokens; global batch {batch.global_batch} = {batch.micro} x {batch.accumulation}"
              f" x {batch.world_size} ranks", flush=True)
    result = train(stage, stream, ds_config=ds_config, train_cfg=train_cfg,
                   run_dir=args.out, log_root=args.log_root, resume=args.resume, batch=batch)
    return {"step": result.step, "tokens": result.tokens, "flops": result.flops,
            "checkpoint": str(result.checkpoint), "stopped_by": result.stopped_by, **result.last_metrics}


def main(argv: list[str] | None = None) -> int:
    return run_main(run, build_parser().parse_args(argv))

"""Step 1: pretrain a source-language MLM (BL_BASE, BL_SMALL, or MiniJoint's dual-head model).

Entry point of ``run_pretrain.py``; works as a plain process, under the ``deepspeed`` launcher and under ``mpirun``.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel import flops
from ds_minimodel.config import ModelConfig, TrainConfig, get_preset, read_json
from ds_minimodel.data import MLMBatchStream, PackedDataset, TokenShards
from ds_minimodel.engine import (Stage, init_distributed, load_ds_config, resolve_batch, train,
                                 write_run_description)
from ds_minimodel.errors import InputError
from ds_minimodel.losses import mlm_step
from ds_minimodel.model import MaskedLM

VARIANTS = ("base", "small", "minijoint")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variant", choices=VARIANTS, default="base",
                   help="base: BL_BASE's model; small: BL_SMALL (--small-layers deep); minijoint: second MLM head "
                        "after layer --aux-layer, loss = mean of both heads")
    p.add_argument("--aux-layer", type=int, default=4, help="MiniJoint: layer N the second head reads (paper N=4)")
    p.add_argument("--small-layers", type=int, default=4, help="BL_SMALL's depth")
    p.add_argument("--preset", default="base", help="model size preset: tiny, base, small")
    p.add_argument("--model-config", type=Path, help="JSON object of ModelConfig fields overriding the preset")
    p.add_argument("--ds-config", type=Path, required=True, help="DeepSpeed JSON (see ds_configs/)")
    p.add_argument("--data", type=Path, required=True, help="folder made by `python -m ds_minimodel.prepare`")
    p.add_argument("--out", type=Path, required=True, help="run folder: checkpoints, metrics, TensorBoard logs")
    p.add_argument("--steps", type=int, help="optimizer updates (default: the scheduler's total_num_steps)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--mask-prob", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--save-every", type=int, default=1000)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--keep-checkpoints", type=int, help="keep only the newest K checkpoints (default: all)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --out")
    p.add_argument("--local_rank", "--local-rank", type=int, default=0, help=argparse.SUPPRESS)  # deepspeed launcher
    return p


def model_config(args: argparse.Namespace, vocab_size: int) -> ModelConfig:
    cfg = get_preset(args.preset)
    if args.model_config is not None:
        overrides = read_json(args.model_config)
        cfg = ModelConfig.from_dict({**cfg.to_dict(), **overrides}, source=str(args.model_config))
    changes: dict[str, Any] = {"vocab_size": vocab_size}
    if args.variant == "small":
        changes["num_layers"] = args.small_layers
    if args.variant == "minijoint":
        changes["aux_head_layer"] = args.aux_layer
    try:
        return cfg.replace(**changes)
    except InputError as err:
        raise InputError(f"--variant {args.variant}: {err}") from None


def run(args: argparse.Namespace) -> dict[str, Any]:
    ds_config = load_ds_config(args.ds_config)
    info = init_distributed()
    batch = resolve_batch(ds_config, info.world_size, source=str(args.ds_config))
    shards = TokenShards.open(args.data)
    cfg = model_config(args, shards.vocab_size)
    steps = args.steps or (ds_config.get("scheduler") or {}).get("params", {}).get("total_num_steps")
    if steps is None:
        raise InputError(f"{args.ds_config}: no scheduler total_num_steps; pass --steps")
    train_cfg = TrainConfig(steps=steps, seq_len=args.seq_len, mask_prob=args.mask_prob, seed=args.seed,
                            save_every=args.save_every, log_every=args.log_every,
                            keep_checkpoints=args.keep_checkpoints)
    if train_cfg.seq_len > cfg.max_positions:
        raise InputError(f"--seq-len {train_cfg.seq_len} exceeds the model's max_positions {cfg.max_positions}")

    tokenizer = {"path": str(Path(args.data) / "spm.model"), "sha256": shards.tokenizer_sha256}
    description = {
        "stage": "pretrain", "variant": args.variant, "model": cfg.to_dict(), "data": str(Path(args.data).resolve()),
        "tokenizer_sha256": shards.tokenizer_sha256, "seed": args.seed, "seq_len": args.seq_len,
        "mask_prob": args.mask_prob, "global_batch": batch.global_batch, "ds_config": ds_config,
        "ds_config_path": str(args.ds_config), "train": train_cfg.to_dict(), "world_size": info.world_size,
    }
    if info.rank == 0:
        write_run_description(args.out, description, resume=args.resume)
    dist.barrier()

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model = MaskedLM(cfg)
    torch.manual_seed(args.seed * 1_000_003 + 1 + info.rank)  # dropout differs per rank, deterministically
    dataset = PackedDataset(shards, train_cfg.seq_len)
    stream = MLMBatchStream(dataset, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                            seed=args.seed, vocab_size=cfg.vocab_size, seq_len=train_cfg.seq_len,
                            mask_prob=train_cfg.mask_prob)
    flop_stage = "pretrain_dual" if cfg.aux_head_layer is not None else "pretrain"
    stage = Stage(
        name=f"pretrain-{args.variant}",
        model=model,
        loss_fn=mlm_step,
        flops_per_update=flops.per_update_flops(flop_stage, cfg, seq_len=train_cfg.seq_len,
                                                batch=batch.global_batch, mask_prob=train_cfg.mask_prob),
        meta={"variant": args.variant, "model_config": cfg.to_dict(), "tokenizer": tokenizer,
              "num_parameters": model.num_parameters()},
    )
    if info.rank == 0:
        print(f"[{stage.name}] {cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, "
              f"{model.num_parameters():,} parameters; {len(dataset):,} blocks of <= {train_cfg.seq_len} tokens; "
              f"global batch {batch.global_batch} = {batch.micro} x {batch.accumulation} x {batch.world_size} ranks",
              flush=True)
    result = train(stage, stream, ds_config=ds_config, ds_config_source=str(args.ds_config), train_cfg=train_cfg,
                   run_dir=args.out, resume=args.resume, batch=batch)
    return {"step": result.step, "tokens": result.tokens, "flops": result.flops,
            "checkpoint": str(result.checkpoint), **result.last_metrics}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    try:
        summary = run(args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    if dist.get_rank() == 0:
        print(json.dumps(summary, sort_keys=True), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0

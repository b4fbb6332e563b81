"""Step 2: learn a target language's embeddings over a frozen transformer body (``run_adapt.py``).

The four systems differ only in the body (paper section 2):

| system    | body the embeddings are trained over                                   |
|-----------|------------------------------------------------------------------------|
| bl_base   | the full 12-layer primary model (Artetxe et al., 2020)                  |
| bl_small  | a 4-layer model pretrained on its own                                   |
| minijoint | MiniJoint's mini-model: bottom N layers + the second MLM head           |
| minipost  | MiniPost's mini-model from Step 1b: N copied layers + k trained layers  |

New embeddings start from the source rows of pieces shared with the source vocabulary, the rest N(0, 0.02)
(footnote 1), or from another initialiser (``--init``, ``model.embedding_init``). Only the token embeddings (tied
to the output projection) and the output bias train; each checkpoint holds just those plus optimizer state, and
records the body's hash so the embeddings are only ever plugged into a model of the same lineage.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ds_minimodel import flops
from ds_minimodel.data.prepare import tokenizer_path
from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors
from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards
from ds_minimodel.data.tokenizer import load_tokenizer, open_tokenizer
from ds_minimodel.ds_config import load_ds_config, resolve_batch
from ds_minimodel.errors import InputError
from ds_minimodel.model import hf
from ds_minimodel.model.bodies import body_of
from ds_minimodel.model.embedding_init import INITS, NEW_ROWS, anchor_copied_rows, initial_rows
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.losses import mlm_step
from ds_minimodel.model.transforms import (
    extract_embeddings,
    freeze_for_adaptation,
    swap_embeddings,
)
from ds_minimodel.stages.cli import add_training_args, dist_timeout, run_main, train_config
from ds_minimodel.systems import get_system, system_names
from ds_minimodel.train import checkpoint
from ds_minimodel.train.distributed import init_distributed
from ds_minimodel.train.engine import Stage, TrainResult, train
from ds_minimodel.train.run_record import write_run_description


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", type=_system, required=True,
                   help=f"{', '.join(system_names())}, or minijoint@N (the depth study: second head after layer N)")
    p.add_argument("--body", type=Path, required=True,
                   help="checkpoint or model folder of the body: the primary (bl_base; also a Hugging Face folder), "
                        "the 4-layer model (bl_small), the MiniJoint primary or its extracted mini-model (minijoint), "
                        "the Step-1b output (minipost)")
    p.add_argument("--lang", help="target language code for run names (default: the --data folder's name)")
    p.add_argument("--body-dropout", choices=("on", "off"), default="on",
                   help="dropout inside the frozen body during Step 2 (recorded in every checkpoint)")
    p.add_argument("--init", choices=INITS, default="overlap",
                   help="overlap: pieces shared with the source vocabulary start from the source rows (the paper); "
                        "specials: only the 5 special pieces do (the source-relearn control: Step 2 on the source "
                        "language itself, from scratch); focus: as overlap, and every other piece that occurs in "
                        "--data is a sparsemax mixture of shared pieces' source rows, by similarity in static "
                        "vectors trained on --data (FOCUS, Dobler and de Melo 2023; needs gensim)")
    p.add_argument("--new-rows", choices=NEW_ROWS, default="normal",
                   help="rows that get no source row or mixture: normal = N(0, init_std) (the paper); source = "
                        "N(mean, std) of the source rows, per dimension")
    p.add_argument("--shared-with", type=Path, metavar="TOKENIZER",
                   help="copy (and, for focus, mix from) only the source rows of pieces that this tokenizer has too: "
                        "with the source corpus as --data, the anchored source-relearn control (English relearned "
                        "with the rows German's initialisation would take from English)")
    p.add_argument("--freeze-copied", action="store_true",
                   help="keep the rows copied from source rows (and their output biases) unchanged: fixed anchors; "
                        "sets Step 2's weight decay to 0, so that they stay bit-identical")
    p.add_argument("--train-positions", action="store_true", help="also train the position embeddings")
    p.add_argument("--train-embedding-norm", action="store_true", help="also train the embedding LayerNorm")
    add_training_args(p, save_every=500)
    return p


def _system(name: str) -> str:
    try:
        get_system(name)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def load_body(system: str, folder: Path) -> tuple[MaskedLM, dict[str, Any]]:
    """The frozen body for ``system`` (``model.bodies``): a dual-head primary is cut down to its mini-model here, a
    Hugging Face folder is imported. A folder of the wrong kind for the system is refused."""
    entry = get_system(system)
    model, meta = load_mlm(folder)
    hf.require_trained_head(meta, folder, "Step 2 (new embeddings are learned through the MLM head)")
    return body_of(entry).take(model, meta.get("kind"), Path(folder), entry), meta


def disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    result, stage = train_embeddings(args)
    return {"step": result.step, "tokens": result.tokens, "flops": result.flops,
            "checkpoint": str(result.checkpoint), "overlap": stage.meta["overlap"], "stopped_by": result.stopped_by,
            **result.last_metrics}


def train_embeddings(args: argparse.Namespace) -> tuple[TrainResult, Stage]:
    """Build the Step-2 stage and train it; returns the result and the stage (its model is the trained one)."""
    # Every input is checked before anything is written: a refused run leaves --out as it was.
    ds_config = load_ds_config(args.ds_config)
    train_cfg = train_config(args, ds_config)
    info = init_distributed(dist_timeout(args))
    batch = resolve_batch(ds_config, info.world_size, source=str(args.ds_config))
    shards = TokenShards.open(args.data)
    lang = args.lang or Path(args.data).resolve().name
    target = load_tokenizer({"path": str(tokenizer_path(args.data)), "sha256": shards.tokenizer_sha256}, args.data)
    model, body_meta = load_body(args.system, args.body)
    source = load_tokenizer(body_meta.get("tokenizer"), args.body)
    if train_cfg.seq_len > model.cfg.max_positions:
        raise InputError(f"--seq-len {train_cfg.seq_len} exceeds the body's max_positions {model.cfg.max_positions}")

    # Footnote 1: shared pieces start from the source rows, the others from N(0, 0.02), or another initialiser's
    # rows; same seed on every rank, so every rank builds the same rows (FOCUS's static vectors included).
    generator = torch.Generator().manual_seed(args.seed)
    source_embeddings, source_bias = extract_embeddings(model)
    static = None
    if args.init == "focus":
        static = train_static_vectors(args.data, target.pieces(), StaticSettings(seed=args.seed))
    shared_with = None
    if args.shared_with is not None:
        anchor = open_tokenizer(args.shared_with)
        shared_with = set(anchor.pieces())
    rows = initial_rows(args.init, source.pieces(), source_embeddings, source_bias, target.pieces(),
                        std=model.cfg.init_std, generator=generator, new_rows=args.new_rows, static=static,
                        shared_with=shared_with)
    overlap = rows.stats
    swap_embeddings(model, rows.embeddings, rows.bias)
    trainable = freeze_for_adaptation(model, train_positions=args.train_positions,
                                      train_embedding_norm=args.train_embedding_norm)
    if args.freeze_copied:
        anchor_copied_rows(model, rows.copied)
        ds_config = without_weight_decay(ds_config)
    init_options = {"new_rows": args.new_rows, "freeze_copied": args.freeze_copied}
    if shared_with is not None:
        init_options["shared_with"] = {"path": str(anchor.path), "sha256": anchor.sha256}
    frozen = {k: v for k, v in model.state_dict().items() if k not in trainable}
    body_sha256 = checkpoint.weights_sha256(frozen)
    if args.body_dropout == "off":
        disable_dropout(model)
    cfg = model.cfg

    stream = MLMBatchStream(PackedDataset(shards, train_cfg.seq_len), micro_batch_size=batch.micro,
                            world_size=info.world_size, rank=info.rank, seed=args.seed, vocab_size=cfg.vocab_size,
                            seq_len=train_cfg.seq_len, mask_prob=train_cfg.mask_prob)  # refuses too little data
    description = {
        "stage": "adapt", "variant": args.system, "lang": lang, "model": cfg.to_dict(),
        "data": str(Path(args.data).resolve()), "tokenizer_sha256": shards.tokenizer_sha256, "seed": args.seed,
        "seq_len": args.seq_len, "mask_prob": args.mask_prob, "global_batch": batch.global_batch,
        "source": body_sha256, "body": str(Path(args.body).resolve()), "body_dropout": args.body_dropout,
        "init": args.init, "init_options": init_options, "trainable": trainable, "ds_config": ds_config,
        "ds_config_path": str(args.ds_config),
        "train": train_cfg.to_dict(), "world_size": info.world_size,
    }
    if info.rank == 0:
        write_run_description(args.out, description, resume=args.resume,
                              allow_config_change=args.allow_config_change)
        print(f"[adapt-{lang}-{args.system}] vocabulary overlap with the source: {overlap['overlap']:,} of "
              f"{overlap['target_vocab']:,} target pieces ({overlap['ratio']:.1%}) start from source rows"
              + (f", {rows.record['mixed']:,} from mixtures of them ({args.init})" if "mixed" in rows.record else "")
              + f", {rows.record['drawn']:,} drawn ({args.new_rows}); "
              f"trainable: {', '.join(trainable)}; body dropout {args.body_dropout}", flush=True)
    dist.barrier()

    info.seed_ranks_apart(args.seed)
    stage = Stage(
        name=args.run_name or f"adapt-{lang}-{args.system}",
        model=model,
        loss_fn=mlm_step,
        flops_per_update=flops.per_update_flops("adapt", cfg, seq_len=train_cfg.seq_len, batch=batch.global_batch,
                                                mask_prob=train_cfg.mask_prob),
        meta={"kind": checkpoint.Kind.EMBEDDINGS.value, "system": args.system, "lang": lang,
              "primary_sha256": checkpoint.lineage(body_meta), "body_sha256": body_sha256,
              "body": str(Path(args.body).resolve()), "body_layers": cfg.num_layers,
              "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
              "tokenizer": {"path": str(target.path), "sha256": target.sha256},
              "source_tokenizer": {"path": str(source.path), "sha256": source.sha256},
              "overlap": overlap, "init": args.init, "init_options": init_options, "initialisation": rows.record,
              "body_dropout": args.body_dropout, "trainable": trainable},
        compact_checkpoints=True,
        save_initial=True,
    )
    result = train(stage, stream, ds_config=ds_config, train_cfg=train_cfg,
                   run_dir=args.out, log_root=args.log_root, resume=args.resume, batch=batch)
    return result, stage


def without_weight_decay(ds_config: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config with its optimizer's weight decay at 0 (decay would move the anchored rows)."""
    optimizer = ds_config.get("optimizer")
    if not optimizer:
        return ds_config
    return {**ds_config, "optimizer": {**optimizer, "params": {**optimizer.get("params", {}), "weight_decay": 0.0}}}


def main(argv: list[str] | None = None) -> int:
    return run_main(run, build_parser().parse_args(argv))

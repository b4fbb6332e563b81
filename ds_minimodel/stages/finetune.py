"""Step 3: finetune the primary model's body on a source-language task with its token embeddings frozen
(``python -m ds_minimodel finetune``).

Freezing the (tied) token embeddings keeps the body's input space the one the Step-2 embeddings of every target
language were trained to match, so those embeddings can be swapped in afterwards (Step 4). Paper defaults: peak
learning rate 1e-5 for classification and 3e-5 for QA, warm-up 6% of the updates, linear decay, 3 epochs, 5 seeds.
The DeepSpeed JSON may give the scheduler's ``total_num_steps`` and ``warmup_num_steps`` as ``"auto"``: they are
then derived from --epochs, the training set size and --warmup-ratio.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel import flops
from ds_minimodel.config import FinetuneConfig, TrainConfig, write_json
from ds_minimodel.data.streams import ArrayStream
from ds_minimodel.data.tokenizer import load_tokenizer
from ds_minimodel.ds_config import load_ds_config, resolve_batch
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MAIN_HEAD, POOLINGS, TaskModel
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.stages.cli import (
    COUNT,
    FRACTION,
    POSITIVE,
    POSITIVE_INT,
    add_allow_config_change,
    add_run_args,
    dist_timeout,
    run_main,
)
from ds_minimodel.tasks.formats import (
    KIND_OF_FORMAT,
    TaskSpec,
    featurize,
    predict,
    read_eval_examples,
    read_examples,
    score,
    task_labels,
    task_loss,
)
from ds_minimodel.train import checkpoint
from ds_minimodel.train.distributed import init_distributed
from ds_minimodel.train.ds_validate import check_ds_config
from ds_minimodel.train.engine import Stage, train
from ds_minimodel.train.run_record import write_run_description


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the primary model: a Step-1 checkpoint or model folder")
    p.add_argument("--task", required=True, help="task name for run names and results, e.g. xnli, lohelp")
    p.add_argument("--format", choices=sorted(KIND_OF_FORMAT), required=True, help="the task files' format")
    p.add_argument("--train", type=Path, required=True, help="source-language training file")
    p.add_argument("--dev", type=Path, help="source-language dev file, scored after training")
    p.add_argument("--dev-format", choices=sorted(KIND_OF_FORMAT),
                   help="format of --dev when it differs from --format (XNLI: train on multinli, dev in xnli)")
    p.add_argument("--language", default="en", help="language of --train/--dev (XNLI files hold several)")
    p.add_argument("--ds-config", type=Path, required=True, help="DeepSpeed JSON (see ds_configs/)")
    p.add_argument("--out", type=Path, required=True, help="run folder: checkpoints, metrics, dev scores")
    p.add_argument("--epochs", type=POSITIVE, default=FinetuneConfig.epochs,
                   help="passes over --train (may be a fraction)")
    p.add_argument("--warmup-ratio", type=FRACTION, default=FinetuneConfig.warmup_ratio,
                   help="warm-up share of the updates where the scheduler says \"auto\"")
    p.add_argument("--max-len", type=POSITIVE_INT, default=FinetuneConfig.max_len,
                   help="tokens per input (paper QA: 384)")
    p.add_argument("--doc-stride", type=POSITIVE_INT, default=FinetuneConfig.doc_stride,
                   help="QA: overlap of context windows")
    p.add_argument("--pooling", choices=POOLINGS, default=FinetuneConfig.pooling,
                   help="sequence tasks: classify from the <s> position (RoBERTa) or the mean over real tokens")
    p.add_argument("--seed", type=COUNT, default=TrainConfig.seed, help="seed of the head, data order and dropout")
    p.add_argument("--log-every", type=POSITIVE_INT, default=TrainConfig.log_every, help="updates between log lines")
    p.add_argument("--save-every", type=POSITIVE_INT, default=FinetuneConfig.save_every,
                   help="updates between checkpoints (default: the end)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --out")
    add_allow_config_change(p)
    add_run_args(p)
    p.add_argument("--local_rank", "--local-rank", type=int, default=0, help=argparse.SUPPRESS)
    return p


def build_task_model(primary_folder: Path, spec: TaskSpec, seed: int) -> tuple[TaskModel, dict[str, Any]]:
    """The primary's body (embeddings and layers, MLM heads dropped) with a freshly initialised task head."""
    mlm, meta = load_mlm(primary_folder)
    cfg = mlm.cfg.replace(aux_head_layer=None)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # the head's initialisation is part of what a finetuning seed varies
        model = TaskModel(cfg, spec.kind, spec.num_labels, spec.pooling)
    state = mlm.state_dict()
    body = {k: v for k, v in state.items() if k.startswith(("embeddings.", "layers."))}
    if cfg.pre_norm:  # the top layer's output was read through the MLM head's own LayerNorm
        body.update({f"final_norm.{k}": state[f"heads.{MAIN_HEAD}.input_norm.{k}"] for k in ("weight", "bias")})
    missing = model.load_state_dict(body, strict=False).missing_keys
    assert all(not k.startswith(("embeddings.", "layers.", "final_norm.")) for k in missing), missing
    model.embeddings.tokens.weight.requires_grad_(False)
    return model, meta


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Every input is read and checked before the process group starts and before anything is written.
    ds_config = load_ds_config(args.ds_config)
    primary_meta = checkpoint.load_meta(args.model)
    positions = (primary_meta.get("model_config") or {}).get("max_positions")
    if isinstance(positions, int) and args.max_len > positions:
        raise InputError(f"--max-len {args.max_len} exceeds the model's {positions} positions ({args.model})")
    examples = read_examples(args.format, args.train, language=args.language, training=True)
    spec = TaskSpec(name=args.task, format=args.format, labels=task_labels(args.format, examples),
                    max_len=args.max_len, doc_stride=args.doc_stride, pooling=args.pooling)
    # The dev file is read now, so that a bad one is refused before training rather than after it.
    dev = None if args.dev is None else read_eval_examples(spec, args.dev_format, args.dev, args.language)
    tokenizer = load_tokenizer(primary_meta.get("tokenizer"), args.model)
    info = init_distributed(dist_timeout(args))
    batch = resolve_batch(ds_config, info.world_size, source=str(args.ds_config))
    features = featurize(spec, examples, tokenizer)
    rows = len(features.arrays["input_ids"])
    steps = max(1, int(args.epochs * (rows // batch.global_batch)))
    train_cfg = TrainConfig(steps=steps, seq_len=args.max_len, seed=args.seed, save_every=args.save_every,
                            log_every=args.log_every, warmup_ratio=args.warmup_ratio,
                            activation_checkpointing=args.activation_checkpointing, compile=args.compile,
                            prefetch=args.prefetch)
    check_ds_config(ds_config, str(args.ds_config), steps=steps)
    stream = ArrayStream(features.arrays, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                         seed=args.seed, source=str(args.train))  # refuses a file too small for one update
    model, primary_meta = build_task_model(args.model, spec, args.seed)
    description = {"stage": "finetune", "variant": spec.kind, "model": model.cfg.to_dict(),
                   "data": str(Path(args.train).resolve()), "tokenizer_sha256": tokenizer.sha256, "seed": args.seed,
                   "seq_len": args.max_len, "global_batch": batch.global_batch, "task": spec.to_dict(),
                   "source": checkpoint.lineage(primary_meta), "ds_config": ds_config, "train": train_cfg.to_dict()}
    if info.rank == 0:
        write_run_description(args.out, description, resume=args.resume,
                              allow_config_change=args.allow_config_change)
        print(f"[finetune-{spec.name}] {len(examples):,} examples ({rows:,} model inputs), {len(spec.labels)} labels;"
              f" {steps} updates of {batch.global_batch}; token embeddings frozen", flush=True)
    dist.barrier()
    info.seed_ranks_apart(args.seed)
    stage = Stage(
        name=args.run_name or f"finetune-{spec.name}-seed{args.seed}", model=model, loss_fn=task_loss,
        flops_per_update=flops.finetune_per_update(model.cfg, seq_len=args.max_len, batch=batch.global_batch),
        meta={"kind": checkpoint.Kind.TASK_MODEL.value, "task": spec.to_dict(), "model_config": model.cfg.to_dict(),
              # where the tokenizer was found (a body copied from another machine records a path gone here)
              "tokenizer": {"path": str(Path(tokenizer.path).resolve()), "sha256": tokenizer.sha256},
              "primary_sha256": checkpoint.lineage(primary_meta),
              "finetuned_from": str(Path(args.model).resolve()), "seed": args.seed},
    )
    result = train(stage, stream, ds_config=ds_config, train_cfg=train_cfg,
                   run_dir=args.out, log_root=args.log_root, resume=args.resume, batch=batch)
    summary = {"step": result.step, "checkpoint": str(result.checkpoint), "stopped_by": result.stopped_by,
               **result.last_metrics}
    if dev is not None and info.rank == 0 and result.stopped_by is None:
        dev_features = featurize(spec, dev, tokenizer)
        scores = score(spec, dev, dev_features, predict(result.engine.module, dev_features.arrays), args.language)
        write_json(Path(args.out) / "dev_scores.json", {"language": args.language, "file": str(args.dev), **scores})
        summary["dev"] = scores
    return summary


def main(argv: list[str] | None = None) -> int:
    return run_main(run, build_parser().parse_args(argv))

"""Step 3: finetune the primary model's body on a source-language task with its token embeddings frozen
(``python -m ds_minimodel finetune``).

Freezing the (tied) token embeddings keeps the body's input space the one the Step-2 embeddings of every target
language were trained to match, so those embeddings can be swapped in afterwards (Step 4). Paper defaults: peak
learning rate 1e-5 for classification and 3e-5 for QA, warm-up 6% of the updates, linear decay, 3 epochs, 5 seeds.
The DeepSpeed JSON may give the scheduler's ``total_num_steps`` and ``warmup_num_steps`` as ``"auto"``: they are
then derived from --epochs, the training set size and --warmup-ratio.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ds_minimodel import flops
from ds_minimodel.config import write_json
from ds_minimodel.data.streams import ArrayStream
from ds_minimodel.data.tokenizer import load_tokenizer
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MAIN_HEAD, POOLINGS, TaskModel
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.transforms import freeze_for_finetuning
from ds_minimodel.stages.cli import (
    run_main,
    spec_from_command_line,
)
from ds_minimodel.stages.runner import Built, Context, run_stage, train_config
from ds_minimodel.stages.specs import FinetuneSpec, check_fields, one_of
from ds_minimodel.stages.steps import LOSSES
from ds_minimodel.systems import Step
from ds_minimodel.tasks.formats import (
    KIND_OF_FORMAT,
    TaskSpec,
    featurize,
    predict,
    read_eval_examples,
    read_examples,
    score,
    task_labels,
)
from ds_minimodel.train import checkpoint
from ds_minimodel.train.engine import Stage, TrainResult

CHECKS = {"format": one_of(sorted(KIND_OF_FORMAT)), "dev_format": one_of(sorted(KIND_OF_FORMAT)),
          "pooling": one_of(POOLINGS)}
"""What the spec's annotations cannot say about its values (``specs.check_fields``)."""


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
    freeze_for_finetuning(model)
    return model, meta


def build(spec: FinetuneSpec, ctx: Context) -> Built:
    # Every input is read and checked before anything is written.
    check_fields(spec, CHECKS)
    primary_meta = checkpoint.load_meta(spec.model)
    positions = (primary_meta.model_config or {}).get("max_positions")
    if isinstance(positions, int) and spec.max_len > positions:
        raise InputError(f"--max-len {spec.max_len} exceeds the model's {positions} positions ({spec.model})")
    examples = read_examples(spec.format, spec.train, language=spec.language, training=True)
    task = TaskSpec(name=spec.task, format=spec.format, labels=task_labels(spec.format, examples),
                    max_len=spec.max_len, doc_stride=spec.doc_stride, pooling=spec.pooling)
    # The dev file is read now, so that a bad one is refused before training rather than after it.
    dev = None if spec.dev is None else read_eval_examples(task, spec.dev_format, spec.dev, spec.language)
    tokenizer = load_tokenizer(primary_meta.tokenizer_dict, spec.model)
    info, batch = ctx.info, ctx.batch
    features = featurize(task, examples, tokenizer)
    rows = len(features.arrays["input_ids"])
    steps = max(1, int(spec.epochs * (rows // batch.global_batch)))
    train_cfg = train_config(spec, ctx.ds_config, steps, seq_len=spec.max_len)
    stream = ArrayStream(features.arrays, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                         seed=spec.seed, source=str(spec.train))  # refuses a file too small for one update
    model, primary_meta = build_task_model(spec.model, task, spec.seed)
    stage = Stage(
        name=spec.run_name or f"{Step.FINETUNE}-{task.name}-seed{spec.seed}", model=model,
        loss_fn=LOSSES[Step.FINETUNE],
        flops_per_update=flops.per_update_flops(Step.FINETUNE, model.cfg, seq_len=spec.max_len,
                                                batch=batch.global_batch),
        meta={"kind": checkpoint.Kind.TASK_MODEL.value, "task": task.to_dict(), "model_config": model.cfg.to_dict(),
              # where the tokenizer was found (a body copied from another machine records a path gone here)
              "tokenizer": {"path": str(Path(tokenizer.path).resolve()), "sha256": tokenizer.sha256},
              "primary_sha256": primary_meta.lineage,
              "finetuned_from": str(Path(spec.model).resolve()), "seed": spec.seed},
    )

    def dev_scores(result: TrainResult) -> dict[str, Any]:
        if dev is None or info.rank != 0 or result.stopped_by is not None:
            return {}
        dev_features = featurize(task, dev, tokenizer)
        scores = score(task, dev, dev_features, predict(result.engine.module, dev_features.arrays), spec.language)
        write_json(Path(spec.out) / "dev_scores.json", {"language": spec.language, "file": str(spec.dev), **scores})
        return {"dev": scores}

    return Built(
        stage=stage, stream=stream, train_cfg=train_cfg, summary=dev_scores,
        record={"variant": task.kind, "model": model.cfg.to_dict(), "data": str(Path(spec.train).resolve()),
                "tokenizer_sha256": tokenizer.sha256, "seq_len": spec.max_len, "task": task.to_dict(),
                "source": primary_meta.lineage},
        banner=f"[{Step.FINETUNE}-{task.name}] {len(examples):,} examples ({rows:,} model inputs), "
               f"{len(task.labels)} labels; {steps} updates of {batch.global_batch}; token embeddings frozen")


def run(spec: FinetuneSpec) -> dict[str, Any]:
    return run_stage(spec, build).summary


def main(argv: list[str] | None = None) -> int:
    return run_main(run, spec_from_command_line(FinetuneSpec, argv, description=__doc__, checks=CHECKS))

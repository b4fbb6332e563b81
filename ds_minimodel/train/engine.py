"""DeepSpeed set-up and the ONE training loop every stage shares (STYLE habit 9).

A stage (pretraining, MiniPost's Step 1b, Step 2 embedding learning, Step 3 finetuning) differs only in its model,
which parameters train, its data stream and its loss function: see ``Stage``. ``train`` does the rest: engine
construction from a ``ds_configs/`` JSON, gradient accumulation, logging, checkpointing and exact resume.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ds_minimodel.config import TrainConfig
from ds_minimodel.data.streams import Prefetcher
from ds_minimodel.ds_config import BatchSizes, fill_schedule, uses_fp16
from ds_minimodel.errors import TrainingError
from ds_minimodel.flops import to_gpu_days
from ds_minimodel.train import checkpoint
from ds_minimodel.train.faults import LossScaleWatch, StopSignals, lost_a_peer, non_finite_loss, peer_lost
from ds_minimodel.train.metrics import MetricsLogger, reduce_update

# ----------------------------------------------------------------------------------------------- the loop
LossFn = Callable[[nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor]]


@dataclass
class Stage:
    """What one training stage is. Everything else is shared."""

    name: str
    """Run name for logs and TensorBoard, e.g. 'pretrain-minijoint', or the pipeline's 'step2-de-minijoint'."""
    model: nn.Module
    loss_fn: LossFn
    """(model, batch) -> {'loss': tensor to backpropagate, other named scalars to log}."""
    flops_per_update: float
    """Analytic FLOPs of one optimizer update over the global batch (ds_minimodel.flops)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Written into every checkpoint's meta.json (model config, tokenizer reference, provenance...)."""
    compact_checkpoints: bool = False
    """Save only the trainable parameters (Step 2: the embeddings), not the frozen body."""
    save_initial: bool = False
    """Also save a checkpoint at update 0 when a run starts fresh (Step 2: the overlap-initialised rows before any
    update, the point its time-to-target curves start from)."""

    param_groups: list[dict[str, Any]] | None = None
    """Optimizer parameter groups, when the trainable parameters are not one group (active forgetting)."""
    after_update: Callable[[Any, int], None] | None = None
    """Called with (engine, update) after every update, before that update's checkpoint (active forgetting)."""

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Only these reach the optimizer; frozen ones get no gradient and no optimizer state."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"stage {self.name}: no trainable parameters")
        return params


@dataclass
class TrainResult:
    step: int
    samples: int
    tokens: int
    flops: float
    last_metrics: dict[str, float]
    checkpoint: Path | None
    engine: Any
    """The DeepSpeed engine (tests inspect its optimizer; in-process callers may evaluate with it)."""
    stopped_by: str | None = None
    """The signal that stopped the run before its last update (it saved a checkpoint first), or None."""
    skipped_updates: int = 0
    """fp16: updates of this run that the loss scaler skipped because the gradients overflowed."""


def batch_to(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A micro-batch's tensors on ``device`` (asynchronous from pinned memory); other values as they are."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def compile_model(engine: Any) -> None:
    """``torch.compile`` the engine's model in place (checkpoint names unchanged), as one graph."""
    # Only the masked positions go through the vocabulary projection: a boolean index whose size depends on the
    # data. Without this Dynamo gives up on the model's forward and runs it eagerly.
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    engine.compile()


def train(
    stage: Stage,
    stream: Any,
    *,
    ds_config: dict[str, Any],
    train_cfg: TrainConfig,
    run_dir: Path,
    resume: bool,
    batch: BatchSizes,
    log_root: Path | None = None,
) -> TrainResult:
    """Train ``stage`` for ``train_cfg.steps`` updates; every rank calls this.

    ``stream`` yields this rank's micro-batches (dicts with input tensors and ``num_tokens``) and has
    ``state_dict``/``load_state_dict`` so that a resumed run continues exactly where it stopped.
    """
    import deepspeed

    rank = dist.get_rank()  # the DeepSpeed JSON was checked whole before (ds_validate.check_ds_config)
    config = fill_schedule(ds_config, train_cfg.steps, train_cfg.warmup_ratio)
    if train_cfg.activation_checkpointing:
        stage.model.activation_checkpointing = True
    config.update(train_batch_size=batch.global_batch, train_micro_batch_size_per_gpu=batch.micro,
                  gradient_accumulation_steps=batch.accumulation)
    engine, _, _, _ = deepspeed.initialize(model=stage.model, config=config,
                                           model_parameters=stage.param_groups or stage.trainable_parameters())
    if train_cfg.compile:
        compile_model(engine)
    prefetch = train_cfg.prefetch if train_cfg.prefetch is not None else (2 if engine.device.type == "cuda" else 0)
    if prefetch:
        stream = Prefetcher(stream, depth=prefetch, pin_for=engine.device)

    step, samples, tokens = 0, 0, 0
    say = print if rank == 0 else (lambda _: None)
    latest = checkpoint.latest_valid_checkpoint(run_dir, say=say) if resume else None
    if latest is not None:
        meta = checkpoint.resume(engine, latest, trainable_only=stage.compact_checkpoints)
        step, samples, tokens = meta["step"], meta["samples"], meta["tokens"]
        stream.load_state_dict(meta["data_position"])
        if rank == 0:
            print(f"[{stage.name}] resumed from {latest} at update {step}", flush=True)
    elif resume and rank == 0:
        print(f"[{stage.name}] --resume: no complete checkpoint in {run_dir}, starting from scratch", flush=True)

    # TensorBoard: <log_root>/<stage name>; several runs sharing a log root show side by side.
    logger = MetricsLogger(run_dir / "metrics.jsonl", (log_root or run_dir / "tensorboard") / stage.name,
                           enabled=rank == 0, resume_step=step)
    fp16 = uses_fp16(ds_config)
    scale_watch = LossScaleWatch(engine) if fp16 else None
    last_ckpt = latest
    metrics: dict[str, float] = {}
    progress = _progress(stage.name, step, train_cfg.steps, enabled=rank == 0)
    stopped_by = None
    signals = StopSignals().install()

    saving: int | None = None  # the update whose checkpoint is being written, while it is (for the lost-peer error)

    def save(at: int) -> Path:
        nonlocal saving
        saving = at
        path = checkpoint.save(
            engine, run_dir, at,
            {**stage.meta, "stage": stage.name, "samples": samples, "tokens": tokens,
             "flops": at * stage.flops_per_update, "data_position": stream.state_dict(),
             "global_batch": batch.global_batch},
            keep=train_cfg.keep_checkpoints, trainable_only=stage.compact_checkpoints)
        saving = None
        return path

    try:
        if stage.save_initial and latest is None:
            last_ckpt = save(0)
        while step < train_cfg.steps:
            started = time.perf_counter()
            sums: dict[str, torch.Tensor] = {}
            local_tokens = 0
            for _ in range(batch.accumulation):
                micro = batch_to(next(stream), engine.device)
                local_tokens += int(micro["num_tokens"])
                losses = stage.loss_fn(engine, micro)
                engine.backward(losses["loss"])
                try:
                    engine.step()
                except Exception as err:
                    # DeepSpeed all-reduces the overflow flag, so every rank raises this at the same update.
                    if scale_watch is None or not scale_watch.is_deepspeed_collapse(err):
                        raise
                    scale_watch.after_update()
                    raise scale_watch.error(run_dir, stage.name, step + 1, last_ckpt) from None
                for name, value in losses.items():
                    sums[name] = sums.get(name, 0.0) + value.detach().float()
            step += 1
            if stage.after_update is not None:
                stage.after_update(engine, step)
            if scale_watch is not None:
                scale_watch.after_update()
            samples += batch.global_batch
            update = reduce_update(sums, local_tokens, signals.stop_requested(), batch)
            update_tokens, stop_requested = update.tokens, update.stop
            tokens += update_tokens
            elapsed = time.perf_counter() - started
            loss = update.losses["loss"]
            if not math.isfinite(loss) and not fp16:
                raise non_finite_loss(run_dir, stage.name, loss, step, last_ckpt)
            metrics = dict(update.losses)
            if step % train_cfg.log_every == 0 or step == train_cfg.steps:
                metrics.update(_engine_metrics(engine, scale_watch))
                metrics.update(tokens_per_s=update_tokens / elapsed, samples=samples, tokens=tokens,
                               flops=step * stage.flops_per_update,
                               v100_days=to_gpu_days(step * stage.flops_per_update))
                logger.log(metrics, step)
                progress.update(step, loss)
            if step % train_cfg.save_every == 0 or step == train_cfg.steps or stop_requested:
                last_ckpt = save(step)
            if stop_requested and step < train_cfg.steps:
                stopped_by = signals.reason()
                if rank == 0:
                    print(f"[{stage.name}] {stopped_by}: saved {last_ckpt} at update {step} of {train_cfg.steps} "
                          "and stopped; run again with --resume to continue", flush=True)
                break
    except checkpoint.CheckpointWriteError as err:
        raise TrainingError(str(err)) from None
    except RuntimeError as err:
        if not lost_a_peer(err):
            raise
        where = f"while saving the checkpoint of update {saving}" if saving is not None else f"during update {step + 1}"
        raise peer_lost(run_dir, stage.name, rank, where, err, last_ckpt) from None
    finally:
        signals.restore()
        progress.close()
        logger.close()
        if isinstance(stream, Prefetcher):
            stream.close()
    skipped = scale_watch.skipped if scale_watch is not None else 0
    if skipped and rank == 0:
        print(f"[{stage.name}] fp16: the loss scaler skipped {skipped} updates of this run for overflowing gradients "
              f"(loss scale now {scale_watch.scale():g})", flush=True)
    return TrainResult(step=step, samples=samples, tokens=tokens, flops=step * stage.flops_per_update,
                       last_metrics=metrics, checkpoint=last_ckpt, engine=engine, stopped_by=stopped_by,
                       skipped_updates=skipped)


def _engine_metrics(engine: Any, scale_watch: LossScaleWatch | None) -> dict[str, float]:
    out = {"lr": float(engine.get_lr()[0])}
    norm = engine.get_global_grad_norm()
    if norm is not None:
        out["grad_norm"] = float(norm)
    if scale_watch is not None:
        scale = scale_watch.scale()
        if scale is not None:
            out["loss_scale"] = scale
        out["skipped_steps"] = float(engine.skipped_steps)  # DeepSpeed's count, over the whole run incl. resumes
    return out


class _progress:
    """A tqdm bar on rank 0 when attached to a terminal; plain lines otherwise (batch-job logs stay readable)."""

    def __init__(self, name: str, start: int, total: int, *, enabled: bool):
        self.name, self.enabled, self.bar = name, enabled, None
        if enabled and os.isatty(2):
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc=name, unit="upd", dynamic_ncols=True)

    def update(self, step: int, loss: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.4f}")
        else:
            print(f"[{self.name}] update {step} loss {loss:.4f}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

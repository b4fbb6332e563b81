"""DeepSpeed set-up and the ONE training loop every stage shares (STYLE habit 9).

A stage (pretraining, MiniPost's Step 1b, Step 2 embedding learning, Step 3 finetuning) differs only in its model,
which parameters train, its data stream and its loss function: see ``Stage``. ``train`` does the rest: engine
construction from a ``ds_configs/`` JSON, gradient accumulation, logging, checkpointing and exact resume.
"""
from __future__ import annotations

import collections
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
from ds_minimodel.data.prefetch import Prefetcher
from ds_minimodel.ds_config import BatchSizes, fill_schedule, half_precision, unchecked_bf16, uses_fp16
from ds_minimodel.errors import InputError, TrainingError
from ds_minimodel.flops import to_gpu_days
from ds_minimodel.train import checkpoint
from ds_minimodel.train.distributed import skip_inference_comm_op
from ds_minimodel.train.faults import (
    LossScaleWatch,
    StopSignals,
    lost_a_peer,
    non_finite_gradient,
    non_finite_loss,
    peer_lost,
)
from ds_minimodel.train.kernel_classes import UpdateProfiler
from ds_minimodel.train.metrics import MetricsLogger, UpdateStats, reduce_update

# ----------------------------------------------------------------------------------------------- the loop
LossFn = Callable[[nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor]]


@dataclass
class Stage:
    """What one training stage is. Everything else is shared."""

    name: str
    """Run name for logs and TensorBoard, ``<step>-<what>`` (``systems.Step``): step1-minijoint, step2-de-minijoint."""
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
    update_seconds: float = 0.0
    """Wall-clock seconds this process spent in updates (forward, backward, step), checkpoints not counted: set
    against a plan's wall clock, the share of it that trained."""
    save_seconds: float = 0.0
    """Wall-clock seconds this process spent writing checkpoints."""


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
    # Rank 0 writes model.pt: it keeps the frozen parameters' full-precision values before the engine rounds them.
    keeps_frozen = half_precision(ds_config) and not stage.compact_checkpoints and dist.get_rank() == 0
    frozen = checkpoint.frozen_values(stage.model) if keeps_frozen else None
    engine = build_engine(stage, ds_config, train_cfg, batch)
    loop = Loop(stage, stream, engine, train_cfg=train_cfg, batch=batch, run_dir=run_dir, fp16=uses_fp16(ds_config),
                unchecked=unchecked_bf16(ds_config), frozen=frozen)
    return loop.run(resume=resume, log_root=log_root)


def build_engine(stage: Stage, ds_config: dict[str, Any], train_cfg: TrainConfig, batch: BatchSizes) -> Any:
    """The DeepSpeed engine over the stage's trainable parameters, its schedule filled in for this run."""
    import deepspeed

    config = fill_schedule(ds_config, train_cfg.steps, train_cfg.warmup_ratio)  # the JSON was checked whole before
    if train_cfg.activation_checkpointing:
        stage.model.activation_checkpointing = True
    if train_cfg.qkv_views:
        stage.model.qkv_views = True
    config.update(train_batch_size=batch.global_batch, train_micro_batch_size_per_gpu=batch.micro,
                  gradient_accumulation_steps=batch.accumulation)
    # deepspeed.initialize starts DeepSpeed's communication backend even over a group the caller started itself,
    # and on CPU that backend would build its inference-only shared-memory op (about 100 s of g++ on a fresh machine)
    skip_inference_comm_op()
    engine, _, _, _ = deepspeed.initialize(model=stage.model, config=config,
                                           model_parameters=stage.param_groups or stage.trainable_parameters())
    if train_cfg.compile:
        compile_model(engine)
    return engine


def prefetching(cfg: TrainConfig, device: torch.device) -> tuple[int, bool]:
    """(micro-batches built ahead, whether in a process of their own) for a run on ``device``: ``cfg.prefetch`` and
    ``cfg.prefetch_process`` where given; else 2 in a process on a GPU and none on a CPU."""
    gpu = device.type == "cuda"
    process = cfg.prefetch_process if cfg.prefetch_process is not None else gpu
    depth = cfg.prefetch if cfg.prefetch is not None else (2 if gpu or cfg.prefetch_process else 0)
    return depth, process


class Loop:
    """The training loop over a built engine: resume, update, log, save, stop. Any object with the DeepSpeed
    engine's ``__call__``, ``backward``, ``step``, ``device``, ``get_lr`` and ``get_global_grad_norm`` drives it
    (the unit test's does); what can go wrong is recognised in ``train.faults``, the step statistics reduced in
    ``train.metrics``."""

    def __init__(self, stage: Stage, stream: Any, engine: Any, *, train_cfg: TrainConfig, batch: BatchSizes,
                 run_dir: Path, fp16: bool = False, unchecked: bool = False,
                 frozen: dict[str, torch.Tensor] | None = None):
        self.stage, self.engine, self.cfg, self.batch, self.run_dir = stage, engine, train_cfg, batch, run_dir
        self.frozen = frozen  # the frozen parameters' full-precision values, for checkpoints (checkpoint.frozen_values)
        depth, process = prefetching(train_cfg, engine.device)
        self.stream = Prefetcher(stream, depth=depth, pin_for=engine.device, process=process) if depth else stream
        self.rank = dist.get_rank()
        if depth:
            self.say(f"micro-batches built {depth} ahead {'in a process of their own' if process else 'on a thread'}")
        self.scale_watch = LossScaleWatch(engine) if fp16 else None
        # bf16 without DeepSpeed's overflow check applies an update whose gradient is not finite, and that update's
        # loss (computed before it) is finite: its gradient norm is read before the weights after it are saved.
        self.unchecked = unchecked
        self.step = self.samples = self.tokens = 0
        self.save_seconds = 0.0
        self.last_ckpt: Path | None = None
        self.saving: int | None = None  # the update whose checkpoint is being written, while it is

    def say(self, line: str) -> None:
        if self.rank == 0:
            print(f"[{self.stage.name}] {line}", flush=True)

    def save(self, at: int) -> Path:
        stage, started = self.stage, time.perf_counter()
        self.saving = at
        self.last_ckpt = checkpoint.save(
            self.engine, self.run_dir, at,
            {**stage.meta, "stage": stage.name, "samples": self.samples, "tokens": self.tokens,
             "flops": at * stage.flops_per_update, "data_position": self.stream.state_dict(),
             "global_batch": self.batch.global_batch},
            keep=self.cfg.keep_checkpoints, trainable_only=stage.compact_checkpoints, frozen=self.frozen)
        self.saving = None
        self.save_seconds += time.perf_counter() - started
        return self.last_ckpt

    def resume(self) -> Path | None:
        """Continue from the newest complete checkpoint in the run folder, if there is one."""
        latest = checkpoint.latest_valid_checkpoint(self.run_dir, say=print if self.rank == 0 else (lambda _: None))
        if latest is None:
            self.say(f"--resume: no complete checkpoint in {self.run_dir}, starting from scratch")
            return None
        meta = checkpoint.resume(self.engine, latest, trainable_only=self.stage.compact_checkpoints)
        if None in (meta.step, meta.samples, meta.tokens, meta.data_position):
            raise InputError(f"{latest / checkpoint.META}: not a training checkpoint (no step, samples, tokens or "
                             "data position to resume from)")
        self.step, self.samples, self.tokens = meta.step, meta.samples, meta.tokens
        self.stream.load_state_dict(meta.data_position)
        self.say(f"resumed from {latest} at update {self.step}")
        self.last_ckpt = latest
        return latest

    def update(self, stop_requested: Callable[[], bool]) -> tuple[UpdateStats, float]:
        """One optimizer update over the batch's micro-batches; its statistics, reduced over the ranks with whether
        a stop was requested by its end, and its seconds."""
        engine, stage, started = self.engine, self.stage, time.perf_counter()
        sums: dict[str, torch.Tensor] = {}
        local_tokens = 0
        for _ in range(self.batch.accumulation):
            micro = batch_to(next(self.stream), engine.device)
            local_tokens += int(micro["num_tokens"])
            losses = stage.loss_fn(engine, micro)
            engine.backward(losses["loss"])
            try:
                engine.step()
            except Exception as err:
                # DeepSpeed all-reduces the overflow flag, so every rank raises this at the same update.
                if self.scale_watch is None or not self.scale_watch.is_deepspeed_collapse(err):
                    raise
                self.scale_watch.after_update()
                raise self.scale_watch.error(self.run_dir, stage.name, self.step + 1, self.last_ckpt) from None
            for name, value in losses.items():
                sums[name] = sums.get(name, 0.0) + value.detach().float()
        self.step += 1
        if stage.after_update is not None:
            stage.after_update(engine, self.step)
        if self.scale_watch is not None:
            self.scale_watch.after_update()
        self.samples += self.batch.global_batch
        stats = reduce_update(sums, local_tokens, stop_requested(), self.batch)
        self.tokens += stats.tokens
        return stats, time.perf_counter() - started

    def run(self, *, resume: bool, log_root: Path | None = None) -> TrainResult:
        stage, cfg = self.stage, self.cfg
        latest = self.resume() if resume else None
        # TensorBoard: <log_root>/<stage name>; several runs sharing a log root show side by side.
        logger = MetricsLogger(self.run_dir / "metrics.jsonl", (log_root or self.run_dir / "tensorboard") / stage.name,
                               enabled=self.rank == 0, resume_step=self.step)
        progress = _progress(stage.name, self.step, cfg.steps, enabled=self.rank == 0)
        metrics: dict[str, float] = {}
        stopped_by = None
        signals = StopSignals().install()
        in_updates = 0.0
        profiler = (UpdateProfiler(cfg.profile_updates, start=self.step, steps=cfg.steps,
                                   cuda=self.engine.device.type == "cuda")
                    if cfg.profile_updates and self.rank == 0 else None)
        try:
            if stage.save_initial and latest is None:
                self.save(0)
            while self.step < cfg.steps:
                if profiler is not None:
                    profiler.before(self.step + 1)
                stats, seconds = self.update(signals.stop_requested)
                in_updates += seconds
                if profiler is not None and profiler.after(seconds):
                    profiler.write(self.run_dir)
                step, loss = self.step, stats.losses["loss"]
                if not math.isfinite(loss) and self.scale_watch is None:
                    raise non_finite_loss(self.run_dir, stage.name, loss, step, self.last_ckpt)
                metrics = dict(stats.losses)
                if step % cfg.log_every == 0 or step == cfg.steps:
                    metrics.update(_engine_metrics(self.engine, self.scale_watch))
                    metrics.update(tokens_per_s=stats.tokens / seconds, samples=self.samples, tokens=self.tokens,
                                   flops=step * stage.flops_per_update,
                                   v100_days=to_gpu_days(step * stage.flops_per_update))
                    logger.log(metrics, step)
                    progress.update(step, loss, metrics["tokens_per_s"])
                if step % cfg.save_every == 0 or step == cfg.steps or stats.stop:
                    if self.unchecked:
                        norm = self.engine.get_global_grad_norm()
                        if norm is not None and not (math.isfinite(float(norm)) and float(norm) >= 0):
                            raise non_finite_gradient(self.run_dir, stage.name, float(norm), step, self.last_ckpt)
                    self.save(step)
                if stats.stop and step < cfg.steps:
                    stopped_by = signals.reason()
                    self.say(f"{stopped_by}: saved {self.last_ckpt} at update {step} of {cfg.steps} and stopped; "
                             "run again with --resume to continue")
                    break
        except checkpoint.CheckpointWriteError as err:
            raise TrainingError(str(err)) from None
        except RuntimeError as err:
            if not lost_a_peer(err):
                raise
            where = (f"while saving the checkpoint of update {self.saving}" if self.saving is not None
                     else f"during update {self.step + 1}")
            raise peer_lost(self.run_dir, stage.name, self.rank, where, err, self.last_ckpt) from None
        finally:
            if profiler is not None:
                profiler.write(self.run_dir)
            signals.restore()
            progress.close()
            logger.close()
            if isinstance(self.stream, Prefetcher):
                self.stream.close()
        skipped = self.scale_watch.skipped if self.scale_watch is not None else 0
        if skipped:
            self.say(f"fp16: the loss scaler skipped {skipped} updates of this run for overflowing gradients "
                     f"(loss scale now {self.scale_watch.scale():g})")
        return TrainResult(step=self.step, samples=self.samples, tokens=self.tokens,
                           flops=self.step * stage.flops_per_update, last_metrics=metrics, checkpoint=self.last_ckpt,
                           engine=self.engine, stopped_by=stopped_by, skipped_updates=skipped,
                           update_seconds=in_updates, save_seconds=self.save_seconds)


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
    """A tqdm bar on rank 0 when attached to a terminal; plain lines otherwise (batch-job logs stay readable), each
    with the loss, the tokens per second of that update and the time left at the pace of the last ``WINDOW`` lines
    (since this run started, before there are that many): a machine whose load changes mid-run (another job starts
    or ends) gets an estimate at today's pace, not the run's average."""

    WINDOW = 4

    def __init__(self, name: str, start: int, total: int, *, enabled: bool):
        self.name, self.enabled, self.bar = name, enabled, None
        self.start, self.total = start, total
        self.marks = collections.deque([(time.perf_counter(), start)], maxlen=self.WINDOW + 1)
        if enabled and os.isatty(2):
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc=name, unit="upd", dynamic_ncols=True)

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:,.0f}")
            return
        line = f"[{self.name}] update {step} loss {loss:.4f}, {tokens_per_s:,.0f} tokens/s"
        self.marks.append((time.perf_counter(), step))
        (then, first), (now, last) = self.marks[0], self.marks[-1]
        if step < self.total and last > first:
            line += f", {duration((now - then) / (last - first) * (self.total - step))} left"
        print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def duration(seconds: float) -> str:
    """``1 h 05 min``, ``4 min 10 s``, ``35 s``."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"

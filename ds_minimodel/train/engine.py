"""DeepSpeed set-up and the ONE training loop every stage shares (STYLE habit 9).

A stage (pretraining, MiniPost's Step 1b, Step 2 embedding learning, Step 3 finetuning) differs only in its model,
which parameters train, its data stream and its loss function: see ``Stage``. ``train`` does the rest: engine
construction from a ``ds_configs/`` JSON, gradient accumulation, logging, checkpointing and exact resume.
"""
from __future__ import annotations

import math
import os
import signal
import threading
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
from ds_minimodel.train.metrics import MetricsLogger

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


class StopSignals:
    """What asks the training loop to finish the current update, save a checkpoint and return:

    - SIGTERM and SIGUSR1, as a preempted or time-limited batch job needs (Slurm: ``--signal=USR1@120``);
    - Ctrl-C (SIGINT) the same way; a second Ctrl-C stops at once, without saving;
    - the end of the launcher that started this rank (``deepspeed`` or ``torchrun``): a launcher killed by a signal
      it cannot pass on (SIGKILL, or SIGTERM to the ``deepspeed`` runner, which does not forward it) would otherwise
      leave its ranks training on as orphans, writing a folder that a relaunch then writes too.

    Handlers are installed only in the main thread, and the previous ones are restored on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
    LAUNCHER_GONE = "its launcher ended"
    early: int | None = None
    """SIGUSR1 received before training began (see ``catch_early_usr1``)."""

    def __init__(self) -> None:
        self.received: int | None = StopSignals.early
        self.launcher_gone = False
        self._previous: dict[int, Any] = {}
        self._launchers = _launcher_pids()

    @classmethod
    def catch_early_usr1(cls) -> None:
        """Remember a SIGUSR1 that arrives while the run is still starting (its default action would kill the
        process and lose the job's last minutes): training then saves after its first update and stops. SIGTERM
        keeps its default until training begins, so that a launcher can still end a rank stuck in start-up."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, lambda signum, frame: setattr(cls, "early", signum))

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.received = signum

    def stop_requested(self) -> bool:
        """A signal arrived, or a launcher this rank watches is gone (checked once per update: one read of
        /proc/<pid>/stat per watched process)."""
        if self.received is None and not self.launcher_gone and self._launchers:
            self.launcher_gone = os.getppid() != self._launchers[0] or not all(map(_alive, self._launchers))
        return self.received is not None or self.launcher_gone

    def reason(self) -> str:
        if self.received is not None:
            return signal.Signals(self.received).name
        return self.LAUNCHER_GONE if self.launcher_gone else "a peer's signal"

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first, then the parent's pid); empty when the
    process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _alive(pid: int) -> bool:
    """Running, not gone and not a zombie (a killed launcher stays one until its own parent reaps it)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def _launcher_pids() -> list[int]:
    """The launcher processes this rank lives under, nearest first: torchrun's agent, or DeepSpeed's per-node
    ``deepspeed.launcher.launch`` and the ``deepspeed`` runner above it. Empty for a rank started any other way
    (plain python, mpirun, srun), whose lifetime the shell or the job system owns."""
    if "LOCAL_RANK" not in os.environ:
        return []
    parent = os.getppid()
    command = _cmdline(parent)
    if "torchrun" in command or "torch.distributed.run" in command:
        return [parent]
    if "deepspeed.launcher.launch" not in command:
        return []
    runner = _parent_of(parent)
    return [parent, runner] if runner and "deepspeed" in _cmdline(runner) else [parent]


class LossScaleWatch:
    """fp16 only: counts the updates DeepSpeed's loss scaler skips for overflowing gradients (normal early in
    training, while the dynamic scale finds its level), and turns a collapse into a ``TrainingError``: gradients that
    overflow even at the smallest scale the config allows, i.e. that are inf or NaN however they are scaled. ZeRO's
    scaler (every stage ``load_ds_config`` lets fp16 use) signals that with a bare ``Exception``."""

    def __init__(self, engine: Any):
        from deepspeed.runtime.fp16.loss_scaler import MIN_LOSS_SCALE

        self.engine = engine
        self.min_scale = engine.dynamic_loss_scale_args()[MIN_LOSS_SCALE] if engine.dynamic_loss_scale() else None
        self.skipped = 0
        self._skipped_before = engine.skipped_steps

    def scale(self) -> float | None:
        scale = getattr(self.engine.optimizer, "loss_scale", None)
        return None if scale is None else float(scale)

    def after_update(self) -> None:
        self.skipped += self.engine.skipped_steps - self._skipped_before
        self._skipped_before = self.engine.skipped_steps

    @staticmethod
    def is_deepspeed_collapse(err: Exception) -> bool:
        """DeepSpeed's ZeRO loss scaler raises a bare ``Exception`` with this text when it cannot go lower."""
        return "loss scale already at minimum" in str(err)

    def error(self, run_dir: Path, stage: str, step: int, last_ckpt: Path | None) -> TrainingError:
        return TrainingError(
            f"{run_dir}: [{stage}] the fp16 loss scale collapsed: the gradients of update {step} overflowed with the "
            f"loss scale already at its minimum ({self.min_scale:g}, fp16.min_loss_scale), so they are inf or NaN "
            f"at any scale ({self.skipped} updates of this run skipped before it). Skipped updates leave the weights "
            f"unchanged; the last good checkpoint is {last_ckpt or 'none'}. Lower the learning rate, check the "
            "data or train in bf16, then resume with --resume.")


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
            # One small all-reduce per update: losses averaged over ranks and micro-batches, tokens summed, and
            # whether any rank was asked to stop (so that all ranks save and leave together).
            names = sorted(sums)
            extra = torch.tensor([float(local_tokens), float(signals.stop_requested())], device=engine.device)
            packed = torch.cat([torch.stack([sums[n] for n in names]), extra])
            dist.all_reduce(packed)
            values = (packed[:-2] / (batch.accumulation * batch.world_size)).tolist()
            update_tokens = int(packed[-2].item())
            stop_requested = bool(packed[-1].item())
            tokens += update_tokens
            elapsed = time.perf_counter() - started
            loss = dict(zip(names, values))["loss"]
            if not math.isfinite(loss) and not fp16:
                raise TrainingError(
                    f"{run_dir}: [{stage.name}] non-finite loss {loss} at update {step}; nothing was saved after "
                    f"it, the last good checkpoint is {last_ckpt or 'none'}. Lower the learning rate or check the "
                    "data, then resume with --resume.")
            metrics = dict(zip(names, values))
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
        if not _lost_a_peer(err):
            raise
        where = f"while saving the checkpoint of update {saving}" if saving is not None else f"during update {step + 1}"
        raise TrainingError(
            f"{run_dir}: [{stage.name}] rank {rank} lost contact with another rank {where} "
            f"({str(err).strip().splitlines()[-1]}): a rank died, hung or became unreachable. The last complete "
            f"checkpoint is {last_ckpt or 'none'}; relaunch every rank with --resume to continue.") from None
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


# What Gloo, NCCL and torch's c10d say when a collective's peer is gone or silent (measured with a SIGKILLed and a
# SIGSTOPped peer on another host: "Connection reset by peer", "Timed out waiting 20000ms for recv operation").
_PEER_FAILURE = ("timed out", "timeout", "connection reset", "connection closed", "connection refused",
                 "broken pipe", "nccl error", "watchdog", "socket")
# Gloo's own words when its TCP pair to a silent peer times out, without naming Gloo (seen in CI with a SIGSTOPped
# peer while the other rank waited in a checkpoint's all-reduce: "Application timeout caused pair closure").
_GLOO_PAIR_FAILURE = ("caused pair closure",)


def _lost_a_peer(err: RuntimeError) -> bool:
    text = str(err).lower()
    return (isinstance(err, dist.DistError) or any(k in text for k in _GLOO_PAIR_FAILURE)
            or (("gloo" in text or "nccl" in text or "c10d" in text) and any(k in text for k in _PEER_FAILURE)))


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

"""DeepSpeed set-up and the ONE training loop every stage shares (STYLE habit 9).

A stage (pretraining, MiniPost's Step 1b, Step 2 embedding learning, Step 3 finetuning) differs only in its model,
which parameters train, its data stream and its loss function: see ``Stage``. ``train`` does the rest: engine
construction from a ``ds_configs/`` JSON, gradient accumulation, logging, checkpointing and exact resume.
"""
from __future__ import annotations

import copy
import datetime
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ds_minimodel import checkpoint, slurm
from ds_minimodel.config import ModelConfig, TrainConfig, read_json, write_json
from ds_minimodel.data import Prefetcher
from ds_minimodel.errors import InputError, TrainingError
from ds_minimodel.flops import to_gpu_days
from ds_minimodel.metrics import MetricsLogger

BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


# ----------------------------------------------------------------------------------------------- DeepSpeed config
@dataclass(frozen=True)
class BatchSizes:
    micro: int
    """Sequences per rank per forward pass."""
    accumulation: int
    """Micro-batches per optimizer update."""
    world_size: int
    """Data-parallel ranks."""

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer update (the paper's B = 2,048)."""
        return self.micro * self.accumulation * self.world_size


def load_ds_config(path: str | os.PathLike) -> dict[str, Any]:
    config = read_json(path)
    if not isinstance(config, dict):
        raise InputError(f"{path}: a DeepSpeed config must be a JSON object")
    for key in BATCH_KEYS:
        value = config.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise InputError(f"{path}: {key} must be a positive integer, got {value!r}")
    if uses_fp16(config) and not (config.get("zero_optimization") or {}).get("stage"):
        # Measured with DeepSpeed 0.19.8: engine.backward() scales the loss only for ZeRO optimizers, while the
        # stage-0 fp16 optimizers divide every gradient by the loss scale in step(), so each update is loss-scale
        # times too small and nothing overflows however high the scale (deepspeedai/DeepSpeed PR 8393, open).
        raise InputError(
            f"{path}: fp16 needs ZeRO stage 1 or higher: under ZeRO stage 0 DeepSpeed's engine never applies the "
            "loss scale that its fp16 optimizer divides out, so training silently stalls. Set "
            '"zero_optimization": {"stage": 1} (on one GPU it costs the same as stage 0), or use bf16')
    return config


def resolve_batch(ds_config: dict[str, Any], world_size: int, *, source: str) -> BatchSizes:
    """Check train_batch_size = micro x accumulation x world size; derive the one missing value.

    ``world_size`` is the real number of ranks (or a hostfile's total slots before launch). The error names the
    file and every number involved, since the usual cause is a config written for another cluster size.
    """
    total, micro, accum = (ds_config.get(k) for k in BATCH_KEYS)
    given = sum(v is not None for v in (total, micro, accum))
    if given < 2:
        raise InputError(f"{source}: give at least two of {', '.join(BATCH_KEYS)}")
    def derive(given_name: str, given: int) -> int:
        """train_batch_size / (given x world size), which must divide exactly."""
        derived, rest = divmod(total, given * world_size)
        if rest or derived == 0:
            raise InputError(
                f"{source}: train_batch_size {total} is not divisible by {given_name} {given} "
                f"x world size {world_size} = {given * world_size}")
        return derived

    if micro is None:
        micro = derive("gradient_accumulation_steps", accum)
    elif accum is None:
        accum = derive("train_micro_batch_size_per_gpu", micro)
    elif total is not None and total != micro * accum * world_size:
        raise InputError(
            f"{source}: train_batch_size {total} != train_micro_batch_size_per_gpu {micro} x "
            f"gradient_accumulation_steps {accum} x world size {world_size} = {micro * accum * world_size}")
    return BatchSizes(micro=micro, accumulation=accum, world_size=world_size)


def scheduler_total_steps(ds_config: dict[str, Any]) -> int | None:
    params = (ds_config.get("scheduler") or {}).get("params") or {}
    total = params.get("total_num_steps")
    return total if isinstance(total, int) else None  # "auto": the run's own update count (fill_schedule)


def fill_schedule(ds_config: dict[str, Any], steps: int, warmup_ratio: float) -> dict[str, Any]:
    """A copy of the config with the scheduler's ``"auto"`` lengths filled in: ``total_num_steps`` becomes the run's
    update count and ``warmup_num_steps`` that times ``warmup_ratio`` (at least 1), so one JSON serves runs of any
    length, as HF Trainer's ``"auto"`` values do."""
    config = copy.deepcopy(ds_config)
    params = (config.get("scheduler") or {}).get("params") or {}
    if params.get("total_num_steps") == "auto":
        params["total_num_steps"] = steps
    if params.get("warmup_num_steps") == "auto":
        params["warmup_num_steps"] = max(1, round(warmup_ratio * steps))
    return config


def uses_fp16(ds_config: dict[str, Any]) -> bool:
    return bool((ds_config.get("fp16") or {}).get("enabled"))


# ----------------------------------------------------------------------------------------------- processes
@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int


def free_port() -> int:
    """A TCP port free on this host now (for a rendezvous on loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEFAULT_DIST_TIMEOUT = datetime.timedelta(minutes=5)


def init_distributed(timeout: datetime.timedelta = DEFAULT_DIST_TIMEOUT) -> DistInfo:
    """Join (or create) the process group, whichever way the processes were started.

    - ``deepspeed`` / ``torchrun`` with RANK set: use the environment as given.
    - ``srun`` (one task per rank): rank, size and master address from the SLURM_* variables.
    - ``mpirun``: Open MPI's OMPI_COMM_WORLD_* and DeepSpeed's MPI discovery (mpi4py) for the master address.
    - plain ``python``: a one-rank group on loopback (DeepSpeed would otherwise try MPI discovery).

    ``timeout`` bounds every collective on every process group, so a dead or hung peer ends the run with an error
    instead of a hang (see ``_bound_every_group``).
    """
    import deepspeed

    if dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    env = os.environ
    if "RANK" not in env:
        env.update(slurm.rank_env(env))
    mpi = "RANK" not in env and "OMPI_COMM_WORLD_RANK" in env
    if "RANK" not in env and not mpi:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", str(free_port()))
    _bound_every_group(timeout)
    deepspeed.init_distributed(auto_mpi_discovery=mpi, timeout=timeout, verbose=False)
    _unlink_shm_allreduce_buffer()
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(env.get("LOCAL_RANK", 0)))


def _bound_every_group(timeout: datetime.timedelta) -> None:
    """Make ``timeout`` the default of every process group created from now on.

    ``deepspeed.init_distributed(timeout=...)`` reaches only the main group. DeepSpeed's data-parallel (and ZeRO,
    sequence- and expert-parallel) groups come from ``dist.new_group(ranks)`` with no timeout, which torch fills
    from its module-level defaults: 30 minutes for Gloo, 10 for NCCL. Measured on two hosts (network namespaces):
    with a frozen (SIGSTOPped) peer the other rank hung in the gradient-clipping all-reduce, on DeepSpeed's
    data-parallel group, for the full 30 minutes despite ``init_distributed(timeout=20 s)``; with these defaults
    lowered it failed after ~22 s. ``new_group`` reads the defaults at call time, hence setting them here.
    """
    import torch.distributed.distributed_c10d as c10d

    c10d.default_pg_timeout = timeout
    if isinstance(getattr(c10d, "default_pg_nccl_timeout", None), datetime.timedelta):
        c10d.default_pg_nccl_timeout = timeout


def _unlink_shm_allreduce_buffer() -> None:
    """Remove the name of DeepSpeed's CPU shared-memory all-reduce buffer once every rank has mapped it.

    On CPU, DeepSpeed's shm_comm creates /dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> (69 MB per
    rank) while the group initialises and never unlinks it: every CPU run leaked its buffers until /dev/shm, which
    is RAM, filled up (measured: 22 GB after a day of test runs, and a machine swapping to a halt). Each rank maps
    every other rank's buffer inside init_distributed, so after a barrier the names can go; the mappings stay
    valid, and the memory is freed when the last process using it exits, also when it is killed.
    """
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    path = Path("/dev/shm") / f"deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}_{dist.get_rank()}"
    if not path.exists():
        return
    dist.barrier()
    path.unlink(missing_ok=True)


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
    """SIGTERM and SIGUSR1 ask the training loop to finish the current update, save a checkpoint and return, as a
    preempted or time-limited batch job needs (Slurm: ``--signal=USR1@120``). Handlers are installed only in the
    main thread, and the previous ones are restored on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
    early: int | None = None
    """SIGUSR1 received before training began (see ``catch_early_usr1``)."""

    def __init__(self) -> None:
        self.received: int | None = StopSignals.early
        self._previous: dict[int, Any] = {}

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
        self.received = signum

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


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
    ds_config_source: str,
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

    rank = dist.get_rank()
    total_steps = scheduler_total_steps(ds_config)
    if total_steps is not None and train_cfg.steps > total_steps:
        raise InputError(
            f"{ds_config_source}: the run asks for {train_cfg.steps} updates but the scheduler's total_num_steps is "
            f"{total_steps} (the learning rate would be 0 after it); lower --steps or raise total_num_steps")
    config = fill_schedule(ds_config, train_cfg.steps, train_cfg.warmup_ratio)
    if train_cfg.activation_checkpointing:
        stage.model.activation_checkpointing = True
    config.update(train_batch_size=batch.global_batch, train_micro_batch_size_per_gpu=batch.micro,
                  gradient_accumulation_steps=batch.accumulation)
    engine, _, _, _ = deepspeed.initialize(model=stage.model, model_parameters=stage.trainable_parameters(),
                                           config=config)
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
    try:
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
            if scale_watch is not None:
                scale_watch.after_update()
            samples += batch.global_batch
            # One small all-reduce per update: losses averaged over ranks and micro-batches, tokens summed, and
            # whether any rank was asked to stop (so that all ranks save and leave together).
            names = sorted(sums)
            extra = torch.tensor([float(local_tokens), float(signals.received is not None)], device=engine.device)
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
                last_ckpt = checkpoint.save(
                    engine, run_dir, step,
                    {**stage.meta, "stage": stage.name, "samples": samples, "tokens": tokens,
                     "flops": step * stage.flops_per_update, "data_position": stream.state_dict(),
                     "global_batch": batch.global_batch},
                    keep=train_cfg.keep_checkpoints, trainable_only=stage.compact_checkpoints)
            if stop_requested and step < train_cfg.steps:
                stopped_by = signal.Signals(signals.received).name if signals.received else "a peer's signal"
                if rank == 0:
                    print(f"[{stage.name}] {stopped_by}: saved {last_ckpt} at update {step} of {train_cfg.steps} "
                          "and stopped; run again with --resume to continue", flush=True)
                break
    except checkpoint.CheckpointWriteError as err:
        raise TrainingError(str(err)) from None
    except RuntimeError as err:
        if not _lost_a_peer(err):
            raise
        raise TrainingError(
            f"{run_dir}: [{stage.name}] rank {rank} lost contact with another rank during update {step + 1} "
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


def _lost_a_peer(err: RuntimeError) -> bool:
    text = str(err).lower()
    return isinstance(err, dist.DistError) or (("gloo" in text or "nccl" in text or "c10d" in text)
                                               and any(k in text for k in _PEER_FAILURE))


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


def write_run_description(run_dir: Path, description: dict[str, Any], *, resume: bool) -> None:
    """Refuse to mix two runs in one folder; record what this run is. Rank 0 only."""
    path = run_dir / checkpoint.RUN
    if path.exists():
        existing = read_json(path)
        if not resume:
            raise InputError(
                f"{run_dir}: this folder already holds a run ({path}); pass --resume to continue it, "
                f"or choose another --out")
        differing = sorted(k for k in description if k in _IDENTITY_KEYS
                           and _as_now(k, existing.get(k, _IDENTITY_DEFAULTS.get(k))) != _as_now(k, description[k]))
        if differing:
            raise InputError(
                f"{path}: --resume with settings that differ from the run in this folder: {', '.join(differing)}")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, description)


# Settings that define a run: resuming with any of these changed would silently train a different model.
_IDENTITY_KEYS = ("variant", "model", "data", "tokenizer_sha256", "seed", "seq_len", "mask_prob", "global_batch",
                  "source", "init")
# What a run written before a setting existed had, in effect.
_IDENTITY_DEFAULTS = {"init": "overlap"}


def _as_now(key: str, value: Any) -> Any:
    """A recorded setting as this version writes it: a model config gains the defaults of fields added since."""
    if key == "model" and isinstance(value, dict):
        try:
            return ModelConfig.from_dict(value).to_dict()
        except InputError:
            return value
    return value


@torch.no_grad()
def evaluate(model: nn.Module, stream: Any, loss_fn: LossFn, num_batches: int) -> dict[str, float]:
    """Mean of ``loss_fn``'s scalars over ``num_batches`` micro-batches per rank, averaged over ranks.

    Runs in eval mode (no dropout) and restores the previous mode. Every rank must call it (one all-reduce).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sums: dict[str, torch.Tensor] = {}
    try:
        for _ in range(num_batches):
            for name, value in loss_fn(model, batch_to(next(stream), device)).items():
                sums[name] = sums.get(name, 0.0) + value.detach().float()
    finally:
        model.train(was_training)
    names = sorted(sums)
    packed = torch.stack([sums[n] for n in names])
    if dist.is_initialized():
        dist.all_reduce(packed)
        packed /= dist.get_world_size()
    return dict(zip(names, (packed / num_batches).tolist()))

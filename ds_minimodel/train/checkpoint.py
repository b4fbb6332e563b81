"""Every checkpoint path and file name; saving and resuming.

A run folder::

    <run>/run.json                        what the run is (variant, model and train config, DeepSpeed config, data)
    <run>/checkpoints/step_00001000/      one checkpoint (tag), self-describing:
        meta.json                         step, samples, tokens, FLOPs, data position, model config, tokenizer,
                                          weights hash, size and sha256 of every other file in the folder
        model.pt                          fp32 weights, a plain state dict (loads with weights_only=True)
        rng_rank_00000.pt ...             each rank's RNG states (dropout), for an exact resume
        mp_rank_00_model_states.pt, *optim_states.pt   DeepSpeed's own files (optimizer, scheduler, ZeRO shards)
    <run>/checkpoints/latest              the newest checkpoint's tag (DeepSpeed's own tools read it)
    <run>/metrics.jsonl, <run>/tensorboard/

A checkpoint is written into ``checkpoints/.step_XXXXXXXX.partial/``, its files flushed to disk, checksummed into
meta.json, and only then renamed to ``step_XXXXXXXX``; ``latest`` is rewritten after the rename. A process killed at
any moment leaves either the previous checkpoints alone or a ``.partial`` folder that nothing reads (and the next
save removes). On resume, a checkpoint whose files fail their sizes or checksums (truncated, flipped bytes) is
reported and the one before it is used.

Rank 0 does the side effects; every rank takes part in the collectives (STYLE habit 7).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel.config import file_sha256, read_json, write_json
from ds_minimodel.errors import InputError, load_error
from ds_minimodel.train.record import Kind as Kind  # the record's types, reached through the module that reads
from ds_minimodel.train.record import Record  # and writes it

CHECKPOINTS = "checkpoints"
META = "meta.json"
WEIGHTS = "model.pt"
RUN = "run.json"
LATEST = "latest"


_TAG = re.compile(r"^step_(\d{8})$")
_PARTIAL = re.compile(r"^\.step_\d{8}\.partial$")


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, permissions); the previous checkpoints are untouched."""


def tag_for(step: int) -> str:
    return f"step_{step:08d}"


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a training run (its run.json), which only ``--resume`` may continue."""
    return (Path(folder) / RUN).is_file()


def checkpoint_root(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints (meta.json present), oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _TAG.match(p.name) and (p / META).is_file()]
    return sorted(found, key=lambda p: int(_TAG.match(p.name).group(1)))


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = complete_checkpoints(run_dir)
    return done[-1] if done else None


def _file_record(path: Path) -> dict[str, Any]:
    """What meta.json records of a file it vouches for."""
    return {"bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _file_problem(path: Path, recorded: dict[str, Any]) -> str | None:
    """How ``path`` differs from its record in meta.json, or None (the size first: it is free)."""
    if not path.is_file():
        return f"{path}: missing"
    size = path.stat().st_size
    if size != recorded["bytes"]:
        return f"{path}: {size:,} bytes, {recorded['bytes']:,} when written (truncated or replaced)"
    if file_sha256(path) != recorded["sha256"]:
        return f"{path}: checksum differs from the one recorded when it was written (corrupted)"
    return None


def verify(ckpt_dir: Path) -> str | None:
    """Why the checkpoint's files do not match the sizes and checksums in its meta.json, or None when they do.
    Checkpoints written before checksums were recorded pass."""
    ckpt_dir = Path(ckpt_dir)
    try:
        meta = load_meta(ckpt_dir)
    except InputError as err:
        return str(err)
    for name, recorded in sorted(meta.files.items()):
        problem = _file_problem(ckpt_dir / name, recorded)
        if problem is not None:
            return problem
    return None


def latest_valid_checkpoint(run_dir: Path, *, say: Any = print) -> Path | None:
    """The newest complete checkpoint whose files pass their checksums; each newer one that fails, and each
    checkpoint folder without meta.json, is reported through ``say`` and skipped (left on disk for inspection).
    None when the run has no checkpoint yet; when it has some and every one is damaged, that is an error: starting
    over beside them would hide the damage."""
    root = checkpoint_root(run_dir)
    for incomplete in sorted(p for p in (root.iterdir() if root.is_dir() else ())
                             if _TAG.match(p.name) and not (p / META).is_file()):
        say(f"checkpoint {incomplete} has no {META} (incomplete or damaged); skipped")
    complete = complete_checkpoints(run_dir)
    problems = []
    for ckpt_dir in reversed(complete):
        problem = verify(ckpt_dir)
        if problem is None:
            return ckpt_dir
        problems.append(f"{ckpt_dir.name}: {problem}")
        say(f"checkpoint {ckpt_dir} is damaged ({problem}); using the one before it")
    if complete:
        raise InputError(f"{root}: every checkpoint is damaged ({'; '.join(problems)}); nothing to resume from. "
                         "Restore them, or start a new run in another --out")
    return None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _seal(staging: Path, meta: Record, final: Path) -> None:
    """Flush and checksum every file in ``staging``, write meta.json, rename the folder to ``final`` and point
    ``latest`` at it. Rank 0 only, after every rank has written its files."""
    files = {}
    for path in sorted(p for p in staging.iterdir() if p.is_file()):
        _fsync(path)
        files[path.name] = _file_record(path)
    write_json(staging / META, meta.with_values(files=files).to_json())
    _fsync(staging)
    if final.exists():  # a checkpoint of an abandoned timeline (resumed from an earlier one after damage)
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync(final.parent)
    pointer = final.parent / f".{LATEST}.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, final.parent / LATEST)


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """Content hash of a state dict: names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _rng_file(rank: int) -> str:
    return f"rng_rank_{rank:05d}.pt"


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def frozen_values(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full-precision copies (on the CPU) of the model's frozen parameters and floating-point buffers, taken before a
    16-bit engine is built over it. DeepSpeed converts the whole module to bf16 or fp16, and a frozen parameter has no
    fp32 master copy in the optimizer: without these, a checkpoint would store it rounded to 16 bits (MiniPost's
    copied layers, Step 3's embeddings) where its source holds it in 32."""
    trainable = {name for name, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}  # tied too
    return {name: t.detach().float().cpu().clone() for name, t in model.state_dict().items()
            if name not in trainable and t.is_floating_point()}


def unfused_masters(optimizer: Any) -> list[tuple[torch.nn.Parameter, torch.Tensor]]:
    """(module parameter, its fp32 master) pairs of a ZeRO-0 engine's optimizer that keeps masters apart from the
    module: under bf16 DeepSpeed 0.19 wraps the optimizer in FP16_UnfusedOptimizer, whose ``fp32_groups`` parallel
    the module's 16-bit parameters in ``fp16_groups`` (fp16 needs ZeRO 1 here, ``ds_config``). Empty for any other
    optimizer: an fp32 engine's module holds the masters, ZeRO's are sharded (``_full_precision_weights``)."""
    return [(p, master) for module_group, master_group in zip(getattr(optimizer, "fp16_groups", ()),
                                                              getattr(optimizer, "fp32_groups", ()))
            for p, master in zip(module_group, master_group)]


def _full_precision_weights(engine: Any, ckpt_dir: Path, trainable_only: bool,
                            frozen: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """fp32 weights of the model (or of its trainable parameters only), gathered on rank 0.

    Under ZeRO 1-3 with fp16/bf16 the module holds rounded 16-bit copies and the fp32 master weights are sharded
    across ranks' optimizer files, so they are rebuilt from the saved checkpoint (DeepSpeed's zero_to_fp32). Under
    ZeRO 0 with bf16 the optimizer holds them (``unfused_masters``); in fp32 the module's own parameters are the
    master weights. Frozen parameters and buffers have no master copy (zero_to_fp32 widens the module's 16-bit ones):
    each is its value in ``frozen`` (``frozen_values``, taken before the engine rounded the module) where that rounds
    to what the module holds, else the module's own (what a resume loaded, if it differs).
    """
    module = engine.module
    names = ([n for n, p in module.named_parameters() if p.requires_grad] if trainable_only
             else list(module.state_dict()))
    current = module.state_dict()
    gathered: dict[str, torch.Tensor] = {}
    if engine.zero_optimization_stage() > 0:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        # It prints five lines (and a progress bar) per call, at every checkpoint of every Step-2 run: not ours to show.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            gathered = get_fp32_state_dict_from_zero_checkpoint(
                str(ckpt_dir.parent), tag=ckpt_dir.name, exclude_frozen_parameters=trainable_only)
    else:
        by_id = {id(p): name for name, p in module.named_parameters()}
        gathered = {by_id[id(p)]: master for p, master in unfused_masters(getattr(engine, "optimizer", None))
                    if id(p) in by_id}
    for name, value in (frozen or {}).items():
        if name in names and torch.equal(value.to(current[name]), current[name]):
            gathered[name] = value
    return {name: gathered.get(name, current[name]).detach().float().cpu().clone() for name in names}


def save(engine: Any, run_dir: Path, step: int, meta: dict[str, Any], *, keep: int | None = None,
         trainable_only: bool = False, frozen: dict[str, torch.Tensor] | None = None) -> Path:
    """Save a checkpoint for ``step`` atomically (see the module docstring). Called by every rank.

    ``trainable_only``: a compact checkpoint of the trained parameters and optimizer state, without the frozen body
    (Step 2 keeps every checkpoint for the time-to-target analysis; the body is identified by its hash in meta).
    A failure to write (e.g. a full disk) on any rank raises CheckpointWriteError on every rank, naming the
    checkpoint that is still the newest good one; the partial folder is removed.
    """
    rank = dist.get_rank()
    root = checkpoint_root(run_dir)
    tag = tag_for(step)
    final, staging = root / tag, root / f".{tag}.partial"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.iterdir():  # what a killed run left behind; nothing reads these
            if _PARTIAL.match(leftover.name) or (leftover.name == tag and not (leftover / META).is_file()):
                shutil.rmtree(leftover)
    dist.barrier()
    error: BaseException | None = None
    try:
        engine.save_checkpoint(str(root), tag=staging.name, client_state={"step": step},
                               exclude_frozen_parameters=trainable_only, save_latest=False)
        torch.save(_rng_state(), staging / _rng_file(rank))
    except (OSError, RuntimeError) as err:  # torch.save reports a failed write as RuntimeError
        error = err
    error = _agree_on_failure(error, engine.device)
    if rank == 0 and error is None:
        try:
            weights = _full_precision_weights(engine, staging, trainable_only, frozen)
            torch.save(weights, staging / WEIGHTS)
            record = Record.of({**meta, "step": step, "weights_sha256": weights_sha256(weights)}, staging / META)
            _seal(staging, record, final)
        except (OSError, RuntimeError) as err:
            error = err
    error = _agree_on_failure(error, engine.device)
    if error is not None:
        previous = latest_checkpoint(run_dir)
        why = _write_failure(error, root, previous)  # before the partial folder's space is given back
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        dist.barrier()
        raise CheckpointWriteError(
            f"{staging}: could not write the checkpoint of update {step} ({why}); the newest good checkpoint "
            f"is {previous or 'none'}. Free space (or fix permissions) and resume with --resume")
    if rank == 0 and keep is not None:
        prune_checkpoints(run_dir, keep, step)
    dist.barrier()
    return final


def prune_checkpoints(run_dir: Path, keep: int, step: int) -> None:
    """Delete all but the ``keep`` newest complete checkpoints up to update ``step``, the one just written. Newer
    ones are left alone: a resume skipped them as damaged, or the run went back to an older one on purpose; counting
    them would delete the checkpoint just written and every good one before it."""
    upto = [p for p in complete_checkpoints(run_dir) if int(_TAG.match(p.name).group(1)) <= step]
    for old in upto[:-keep]:
        shutil.rmtree(old)


def _write_failure(error: BaseException, root: Path, previous: Path | None) -> str:
    """The error, with the free space where it happened: torch.save reports a full disk as "unexpected pos N vs M"
    (measured on a full tmpfs), which does not say that the disk is full."""
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return str(error)
    text = f"{error}; {free / 2**20:,.1f} MiB free there"
    if previous is not None:
        needed = sum(f.stat().st_size for f in previous.rglob("*") if f.is_file())
        if free < needed:
            text += f", less than the {needed / 2**20:,.1f} MiB the previous checkpoint takes: the disk is full"
    return text


def _agree_on_failure(error: BaseException | None, device: Any) -> BaseException | None:
    """Every rank learns whether any rank failed, so that none waits forever in a collective the others left."""
    flag = torch.tensor([0.0 if error is None else 1.0], device=device)
    dist.all_reduce(flag)
    if flag.item() and error is None:
        return OSError("another rank failed to write its part")
    return error


# DeepSpeed pickles a few of its own records into its checkpoint files beside tensors and plain containers (found by
# loading the model and optimizer files of fp32, bf16 ZeRO-1 and ZeRO-2 runs with weights_only=True; the fp16 loss
# scaler is the dynamic one's class). They are the only globals its files may name: anything else is refused.
_DEEPSPEED_RECORDS = (
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
)


def safe_load(path: str | Path, map_location: Any = None) -> Any:
    """``torch.load`` for DeepSpeed's checkpoint files with ``weights_only=True``: tensors, containers and the
    DeepSpeed records above only, so a file crafted to run code when unpickled is refused without running it.
    DeepSpeed's own loader unpickles with ``weights_only=False``; ``resume`` puts this one in its place."""
    import importlib

    allowed = [getattr(importlib.import_module(module), name) for module, name in _DEEPSPEED_RECORDS]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the unpickler refuses is a bad file for the user
        raise load_error(path, err) from None


def resume(engine: Any, ckpt_dir: Path, *, trainable_only: bool = False) -> Record:
    """Restore the engine (weights, optimizer, scheduler) and this rank's RNG; returns the checkpoint's meta.

    A compact (``trainable_only``) checkpoint restores the trained parameters; the frozen body must already be in
    the module, as built by the stage. Every file is read with ``weights_only=True`` (DeepSpeed's through
    ``safe_load``): nothing in a checkpoint folder can run code. Every rank reads the model and all optimizer files,
    so a refused file stops every rank; the ranks agree on a refused RNG file before any of them trains on.
    """
    meta = load_meta(ckpt_dir)
    engine.checkpoint_engine.load = safe_load  # DeepSpeed reads every file of the folder through this
    try:
        load_path, _ = engine.load_checkpoint(str(ckpt_dir.parent), tag=ckpt_dir.name,
                                              load_module_strict=not trainable_only)
    except Exception as err:  # DeepSpeed's ZeRORuntimeException; every rank raises it alike
        saved = re.search(r"used a DP world size of (\d+) but the current world size is (\d+)", str(err))
        if saved is None:
            raise
        raise InputError(f"{ckpt_dir}: saved by {saved[1]} rank(s) under ZeRO, resumed here by {saved[2]}: DeepSpeed "
                         f"cannot re-partition ZeRO's optimizer state; resume with {saved[1]} rank(s)") from None
    if load_path is None:
        raise InputError(f"{ckpt_dir}: DeepSpeed could not load this checkpoint")
    rng_path, error = ckpt_dir / _rng_file(dist.get_rank()), None
    if rng_path.is_file():
        try:
            state = safe_load(rng_path)
            torch.set_rng_state(state["cpu"])
            if "cuda" in state and torch.cuda.is_available():
                torch.cuda.set_rng_state(state["cuda"])
        except (InputError, KeyError, TypeError, RuntimeError) as err:
            error = err if isinstance(err, InputError) else InputError(f"{rng_path}: not an RNG state ({err!r})")
    if _agree_on_failure(error, engine.device) is not None:
        raise error if error is not None else InputError(f"{ckpt_dir}: another rank refused its RNG state file")
    return meta


def load_meta(ckpt_dir: Path) -> Record:
    """The checkpoint's or model folder's meta.json as a ``Record`` (the only reader of that file)."""
    path = Path(ckpt_dir) / META
    if not path.is_file():
        raise InputError(_not_a_checkpoint(Path(ckpt_dir)))
    return Record.from_json(read_json(path), path)


def _not_a_checkpoint(folder: Path) -> str:
    """Why ``folder`` (which has no meta.json) is not a checkpoint, and for a run's folder which checkpoint to pass."""
    if not folder.exists():
        return f"{folder}: does not exist"
    if not folder.is_dir():
        return f"{folder}: a file, not a checkpoint (a folder holding {META} and {WEIGHTS})"
    run = folder.parent if folder.name == CHECKPOINTS else folder
    if checkpoint_root(run).is_dir():
        newest = latest_checkpoint(run)
        if newest is None:
            return f"{folder}: a training run's folder with no complete checkpoint yet"
        return f"{folder}: a training run's folder, not a checkpoint; pass one of its checkpoints (the newest: {newest})"
    return f"{folder}: not a complete checkpoint ({META} missing)"


def load_weights(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's fp32 weights. weights_only=True: loading never runs code from the file."""
    path = Path(ckpt_dir) / WEIGHTS
    if not path.is_file():
        raise InputError(f"{path}: weights file missing")
    recorded = (load_meta(ckpt_dir).files if (Path(ckpt_dir) / META).is_file() else {}).get(WEIGHTS)
    if recorded and _file_problem(path, recorded):
        raise InputError(f"{path}: does not match the size and checksum recorded in {META} (truncated or corrupted)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file for the user
        raise load_error(path, err) from None


# ----------------------------------------------------------------------------------------------- model folders
# A model folder is what later stages read: model.pt + meta.json, like a checkpoint without DeepSpeed's files.
# Every training checkpoint is also a model folder.

def save_model_folder(folder: Path, state_dict: dict[str, torch.Tensor], meta: dict[str, Any] | Record) -> Record:
    """Write weights then meta.json (last, atomically); returns the record written (with ``weights_sha256`` and
    the weights file's size and checksum). ``meta``: a record, or a producer's values for one (``Record.of``)."""
    folder = Path(folder)
    values = meta.to_json() if isinstance(meta, Record) else meta
    values = {k: v for k, v in values.items() if k not in ("files", "weights_sha256")}
    folder.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    tmp = folder / f".{WEIGHTS}.tmp"
    torch.save(weights, tmp)
    tmp.replace(folder / WEIGHTS)
    record = Record.of({**values, "weights_sha256": weights_sha256(weights),
                        "files": {WEIGHTS: _file_record(folder / WEIGHTS)}}, folder / META)
    write_json(folder / META, record.to_json())
    return record


def checkpoint_as_model_folder(ckpt_dir: Path, folder: Path, *, tokenizer: Path | None = None) -> Record:
    """A training checkpoint's weights and meta as a model folder (no optimizer state), fit to travel: with
    ``tokenizer`` (the file its meta names), a copy of it inside under the recorded name, where
    ``data.tokenizer.load_tokenizer`` finds it once the recorded path is gone. Returns the record written."""
    meta = load_meta(ckpt_dir)
    written = save_model_folder(folder, load_weights(ckpt_dir), meta)
    if tokenizer is not None and meta.tokenizer is not None:
        shutil.copy(tokenizer, Path(folder) / Path(meta.tokenizer.path).name)
    return written

"""Every checkpoint path and file name; saving and resuming.

A run folder::

    <run>/run.json                        what the run is (variant, model and train config, DeepSpeed config, data)
    <run>/checkpoints/step_00001000/      one checkpoint (tag), self-describing:
        meta.json                         step, samples, tokens, FLOPs, data position, model config, tokenizer,
                                          weights hash; written LAST: a folder without it is incomplete
        model.pt                          fp32 weights, a plain state dict (loads with weights_only=True)
        rng_rank_00000.pt ...             each rank's RNG states (dropout), for an exact resume
        mp_rank_00_model_states.pt, *optim_states.pt   DeepSpeed's own files (optimizer, scheduler, ZeRO shards)
    <run>/metrics.jsonl, <run>/tensorboard/

Rank 0 does the side effects; every rank takes part in the collectives (STYLE habit 7).
"""
from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ds_minimodel.config import read_json, write_json
from ds_minimodel.errors import InputError

CHECKPOINTS = "checkpoints"
META = "meta.json"
WEIGHTS = "model.pt"
RUN = "run.json"
_TAG = re.compile(r"^step_(\d{8})$")


def tag_for(step: int) -> str:
    return f"step_{step:08d}"


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


def _full_precision_weights(engine: Any, ckpt_dir: Path, trainable_only: bool) -> dict[str, torch.Tensor]:
    """fp32 weights of the model (or of its trainable parameters only), gathered on rank 0.

    Under ZeRO 1-3 with fp16/bf16 the module holds rounded 16-bit copies and the fp32 master weights are sharded
    across ranks' optimizer files, so they are rebuilt from the saved checkpoint (DeepSpeed's zero_to_fp32).
    Otherwise the module's own parameters are the master weights.
    """
    module = engine.module
    names = ([n for n, p in module.named_parameters() if p.requires_grad] if trainable_only
             else list(module.state_dict()))
    current = module.state_dict()
    gathered: dict[str, torch.Tensor] = {}
    if engine.zero_optimization_stage() > 0:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        gathered = get_fp32_state_dict_from_zero_checkpoint(
            str(ckpt_dir.parent), tag=ckpt_dir.name, exclude_frozen_parameters=trainable_only)
    # Frozen parameters are not in the optimizer: those (and buffers) come from the module.
    return {name: gathered.get(name, current[name]).detach().float().cpu().clone() for name in names}


def save(engine: Any, run_dir: Path, step: int, meta: dict[str, Any], *, keep: int | None = None,
         trainable_only: bool = False) -> Path:
    """Save a checkpoint for ``step``. Called by every rank.

    ``trainable_only``: a compact checkpoint of the trained parameters and optimizer state, without the frozen body
    (Step 2 keeps every checkpoint for the time-to-target analysis; the body is identified by its hash in meta).
    """
    rank = dist.get_rank()
    root = checkpoint_root(run_dir)
    tag = tag_for(step)
    ckpt_dir = root / tag
    if rank == 0 and ckpt_dir.exists():  # an incomplete leftover of a killed run at this same step
        shutil.rmtree(ckpt_dir)
    dist.barrier()
    engine.save_checkpoint(str(root), tag=tag, client_state={"step": step}, exclude_frozen_parameters=trainable_only)
    torch.save(_rng_state(), ckpt_dir / _rng_file(rank))
    dist.barrier()
    if rank == 0:
        weights = _full_precision_weights(engine, ckpt_dir, trainable_only)
        torch.save(weights, ckpt_dir / WEIGHTS)
        write_json(ckpt_dir / META, {**meta, "step": step, "weights_sha256": weights_sha256(weights)})
        if keep is not None:
            for old in complete_checkpoints(run_dir)[:-keep]:
                shutil.rmtree(old)
    dist.barrier()
    return ckpt_dir


def resume(engine: Any, ckpt_dir: Path, *, trainable_only: bool = False) -> dict[str, Any]:
    """Restore the engine (weights, optimizer, scheduler) and this rank's RNG; returns the checkpoint's meta.

    A compact (``trainable_only``) checkpoint restores the trained parameters; the frozen body must already be in
    the module, as built by the stage.
    """
    meta = load_meta(ckpt_dir)
    load_path, _ = engine.load_checkpoint(str(ckpt_dir.parent), tag=ckpt_dir.name,
                                          load_module_strict=not trainable_only)
    if load_path is None:
        raise InputError(f"{ckpt_dir}: DeepSpeed could not load this checkpoint")
    rng_path = ckpt_dir / _rng_file(dist.get_rank())
    if rng_path.is_file():
        state = torch.load(rng_path, weights_only=True)
        torch.set_rng_state(state["cpu"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"])
    return meta


def load_meta(ckpt_dir: Path) -> dict[str, Any]:
    path = Path(ckpt_dir) / META
    if not path.is_file():
        raise InputError(f"{ckpt_dir}: not a complete checkpoint ({META} missing)")
    meta = read_json(path)
    if not isinstance(meta, dict) or "weights_sha256" not in meta:
        raise InputError(f"{path}: not a checkpoint description (no 'weights_sha256')")
    return meta


def load_weights(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's fp32 weights. weights_only=True: loading never runs code from the file."""
    path = Path(ckpt_dir) / WEIGHTS
    if not path.is_file():
        raise InputError(f"{path}: weights file missing")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file for the user
        raise InputError(f"{path}: cannot load weights safely: {err}") from None


# ----------------------------------------------------------------------------------------------- model folders
# A model folder is what later stages read: model.pt + meta.json, like a checkpoint without DeepSpeed's files.
# Every training checkpoint is also a model folder.

def lineage(meta: dict[str, Any]) -> str:
    """Identity of the primary model a model descends from: the primary's weights hash.

    A Step-1 checkpoint is its own primary; a mini-model, a finetuned model or trained embeddings carry
    ``primary_sha256`` from the model they were cut from, so embeddings can be plugged only into their own lineage.
    """
    return meta.get("primary_sha256") or meta["weights_sha256"]


def save_model_folder(folder: Path, state_dict: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    """Write weights then meta.json (last, atomically); returns the meta written (with ``weights_sha256``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    tmp = folder / f".{WEIGHTS}.tmp"
    torch.save(weights, tmp)
    tmp.replace(folder / WEIGHTS)
    meta = {**meta, "weights_sha256": weights_sha256(weights)}
    write_json(folder / META, meta)
    return meta


def load_model(folder: Path) -> tuple[Any, dict[str, Any]]:
    """Rebuild a MaskedLM from a model folder (or a full training checkpoint). Returns (model, meta)."""
    from ds_minimodel.config import ModelConfig
    from ds_minimodel.model import MaskedLM

    folder = Path(folder)
    meta = load_meta(folder)
    if "model_config" not in meta:
        raise InputError(f"{folder / META}: no model_config: not a model checkpoint (trained embeddings only?)")
    cfg = ModelConfig.from_dict(meta["model_config"], source=str(folder / META))
    model = MaskedLM(cfg)
    weights = load_weights(folder)
    missing, unexpected = set(model.state_dict()) - set(weights), set(weights) - set(model.state_dict())
    if missing or unexpected:
        raise InputError(f"{folder / WEIGHTS}: weights do not match the model config in {META}: "
                         f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise InputError(f"{folder / WEIGHTS}: {err}") from None
    return model, meta

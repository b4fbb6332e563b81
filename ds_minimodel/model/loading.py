"""Loading any model a checkpoint or model folder holds, dispatched on its kind (``checkpoint.Kind``).

One entry, ``load``: a Hugging Face folder is imported (``model.hf``); a finetuned task model comes back as a
``TaskModel``; every other model kind as a ``MaskedLM``; trained embeddings alone are not a model and are refused
(``model.surgery.load_embeddings`` reads them). Weights are read with ``weights_only=True``: loading never runs code.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ds_minimodel.config import ModelConfig
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MaskedLM, TaskModel
from ds_minimodel.train import checkpoint
from ds_minimodel.train.checkpoint import Kind


def load(folder: Path) -> tuple[MaskedLM | TaskModel, dict[str, Any]]:
    """The model in ``folder`` (a checkpoint, a model folder or a Hugging Face folder) and its meta."""
    from ds_minimodel.model.hf import import_folder, is_hf_folder

    folder = Path(folder)
    if is_hf_folder(folder):
        return import_folder(folder)
    meta = checkpoint.load_meta(folder)
    kind = checkpoint.kind_of(meta, folder / checkpoint.META)
    if kind == Kind.EMBEDDINGS:
        raise InputError(f"{folder}: trained embeddings (Step 2), not a model; plug them into a model with "
                         "`ds-minimodel surgery plug` or pass them as --embeddings")
    if "model_config" not in meta:
        raise InputError(f"{folder / checkpoint.META}: no model_config: not a model checkpoint")
    cfg = ModelConfig.from_dict(meta["model_config"], source=str(folder / checkpoint.META))
    if kind == Kind.TASK_MODEL:
        spec = task_spec(meta, folder)
        model = TaskModel(cfg, spec.kind, spec.num_labels, spec.pooling)
    else:
        model = MaskedLM(cfg)
    weights = checkpoint.load_weights(folder)
    missing, unexpected = set(model.state_dict()) - set(weights), set(weights) - set(model.state_dict())
    if missing or unexpected:
        raise InputError(f"{folder / checkpoint.WEIGHTS}: weights do not match the model config in "
                         f"{checkpoint.META}: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise InputError(f"{folder / checkpoint.WEIGHTS}: {err}") from None
    return model, meta


def task_spec(meta: dict[str, Any], folder: Path) -> Any:
    """A task model's ``TaskSpec`` from its meta. The head's shape follows from the task's format, which the task
    registry (``tasks.formats``) owns: imported here, when a task model is loaded, not at module level."""
    from ds_minimodel.tasks.formats import TaskSpec

    try:
        return TaskSpec(**meta["task"])
    except (KeyError, TypeError) as err:
        raise InputError(f"{Path(folder) / checkpoint.META}: task description incomplete ({err!r})") from None


def load_task_model(folder: Path) -> tuple[TaskModel, Any, dict[str, Any]]:
    """``load``, for a finetuned task model: (model, its ``TaskSpec``, meta)."""
    model, meta = load(folder)
    if not isinstance(model, TaskModel):
        raise InputError(f"{Path(folder) / checkpoint.META}: not a finetuned task model "
                         f"(kind {checkpoint.kind_of(meta, folder).value!r})")
    return model, task_spec(meta, folder), meta


def load_mlm(folder: Path) -> tuple[MaskedLM, dict[str, Any]]:
    """``load``, for the uses that need a masked LM (Steps 1b and 2, surgery, probing, export)."""
    model, meta = load(folder)
    if not isinstance(model, MaskedLM):
        raise InputError(f"{folder}: a finetuned task model, not a masked LM; give its primary instead")
    return model, meta

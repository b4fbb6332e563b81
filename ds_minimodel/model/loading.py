"""Loading any model a checkpoint or model folder holds, dispatched on its kind (``checkpoint.Kind``).

One entry, ``load``: a Hugging Face folder is imported (``model.hf``); a finetuned task model comes back as a
``TaskModel``; every other model kind as a ``MaskedLM``; trained embeddings alone are not a model and are refused
(``model.surgery.load_embeddings`` reads them). Weights are read with ``weights_only=True``: loading never runs code.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ds_minimodel.config import ModelConfig
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import HEADS, POOLINGS, TASK_KINDS, MaskedLM, TaskModel
from ds_minimodel.model.hf import import_folder, is_hf_folder
from ds_minimodel.train import checkpoint
from ds_minimodel.train.checkpoint import Kind, Record


def load(folder: Path) -> tuple[MaskedLM | TaskModel, Record]:
    """The model in ``folder`` (a checkpoint, a model folder or a Hugging Face folder) and its record."""
    folder = Path(folder)
    if is_hf_folder(folder):
        return import_folder(folder)
    meta = checkpoint.load_meta(folder)
    kind = meta.kind
    if kind == Kind.EMBEDDINGS:
        raise InputError(f"{folder}: trained embeddings (Step 2), not a model; plug them into a model with "
                         "`ds-minimodel surgery plug` or pass them as --embeddings")
    if meta.model_config is None:
        raise InputError(f"{folder / checkpoint.META}: no model_config: not a model checkpoint")
    cfg = ModelConfig.from_dict(meta.model_config, source=str(folder / checkpoint.META))
    if kind == Kind.TASK_MODEL:
        head = task_head(meta, folder)
        model = TaskModel(cfg, head.kind, head.num_labels, head.pooling)
    else:
        model = MaskedLM(cfg)
    weights = checkpoint.load_weights(folder)
    expected = model.state_dict()
    mismatch = f"{folder / checkpoint.WEIGHTS}: weights do not match the model config in {checkpoint.META}"
    missing, unexpected = set(expected) - set(weights), set(weights) - set(expected)
    if missing or unexpected:
        raise InputError(f"{mismatch}: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    # A meta.json edited by hand, or copied from another checkpoint: torch would list every tensor on its own line.
    wrong = [name for name, tensor in expected.items() if weights[name].shape != tensor.shape]
    if wrong:
        more = f" (and {len(wrong) - 1} more tensors)" if len(wrong) > 1 else ""
        raise InputError(f"{mismatch}: {wrong[0]} is {list(weights[wrong[0]].shape)} in the weights, "
                         f"{list(expected[wrong[0]].shape)} by the config{more}")
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise InputError(f"{folder / checkpoint.WEIGHTS}: {err}") from None
    return model, meta


LEGACY_TASK_KINDS = {"generic": "sequence", "multinli": "sequence", "xnli": "sequence", "pawsx": "sequence",
                     "conllu": "token", "squad": "span"}
"""The head kind of each task format that existed before a task model's meta.json recorded it (``task.kind``):
task models written earlier still load."""


@dataclass(frozen=True)
class TaskHead:
    """A finetuned task model's head, as its meta.json records it: what ``load`` needs to rebuild the model. What
    the task is beyond that (its format, files, metric) is ``tasks.formats.TaskSpec``."""

    kind: str
    labels: tuple[str, ...]
    pooling: str

    @property
    def num_labels(self) -> int:
        return HEADS[self.kind].outputs(len(self.labels))


def task_head(meta: Record, folder: Path) -> TaskHead:
    task, where = meta.details.get("task"), Path(folder) / checkpoint.META
    if not isinstance(task, dict):
        raise InputError(f"{where}: a task model without its task description")
    kind = task.get("kind") or LEGACY_TASK_KINDS.get(task.get("format"))
    if kind not in TASK_KINDS:
        raise InputError(f"{where}: task head of unknown kind (kind {task.get('kind')!r}, format "
                         f"{task.get('format')!r}); known kinds: {', '.join(TASK_KINDS)}")
    pooling = task.get("pooling", "cls")
    if pooling not in POOLINGS or not isinstance(task.get("labels", []), list):
        raise InputError(f"{where}: task description incomplete (pooling {pooling!r}, labels)")
    return TaskHead(kind, tuple(task.get("labels", [])), pooling)


def load_mlm(folder: Path) -> tuple[MaskedLM, Record]:
    """``load``, for the uses that need a masked LM (Steps 1b and 2, surgery, probing, export)."""
    model, meta = load(folder)
    if not isinstance(model, MaskedLM):
        raise InputError(f"{folder}: a finetuned task model, not a masked LM; give its primary instead")
    return model, meta

"""What a checkpoint or model folder is, typed: its ``meta.json`` as a ``Record``.

``train.checkpoint`` alone reads and writes meta.json, through ``Record.from_json`` and ``Record.to_json``; every
other module gets a ``Record`` (``checkpoint.load_meta``, ``model.loading.load``) and hands one, or the fields of
one, to the writers. The fields every reader needs have names and types; what one stage adds for its own readers
(a Step-2 run's system, language and initialisation, a task model's task, a mini-model's source) is in
``details``. A meta.json written before this record existed loads: every field but the weights' hash is optional,
and whatever it holds beyond the named fields lands in ``details``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ds_minimodel.config import dataclass_from_dict
from ds_minimodel.errors import InputError


class Kind(str, Enum):
    """What a checkpoint or model folder holds: its meta.json ``"kind"`` (one owner for these names).

    A Step-1 checkpoint records no kind (``Record.kind`` is then ``PRETRAINED``); every other producer records
    one. ``ds_minimodel.model.loading.load`` dispatches on it.
    """

    PRETRAINED = "pretrained"
    """A Step-1 MLM (what ``run_pretrain.py --variant base|small|minijoint`` writes; no kind recorded)."""
    MLM_HEAD = "mlm-head"
    """A bare imported encoder whose MLM head ``run_head.py`` trained."""
    HF_IMPORT = "hf-import"
    """An MLM imported from a Hugging Face folder."""
    MINIJOINT_MINI = "minijoint-mini"
    """The layers below a MiniJoint primary's second head, and that head (``surgery extract-mini``)."""
    MINIPOST_MINI = "minipost-mini"
    """Step 1b's output: a primary's bottom layers with new ones trained on top."""
    PLUGGED = "plugged"
    """A model with Step-2 embeddings swapped in (``surgery plug``)."""
    EMBEDDINGS = "embeddings"
    """Step 2's output: a target language's embeddings and output bias, no body."""
    TASK_MODEL = "task-model"
    """Step 3's output: a finetuned body with a task head."""


@dataclass(frozen=True, kw_only=True)
class TokenizerRef:
    """Which tokenizer a model reads its text with: where it was, and its content hash (``data.tokenizer``)."""

    path: str
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class Fields:
    """The named fields of a meta.json."""

    weights_sha256: str
    """Content hash of ``model.pt`` (``checkpoint.weights_sha256``): names, dtypes, shapes and bytes."""
    kind: Kind = Kind.PRETRAINED
    """What the folder holds (not written for a Step-1 checkpoint, which recorded none before kinds existed)."""
    primary_sha256: str | None = None
    """The primary model it descends from (None: it is a primary itself, a Step-1 checkpoint)."""
    tokenizer: TokenizerRef | None = None
    model_config: dict[str, Any] | None = None
    """``config.ModelConfig`` as a dict (None for trained embeddings, which are not a model)."""
    step: int | None = None
    """Training checkpoints: the update it was saved at."""
    samples: int | None = None
    tokens: int | None = None
    flops: float | None = None
    """Analytic FLOPs of the updates so far (``flops.per_update_flops`` x step)."""
    data_position: dict[str, Any] | None = None
    """Where the data stream stood (``data.streams``), for an exact resume."""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Size and sha256 of each file of the folder, checked before anything reads it."""


NAMED = tuple(f.name for f in dataclasses.fields(Fields))


@dataclass(frozen=True, kw_only=True)
class Record(Fields):
    """A checkpoint's or model folder's meta.json: the named fields, and what its producer added (``details``)."""

    details: dict[str, Any] = field(default_factory=dict)
    """Everything else the producer recorded, by its meta.json key: ``system``, ``lang``, ``init`` (Step 2),
    ``task``, ``seed`` (Step 3), ``variant``, ``mlm_head``, ``cut_from``, ..."""

    @property
    def lineage(self) -> str:
        """Identity of the primary model this descends from: the primary's weights hash. A Step-1 checkpoint is its
        own primary; a mini-model, a finetuned model or trained embeddings carry ``primary_sha256`` from the model
        they were cut from, so embeddings can be plugged only into their own lineage."""
        return self.primary_sha256 or self.weights_sha256

    @property
    def tokenizer_dict(self) -> dict[str, str] | None:
        """The tokenizer reference as ``data.tokenizer.load_tokenizer`` reads it."""
        return None if self.tokenizer is None else self.tokenizer.to_dict()

    @classmethod
    def from_json(cls, data: Any, source: Path | str) -> Record:
        """A meta.json's contents, its named fields checked by type, its kind by name; the rest into ``details``."""
        if not isinstance(data, dict) or "weights_sha256" not in data:
            raise InputError(f"{source}: not a checkpoint description (no 'weights_sha256')")
        if "kind" in data and data["kind"] is None:  # written as null: no kind, as a Step-1 checkpoint has
            data = {k: v for k, v in data.items() if k != "kind"}
        if data.get("kind", Kind.PRETRAINED.value) not in {k.value for k in Kind}:
            raise InputError(f"{source}: unknown kind {data['kind']!r}; known: {', '.join(k.value for k in Kind)}")
        fields = dataclass_from_dict(Fields, {k: v for k, v in data.items() if k in NAMED}, str(source))
        return cls(**{name: getattr(fields, name) for name in NAMED},
                   details={k: v for k, v in data.items() if k not in NAMED})

    @classmethod
    def of(cls, values: dict[str, Any], source: Path | str = "meta") -> Record:
        """A record from a producer's values (named fields and details by key, a tokenizer as a dict or a
        ``TokenizerRef``, a kind as a ``Kind``), checked as a meta.json would be."""
        plain = {k: (v.to_dict() if isinstance(v, TokenizerRef) else v.value if isinstance(v, Kind) else v)
                 for k, v in values.items()}
        return cls.from_json(plain, source)

    def to_json(self) -> dict[str, Any]:
        """The meta.json contents: named fields that are set, then the details (a named field wins a clash)."""
        named = {name: getattr(self, name) for name in NAMED}
        named.update(tokenizer=self.tokenizer_dict, kind=None if self.kind == Kind.PRETRAINED else self.kind.value)
        named = {k: v for k, v in named.items() if v is not None and not (k == "files" and not v)}
        return {**self.details, **named}

    def with_values(self, **values: Any) -> Record:
        """This record with some values replaced or added (named fields or details, by key)."""
        return Record.of({**self.to_json(), **values})

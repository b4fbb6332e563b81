"""Typed configuration: the model's shape, named presets, and one training stage's settings.

One owner per setting (STYLE habit 4): the DeepSpeed JSON in ``ds_configs/`` owns the optimizer, precision, ZeRO and
batch sizes; these dataclasses own everything else. ``ds_config.resolve_batch`` reconciles the two.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import hashlib
import json
import os
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from ds_minimodel.errors import InputError


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of a RoBERTa-style masked language model (optionally with MiniJoint's second MLM head)."""

    vocab_size: int = 50_000
    """Number of token embeddings; equals the SentencePiece model's vocabulary size (paper: 50,000)."""
    hidden_size: int = 768
    """Width h of every layer and of the embeddings."""
    num_layers: int = 12
    """Transformer layers l in the body."""
    num_heads: int = 12
    """Attention heads per layer; must divide hidden_size."""
    ffn_size: int = 3072
    """Inner width of each layer's feed-forward block (4h in RoBERTa)."""
    max_positions: int = 512
    """Rows of the learned position table: the longest sequence the model accepts."""
    dropout: float = 0.1
    """Dropout on embeddings, attention output and feed-forward output."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""
    layer_norm_eps: float = 1e-5
    """LayerNorm epsilon (fairseq/HF RoBERTa use 1e-5)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of weights and embeddings (BERT/RoBERTa)."""
    aux_head_layer: int | None = None
    """MiniJoint: attach a second MLM head to the output of this layer (1-based; paper N=4). None: one head. At
    ``num_layers`` both heads read the top layer (the depth study's N=12, section 5.2)."""
    position_init: str = "normal"
    """Initial position table (it is learned either way): ``normal``, N(0, init_std) as BERT/RoBERTa; ``sinusoidal``,
    the fixed encoding of Vaswani et al. (2017) scaled to the same standard deviation, so that nearby positions
    start out similar and attention has an order to read from the first update."""
    attention_bias: str = "none"
    """A fixed bias added to every attention score. ``none``: RoBERTa's attention (positions come only from the learned
    table). ``alibi``: symmetric ALiBi (Press et al., 2022, as MosaicBERT uses it in an encoder): head h of H adds
    -m_h |i - j| with m_h = 2^(-8h/H), so attention starts out local and a small body reads its neighbours from the
    first updates; the learned table stays, and tells left from right. Not a RoBERTa architecture: Hugging Face export
    refuses it. Measured on the reference data (RESULTS.md): without it a 6 x 256 body still predicted from the bag of
    words alone after 1,000-1,700 updates."""
    pre_norm: bool = False
    """Where each block's LayerNorm sits. False: after the residual sum (post-LN, BERT/RoBERTa and the paper).
    True: on the sublayer's input (pre-LN), with one more LayerNorm at the input of every head; it trains stably at
    higher learning rates and leaves the unigram plateau sooner at small scale."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_size", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"model config: {name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise InputError(
                f"model config: hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise InputError(f"model config: {name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.attention_bias not in ("none", "alibi"):
            raise InputError(f"model config: attention_bias must be 'none' or 'alibi', got {self.attention_bias!r}")
        if self.position_init not in ("normal", "sinusoidal"):
            raise InputError(
                f"model config: position_init must be 'normal' or 'sinusoidal', got {self.position_init!r}")
        if self.aux_head_layer is not None and not 1 <= self.aux_head_layer <= self.num_layers:
            raise InputError(
                f"model config: aux_head_layer must be between 1 and num_layers ({self.num_layers}), "
                f"got {self.aux_head_layer!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "model config") -> ModelConfig:
        return dataclass_from_dict(cls, data, source)


# Named sizes (STYLE habit 3). `tiny` keeps the paper's structure (12 layers, N=4 fits) at a width that trains a step
# in milliseconds on CPU; `base` is RoBERTa-base as in the paper (section 3); `small` is BL_SMALL's 4-layer model.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(hidden_size=64, num_layers=12, num_heads=4, ffn_size=256, max_positions=128),
    # The CPU demo: tiny's width at half the depth (the paper's ratio l/N = 3 with N=2), no dropout, 64 positions.
    # Measured on the demo text: a 12-layer post-LN model this narrow sits at the unigram loss for hundreds of
    # updates, and finetuning a body that never left it predicts the majority class; 6 layers leave it within the
    # demo's budget (1,500 updates of 32 x 64 tokens) and finetune well above the majority baseline.
    "demo": ModelConfig(hidden_size=64, num_layers=6, num_heads=4, ffn_size=256, max_positions=64, dropout=0.0,
                        attention_dropout=0.0),
    # The CPU reference experiment (configs/reference.json, RESULTS.md): 6 pre-LN layers of width 256 at 128
    # positions, the depth ratio l/N = 3 with N=2. Pre-LN because a post-LN body this small spent most of a CPU
    # budget on the unigram plateau (issue 16's measurements). ALiBi because with learned positions alone the body
    # still predicted from the bag of words after 1,000-1,700 updates; with it, it read word order by update 250
    # (RESULTS.md, "Attention that starts local"). No dropout: far from over-fitting at these budgets.
    "reference": ModelConfig(hidden_size=256, num_layers=6, num_heads=4, ffn_size=1024, max_positions=128,
                             pre_norm=True, attention_bias="alibi", dropout=0.0, attention_dropout=0.0),
    # The GPU reference experiment (configs/reference_gpu.json): the CPU reference's recipe (pre-LN, ALiBi, no dropout,
    # 128 positions) at the paper's depth of 12 with N=4 (l/N = 3 as in the paper) and twice the width, sized for one
    # H100-class GPU in minutes rather than 2 cores in hours.
    "reference_gpu": ModelConfig(hidden_size=512, num_layers=12, num_heads=8, ffn_size=2048, max_positions=128,
                                 pre_norm=True, attention_bias="alibi", dropout=0.0, attention_dropout=0.0),
    "base": ModelConfig(),
    "small": ModelConfig(num_layers=4),
}


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise InputError(f"unknown model preset {name!r}; known presets: {', '.join(sorted(PRESETS))}") from None


class Role:
    """What a training setting is to a run, declared once on its field (``role``) and read by ``fields_in``: what
    ``--resume`` must find unchanged (``train.run_record``) and what makes a finished run another one
    (``pipeline.launching.changed_settings``) are derived from it."""

    IDENTITY = "identity"
    """What the run learns (the default): never changed on resume; a finished run with another value is another run."""
    SETUP = "setup"
    """How it trains, not what it is (the warm-up share): changed on resume only with --allow-config-change."""
    LENGTH = "length"
    """How long it goes on (the update count): a resumed run may be extended."""
    HARMLESS = "harmless"
    """How it is saved, logged or computed, never what it learns: free to change at any time."""
    PLACE = "place"
    """Where it is written or logged, or how the command continues it: not a setting of the run's results."""


def role(kind: str) -> dict[str, str]:
    """A dataclass field's metadata declaring its role: ``field(default=..., metadata=role(Role.HARMLESS))``."""
    return {"role": kind}


def role_of(cls: type, name: str) -> str:
    """The role of ``cls``'s field ``name``: declared on it, else on ``TrainConfig``'s field of that name (a stage
    spec's copy of a training setting), else identity."""
    for klass in (cls, TrainConfig):
        found = {f.name: f for f in dataclasses.fields(klass)}.get(name)
        if found is not None and "role" in found.metadata:
            return found.metadata["role"]
    return Role.IDENTITY


def fields_in(cls: type, *roles: str) -> frozenset[str]:
    """``cls``'s fields whose role is among ``roles``."""
    return frozenset(f.name for f in dataclasses.fields(cls) if role_of(cls, f.name) in roles)


MAX_UPDATES = 10**9
"""The most optimizer updates a run may ask for: a thousand times RoBERTa's 500,000. More is a typo, and a count past
what a 64-bit step counter holds would fail mid-run instead of now."""


PACKINGS = ("sentences", "blocks")
"""How an MLM stage packs its corpus into blocks (``TrainConfig.packing``, ``data.streams.PackedDataset``)."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one training stage that the DeepSpeed JSON does not own."""

    steps: int = field(metadata=role(Role.LENGTH))
    """Optimizer updates to run in total (a resumed run counts the updates already done)."""
    seq_len: int = 512
    """Tokens per packed block, <s> and padding included (paper: 512)."""
    mask_prob: float = 0.15
    """Fraction of non-special tokens chosen for prediction (RoBERTa: 15%)."""
    packing: str = "sentences"
    """How the MLM stages cut the corpus into blocks (``PACKINGS``): ``sentences``, whole stored lines packed
    greedily (RoBERTa's FULL-SENTENCES, fairseq's ``complete``; each block padded to ``seq_len``), or ``blocks``,
    the token stream cut every ``seq_len - 1`` tokens whatever the lines (fairseq's ``none``, HF's ``group_texts``):
    no padding, so every position trains and attention needs no mask."""
    seed: int = 1
    """Seeds initialisation, data order, masking and dropout."""
    save_every: int = field(default=1000, metadata=role(Role.HARMLESS))
    """Save a checkpoint every this many updates (and always at the end)."""
    log_every: int = field(default=10, metadata=role(Role.HARMLESS))
    """Write metrics every this many updates."""
    keep_checkpoints: int | None = field(default=None, metadata=role(Role.HARMLESS))
    """Keep only the newest this many checkpoints; None keeps all (Step 2's curves need them all)."""
    warmup_ratio: float = field(default=0.08, metadata=role(Role.SETUP))
    """Warm-up share of the updates where the DeepSpeed scheduler says ``"auto"`` (paper: 10,000 of 125,000)."""
    activation_checkpointing: bool = field(default=False, metadata=role(Role.HARMLESS))
    """Keep only each layer's input during the forward pass and recompute the layer in the backward pass: less
    activation memory for about one more forward pass of compute. The results are the same."""
    qkv_views: bool = field(default=False, metadata=role(Role.HARMLESS))
    """Each attention reads Q, K and V as views of its projection's output (``model.encoder.SelfAttention``): the
    same values, one copy fewer in the backward. Not yet timed on a GPU, so off by default."""
    compile: bool = field(default=False, metadata=role(Role.HARMLESS))
    """``torch.compile`` the model (DeepSpeed's ``engine.compile()``, in place: checkpoints are unchanged). The
    first updates pay for compilation."""
    prefetch: int | None = field(default=None, metadata=role(Role.HARMLESS))
    """Micro-batches built ahead of the loop (``prefetch_process`` says where), in pinned memory on a GPU; 0 builds
    each when needed. None: 2 on a GPU, 0 on a CPU, where building ahead would only compete with the model for the
    same cores (2 with ``prefetch_process`` true)."""
    prefetch_process: bool | None = field(default=None, metadata=role(Role.HARMLESS))
    """Where the prefetched micro-batches are built (``data.prefetch``): true, in a process of their own; false, on a
    thread of the training process; None, in a process on a GPU and on a thread on a CPU. Building one is mostly
    Python, and on a thread it takes turns of the interpreter's lock from the loop that launches the kernels: with
    the loop launch-bound, as a GPU update's host side is, a thread added twice the batch's building time to each
    update and a process about 2 ms (``ds-minimodel bench loader --launches``, BENCHMARKS.md). The same batches either
    way."""
    profile_updates: int = field(default=0, metadata=role(Role.HARMLESS))
    """Profile this many updates with torch.profiler, after the process's first ten (``train.kernel_classes``):
    their time by kernel class in ``profile.json`` in the run folder, the largest kernels in ``profile.txt``. The
    profiled updates run slower; 0 profiles none."""

    def __post_init__(self) -> None:
        for name in ("prefetch", "profile_updates"):  # counts that may be 0 (prefetch: None too, its default)
            value = getattr(self, name)
            if (value is not None or name != "prefetch") and (
                    not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise InputError(f"train config: {name} must be a non-negative integer, got {value!r}")
        if self.prefetch_process and self.prefetch == 0:
            raise InputError("train config: prefetch_process builds the prefetched micro-batches in a process, and "
                             "prefetch is 0: none are prefetched (leave prefetch unset for 2, or give a depth)")
        for name in ("steps", "seq_len", "save_every", "log_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"train config: {name} must be a positive integer, got {value!r}")
        if not 0.0 < self.mask_prob < 1.0:
            raise InputError(f"train config: mask_prob must be in (0, 1), got {self.mask_prob!r}")
        if self.packing not in PACKINGS:
            raise InputError(f"train config: packing must be one of {', '.join(PACKINGS)}, got {self.packing!r}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise InputError(f"train config: warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        if self.keep_checkpoints is not None and self.keep_checkpoints < 1:
            raise InputError(f"train config: keep_checkpoints must be >= 1 or null, got {self.keep_checkpoints!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "train config") -> TrainConfig:
        return dataclass_from_dict(cls, data, source)


def dataclass_from_dict(cls: type, data: Any, source: str) -> Any:
    """Build a dataclass, nested dataclasses included, from JSON data, validated by its annotations (pydantic, JSON's
    own rules strictly: no "3" for 3, no true for 1, a whole number is a float too). Unknown keys, missing ones,
    wrong types and the dataclasses' own checks are each one InputError naming the file and the key's path."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a JSON object, got {type(data).__name__}")
    _refuse_unknown_keys(cls)
    try:
        return type_adapter(cls).validate_json(json.dumps(data), strict=True)
    except pydantic.ValidationError as err:
        raise InputError(_explain(cls, err.errors(), source)) from None


def known_fields(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that name a field of dataclass ``cls`` (a command's parsed options hold others)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def _refuse_unknown_keys(cls: type) -> None:
    """Every dataclass reachable from ``cls``'s annotations refuses keys it has no field for (pydantic's default for
    a plain dataclass is to drop them silently)."""
    if not dataclasses.is_dataclass(cls) or "__pydantic_config__" in vars(cls):
        return
    cls.__pydantic_config__ = pydantic.ConfigDict(extra="forbid")
    for hint in typing.get_type_hints(cls).values():
        for inner in (hint, *_arguments(hint)):
            _refuse_unknown_keys(inner)


def _arguments(hint: Any) -> list[Any]:
    """The types inside an annotation, at any depth: ``list[CorpusSettings] | None`` -> list, CorpusSettings, None."""
    found = []
    for arg in typing.get_args(hint):
        found += [arg, *_arguments(arg)]
    return found


RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short",
                          "too_long", "literal_error"})
"""pydantic's error types whose own sentence says what was expected ("greater than 0") better than the field's
annotation would."""


def _explain(cls: type, errors: list[dict[str, Any]], source: str) -> str:
    """pydantic's first error (all unknown or all missing keys of one object together) as one sentence naming where
    it is."""
    first = errors[0]
    *parent, key = first["loc"] or ("",)
    where = source + "".join(f"[{p}]" if isinstance(p, int) else (": " if i == 0 else ".") + p
                             for i, p in enumerate(parent))
    owner = _dataclass_at(cls, parent)
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        unknown = [e["loc"][-1] for e in errors if e["type"] == first["type"] and list(e["loc"][:-1]) == parent]
        known = [f.name for f in dataclasses.fields(owner)] if owner else []
        return f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known keys: {', '.join(known)}"
    if first["type"] == "missing":  # every missing key of the object, so one correction answers them all
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and list(e["loc"][:-1]) == parent]
        return f"{where}: {key} is required" if len(missing) == 1 else f"{where}: {', '.join(missing)} are required"
    if first["type"] == "value_error" and isinstance((first.get("ctx") or {}).get("error"), InputError):
        return f"{where}.{key}: {first['ctx']['error']}" if key else f"{where}: {first['ctx']['error']}"
    fields = {f.name: f for f in dataclasses.fields(owner)} if owner else {}
    expected = fields[key].type if key in fields else first["msg"].removeprefix("Input should be ")
    if first["type"] in RANGE_ERRORS or not isinstance(expected, str):  # a range, or an annotation's object
        expected = first["msg"].removeprefix("Input should be ").removeprefix("List should have ")
        expected = expected.split(" after validation")[0]  # "at least 1 item after validation, not 0": got says it
    what = f"{where}[{key}]" if isinstance(key, int) else f"{where}: {key}"
    return f"{what} must be {expected}, got {first.get('input')!r}"


def _dataclass_at(cls: type, path: list[Any]) -> type | None:
    """The dataclass whose field the last element of ``path`` names, following the annotations from ``cls``."""
    hint: Any = cls
    for step in path:
        if dataclasses.is_dataclass(hint) and isinstance(step, str):
            hint = typing.get_type_hints(hint).get(step)
        else:  # a list's item or a dict's value
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = args[-1] if args else None
        while typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: the X
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint if dataclasses.is_dataclass(hint) else None


@functools.lru_cache(maxsize=None)
def type_adapter(annotation: Any) -> pydantic.TypeAdapter:
    """pydantic's validator for a field's annotation (built once per annotation)."""
    return pydantic.TypeAdapter(annotation)


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """A UTF-8 text file's contents; a missing or unreadable file is an InputError naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read the {what}: {err}") from None


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, read in blocks (corpora and checkpoints can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; a missing or malformed file is an InputError naming it and the position."""
    path = Path(path)
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, **open_args: Any) -> Iterator[typing.TextIO]:
    """A text file written beside ``path`` and renamed over it once complete and on disk: a reader, or the next run
    after an interruption or a full disk, sees the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write JSON atomically (``atomic_open``)."""
    with atomic_open(path) as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")


def write_csv(path: str | os.PathLike, rows: list[dict[str, Any]], fieldnames: list[str] | None = None) -> None:
    """Rows of dicts as CSV with a header, atomically: ``fieldnames`` in that order, by default every key, sorted."""
    with atomic_open(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fieldnames or sorted({k for r in rows for k in r}))
        writer.writeheader()
        writer.writerows(rows)

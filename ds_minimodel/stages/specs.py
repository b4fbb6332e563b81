"""What each training stage is asked to do, as typed values: one dataclass per stage, each field documented once.

A spec is the stage's whole API below the command line. The entry scripts build one from their options (or read
one from a file: ``run_adapt.py --config spec.json``), the pipeline writes one per job, tests construct them
directly, and ``stages.runner.run_stage`` runs any of them. ``to_dict`` is what a run's ``run.json`` records under
``spec`` and what a spec file holds; ``from_dict`` reads it back, each value checked against its annotation.

The fields' docstrings are the options' help texts (``help_of``), so they are written once, here.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pydantic
import tyro

from ds_minimodel.config import (
    MAX_UPDATES,
    Role,
    TrainConfig,
    fields_in,
    read_json,
    role,
    type_adapter,
)
from ds_minimodel.errors import InputError
from ds_minimodel.systems import AUX_WEIGHT, Depths

Count = Annotated[int, pydantic.Field(ge=0)]
PositiveInt = Annotated[int, pydantic.Field(ge=1)]
Updates = Annotated[int, pydantic.Field(ge=1, le=MAX_UPDATES)]
OWN_DEFAULT = tyro.conf.arg(help_behavior_hint="")
"""For a field whose docstring says its default in words ("default: the scheduler's total_num_steps"): tyro's own
"(default: None)" would follow it."""
Positive = Annotated[float, pydantic.Field(gt=0)]
Fraction = Annotated[float, pydantic.Field(ge=0, lt=1)]
Probability = Annotated[float, pydantic.Field(gt=0, lt=1)]

DEFAULT_DIST_TIMEOUT_S = 300.0
"""``train.distributed.DEFAULT_DIST_TIMEOUT`` in seconds (checked equal by a test; this layer imports no torch)."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What every training stage takes: where it writes, how it saves, logs and resumes, how long it waits."""

    STAGE: ClassVar[str] = ""
    """The stage's name in ``run.json`` and in spec files."""
    ENTRY: ClassVar[str] = ""
    """The entry script that runs it (``--config SPEC_JSON``)."""

    ds_config: Path
    """DeepSpeed JSON (see ds_configs/)"""
    out: Path = field(metadata=role(Role.PLACE))
    """run folder: checkpoints, metrics, TensorBoard logs"""
    seed: Count = TrainConfig.seed
    """seed of the weights, data order, masks and dropout"""
    save_every: PositiveInt = TrainConfig.save_every
    """updates between checkpoints"""
    log_every: PositiveInt = TrainConfig.log_every
    """updates between log lines"""
    warmup_ratio: Fraction = TrainConfig.warmup_ratio
    """warm-up share where the scheduler says "auto" (the paper warms up for 8% of its updates)"""
    resume: bool = field(default=False, metadata=role(Role.PLACE))
    """continue from the newest complete checkpoint in --out"""
    allow_config_change: bool = field(default=False, metadata=role(Role.PLACE))
    """with --resume: continue although the DeepSpeed JSON or the warm-up share differs from the one run.json
    records (the change is recorded there); the model's settings never may"""
    log_root: Annotated[Path | None, OWN_DEFAULT] = field(default=None, metadata=role(Role.PLACE))
    """TensorBoard log root shared by several runs (default: <out>/tensorboard); this run logs to
    <log-root>/<run-name>"""
    run_name: Annotated[str | None, OWN_DEFAULT] = field(default=None, metadata=role(Role.PLACE))
    """this run's name under --log-root (default: stage, language and system)"""
    activation_checkpointing: bool = False
    """recompute each layer in the backward pass: less activation memory, ~1 more forward pass"""
    qkv_views: bool = False
    """attention reads Q, K and V as views of its projection: the same values, one copy fewer in the backward"""
    compile: bool = False
    """torch.compile the model: faster updates after a compilation of about a minute"""
    prefetch: Annotated[Count | None, OWN_DEFAULT] = None
    """micro-batches built ahead of the loop, pinned on a GPU (default: 2 on a GPU, 0 on a CPU)"""
    prefetch_process: Annotated[bool | None, OWN_DEFAULT] = None
    """build the prefetched micro-batches in a process of their own (True) or on a thread (False); the same batches
    (default: a process on a GPU, a thread on a CPU)"""
    profile_updates: Count = 0
    """profile this many updates after the first ten with torch.profiler: their time by kernel class in
    <out>/profile.json, the largest kernels in <out>/profile.txt"""
    dist_timeout: Positive = field(default=DEFAULT_DIST_TIMEOUT_S, metadata=role(Role.HARMLESS))
    """a collective that waits longer than this many seconds on a dead or hung peer ends the run with an error
    (every process group)"""

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON values (paths as strings), with its stage named."""
        return {"stage": self.STAGE, **{f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}}

    @classmethod
    def from_dict(cls, data: Any, source: str, *, name: Callable[[str], str] = str) -> RunSpec:
        """A spec from JSON data, each value validated against its field's annotation; unknown keys, wrong types
        and out-of-range values are refused with ``source`` and the field named (as ``name`` spells it: the
        command line, whose source is "", names its option)."""
        where = f"{source}: " if source else ""
        if not isinstance(data, dict):
            raise InputError(f"{where}expected a JSON object, got {type(data).__name__}")
        data = dict(data)
        stage = data.pop("stage", cls.STAGE)
        if stage != cls.STAGE:
            raise InputError(f"{where}a spec for stage {stage!r}, not {cls.STAGE!r}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise InputError(f"{where}unknown key(s) {', '.join(unknown)}; known keys: {', '.join(known)}")
        missing = sorted(key for key, f in known.items() if key not in data
                         and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        if missing:
            raise InputError(f"{where}missing key(s) {', '.join(missing)}")
        hints = _hints(cls)
        values = {}
        for key, value in data.items():
            try:  # JSON's own rules, strictly: no "3" for 3, no true for 1; a path is a string
                values[key] = type_adapter(hints[key]).validate_json(json.dumps(value, default=str), strict=True)
            except pydantic.ValidationError as err:
                problem = err.errors()[0]["msg"][0].lower() + err.errors()[0]["msg"][1:]
                raise InputError(f"{where}{name(key)}: {problem} (got {value!r})") from None
        return cls(**values)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field that has a default, with it, as ``to_dict`` writes values."""
        return {f.name: _plain(f.default) for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}

    @classmethod
    def not_results(cls) -> frozenset[str]:
        """The fields that say where a run is written, how it is saved, logged or computed, not what it learns
        (their role, ``config.Role``: place or harmless)."""
        return fields_in(cls, Role.PLACE, Role.HARMLESS)

    @classmethod
    def path_fields(cls) -> frozenset[str]:
        """The fields that name a file or folder (a ``Path`` in their annotation)."""
        return frozenset(name for name, hint in _hints(cls).items() if _mentions(hint, Path))

    @classmethod
    def from_file(cls, path: Path) -> RunSpec:
        return cls.from_dict(read_json(path), str(path))

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class MLMSpec(RunSpec):
    """A stage that trains with the masked-language-model loss on prepared token shards (Steps 1, 1b and 2)."""

    data: Path
    """folder made by `python -m ds_minimodel prepare`"""
    steps: Annotated[Updates | None, OWN_DEFAULT] = None
    """optimizer updates (default: the scheduler's total_num_steps)"""
    seq_len: PositiveInt = TrainConfig.seq_len
    """tokens per training sequence"""
    mask_prob: Probability = TrainConfig.mask_prob
    """share of tokens masked"""
    packing: typing.Literal["sentences", "blocks"] = TrainConfig.packing
    """sentences: whole lines packed into each block, the rest padding (RoBERTa's FULL-SENTENCES); blocks: the text
    cut every seq_len - 1 tokens, no padding (fairseq's none)"""
    keep_checkpoints: Annotated[PositiveInt | None, OWN_DEFAULT] = None
    """keep only the newest K checkpoints (default: all)"""


@dataclass(frozen=True, kw_only=True)
class PretrainSpec(MLMSpec):
    """Step 1: a registered primary pretrained from scratch."""

    STAGE: ClassVar[str] = "pretrain"
    ENTRY: ClassVar[str] = "run_pretrain.py"

    variant: str = "base"
    """a primary (systems.PRIMARIES): base: BL_BASE's model; small: BL_SMALL (--small-layers deep); minijoint:
    second MLM head after layer --aux-layer, loss = mean of both heads; minijoint@N: the same with the head after
    layer N (the depth study)"""
    aux_layer: PositiveInt = Depths.aux
    """MiniJoint: layer N the second head reads (paper N=4)"""
    aux_weight: Probability = AUX_WEIGHT
    """MiniJoint: the second head's share of the loss, the top head's being the rest (paper: 0.5, their mean)"""
    small_layers: PositiveInt = Depths.small
    """BL_SMALL's depth"""
    preset: str = "base"
    """model size preset: tiny, demo, base, small"""
    model_config: Path | None = None
    """JSON object of ModelConfig fields overriding the preset"""
    forget_every: Count = 0
    """active forgetting (Chen, Marchisio et al. 2023): draw the token embeddings afresh and clear their optimizer
    state every K updates; 0: never"""


@dataclass(frozen=True, kw_only=True)
class FromModelSpec(MLMSpec):
    """A stage that trains on top of a pretrained model, everything it copies from that model frozen."""

    from_: Annotated[Path, tyro.conf.arg(name="from")]
    """the pretrained primary model: a checkpoint, a model folder, or a Hugging Face BERT/DistilBERT/RoBERTa folder"""


@dataclass(frozen=True, kw_only=True)
class MiniPostSpec(FromModelSpec):
    """Step 1b: MiniPost's mini-model, the bottom layers cut from --from with new layers trained on top."""

    STAGE: ClassVar[str] = "minipost"
    ENTRY: ClassVar[str] = "run_minipost.py"

    keep_layers: PositiveInt = Depths.keep
    """bottom layers N copied from the primary"""
    new_layers: PositiveInt = Depths.new
    """new layers k trained on top (paper: 2)"""


@dataclass(frozen=True, kw_only=True)
class HeadSpec(FromModelSpec):
    """The MLM head of a bare encoder (imported from Hugging Face without one), its body and embeddings frozen."""

    STAGE: ClassVar[str] = "head"
    ENTRY: ClassVar[str] = "run_head.py"

    train_body: bool = False
    """also train the body and the token embeddings: an MLM continuation of the whole encoder (for one whose upper
    layers were never read by an MLM head, e.g. a sentence-embedding model); the result is then a primary of its own,
    no longer the pretrained encoder"""


@dataclass(frozen=True, kw_only=True)
class AdaptSpec(MLMSpec):
    """Step 2: a target language's embeddings over a system's frozen body."""

    STAGE: ClassVar[str] = "adapt"
    ENTRY: ClassVar[str] = "run_adapt.py"

    save_every: PositiveInt = 500
    system: str
    """a registered system (systems.SYSTEMS), or minijoint@N (the depth study: second head after layer N)"""
    body: Path
    """checkpoint or model folder of the body: the primary (bl_base; also a Hugging Face folder), the 4-layer model
    (bl_small), the MiniJoint primary or its extracted mini-model (minijoint), the Step-1b output (minipost)"""
    lang: Annotated[str | None, OWN_DEFAULT] = None
    """target language code for run names (default: the --data folder's name)"""
    body_dropout: typing.Literal["on", "off"] = "on"
    """dropout inside the frozen body during Step 2 (recorded in every checkpoint)"""
    init: str = "overlap"
    """overlap: pieces shared with the source vocabulary start from the source rows (the paper); specials: only the
    5 special pieces do (the source-relearn control: Step 2 on the source language itself, from scratch); focus: as
    overlap, and every other piece that occurs in --data is a sparsemax mixture of shared pieces' source rows, by
    similarity in static vectors trained on --data (FOCUS, Dobler and de Melo 2023; needs gensim); wechsel: the 5
    special pieces copied, every other piece that occurs in --data a softmax mixture of its 10 nearest source
    pieces' rows, in static vectors of --data and --source-data aligned on --word-list (WECHSEL, Minixhofer et al.
    2022; needs gensim)"""
    new_rows: str = "normal"
    """rows that get no source row or mixture: normal = N(0, init_std) (the paper); source = N(mean, std) of the
    source rows, per dimension"""
    shared_with: Path | None = None
    """copy (and, for focus, mix from) only the source rows of pieces that this tokenizer has too: with the source
    corpus as --data, the anchored source-relearn control (English relearned with the rows German's initialisation
    would take from English)"""
    word_list: Path | None = None
    """wechsel and --word-anchors: a bilingual word list, one 'target_word<TAB>source_word' pair a line
    (scripts/make_dictionaries.py builds them from FreeDict, scripts/make_help_lexicons.py from parallel text)"""
    source_data: Path | None = None
    """wechsel: the source corpus prepared with the body's tokenizer (ds-minimodel prepare --tokenizer), for its
    static vectors"""
    source_static_vectors: Path | None = None
    """wechsel: the source's static vectors, trained before on --source-data's very tokens (as --static-vectors for
    the target's), used instead of training them"""
    freeze_copied: bool = False
    """keep the rows copied from source rows (and their output biases) unchanged: fixed anchors; sets Step 2's
    weight decay to 0, so that they stay bit-identical"""
    static_vectors: Path | None = None
    """focus and wechsel: the target's static vectors, trained before on --data's very tokens with this run's
    settings (an .npz an earlier run kept in the prepared folder's .static_vectors/, or scripts/gpu_prepare.py
    wrote), used instead of training them: focus then needs no gensim; vectors of any other text are refused"""
    rare_vectors: typing.Literal["drawn", "ngrams"] = "drawn"
    """focus and wechsel: pieces too rare for a static vector of their own are drawn (the papers' rule), or take
    FastText's vector from their character n-grams (ngrams: a small corpus's rows are then mostly mixtures)"""
    transliterate: bool = False
    """overlap and focus: a target piece that no source piece spells the same also copies the row of the source
    piece its romanisation is (anyascii; names, loanwords, product terms in another script)"""
    word_anchors: bool = False
    """overlap, focus and wechsel, with --word-list: a target piece that is a listed word also copies the row of the
    source piece its translation is (focus mixes the other rows from these too, wechsel fills only the others)"""
    train_positions: bool = False
    """also train the position embeddings"""
    train_embedding_norm: bool = False
    """also train the embedding LayerNorm"""


@dataclass(frozen=True, kw_only=True)
class FinetuneSpec(RunSpec):
    """Step 3: the primary's body finetuned on a source-language task, its token embeddings frozen."""

    STAGE: ClassVar[str] = "finetune"
    ENTRY: ClassVar[str] = "run_finetune.py"

    out: Path = field(metadata=role(Role.PLACE))
    """run folder: checkpoints, metrics, dev scores"""
    save_every: Annotated[PositiveInt, OWN_DEFAULT] = 1_000_000
    """updates between checkpoints (default: the end)"""
    warmup_ratio: Fraction = 0.06
    """warm-up share of the updates where the scheduler says "auto" (RoBERTa's finetuning recipe: 6%)"""
    seed: Count = TrainConfig.seed
    """seed of the head, data order and dropout"""
    model: Path
    """the primary model: a Step-1 checkpoint or model folder"""
    task: str
    """task name for run names and results, e.g. xnli, lohelp"""
    format: str
    """the task files' format"""
    train: Path
    """source-language training file"""
    dev: Path | None = None
    """source-language dev file, scored after training"""
    dev_format: str | None = None
    """format of --dev when it differs from --format (XNLI: train on multinli, dev in xnli)"""
    language: str = "en"
    """language of --train/--dev (XNLI files hold several)"""
    epochs: Positive = 3.0
    """passes over --train (may be a fraction; the update count follows from it and the global batch)"""
    max_len: PositiveInt = 128
    """tokens per input (paper QA: 384)"""
    doc_stride: PositiveInt = 128
    """QA: overlap of context windows"""
    pooling: str = "cls"
    """sequence tasks: classify from the <s> position (RoBERTa) or the mean over real tokens"""


SPECS: dict[str, type[RunSpec]] = {cls.STAGE: cls for cls in (PretrainSpec, MiniPostSpec, HeadSpec, AdaptSpec,
                                                               FinetuneSpec)}


def read_spec(path: Path) -> RunSpec:
    """The spec a file holds, whichever stage it names."""
    data = read_json(path)
    stage = data.get("stage") if isinstance(data, dict) else None
    if stage not in SPECS:
        raise InputError(f"{path}: \"stage\" must be one of {', '.join(SPECS)}, got {stage!r}")
    return SPECS[stage].from_dict(data, str(path))


def one_of(allowed: Iterable[str]) -> Callable[[str], None]:
    """A field check (``check_fields``): the value must be one of ``allowed``, a registry's names (a registry passed
    itself is read at each check, so that a name registered later counts)."""

    def check(value: str) -> None:
        names = list(allowed)
        if value not in names:
            raise InputError(f"must be one of {', '.join(names)}, got {value!r}")

    return check


def check_fields(spec: RunSpec, checks: dict[str, Callable[[Any], Any]], *, name: Callable[[str], str] = str
                 ) -> None:
    """Each set field's value through its check (a function that raises InputError: the names a registry holds,
    which an annotation cannot list); the error names the field as ``name`` spells it (the command line: its
    option)."""
    for key, check in checks.items():
        value = getattr(spec, key)
        if value is not None:
            try:
                check(value)
            except InputError as err:
                raise InputError(f"{name(key)}: {err}") from None


def help_of(cls: type, name: str) -> str:
    """A field's docstring as one line: the help text of the option that sets it."""
    for klass in cls.__mro__:
        doc = _docstrings(klass).get(name)
        if doc:
            return " ".join(doc.split())
    raise KeyError(f"{cls.__name__}.{name} has no docstring")


@functools.cache
def _docstrings(cls: type) -> dict[str, str]:
    """{field: the string literal right after its annotated assignment} in ``cls``'s own source."""
    if not dataclasses.is_dataclass(cls) or cls.__module__ != __name__:
        return {}
    body = ast.parse(inspect.getsource(cls)).body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = after.value.value
    return docs


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _mentions(hint: Any, kind: type) -> bool:
    """Whether ``kind`` is ``hint`` or inside it (``Path | None``, ``Annotated[Path | None, ...]``)."""
    return hint is kind or any(_mentions(arg, kind) for arg in typing.get_args(hint))


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value

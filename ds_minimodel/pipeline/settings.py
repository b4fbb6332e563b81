"""The pipeline's config file (``configs/*.json``) as typed settings, checked as a whole before any work starts."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic

from ds_minimodel.config import ModelConfig, TrainConfig, dataclass_from_dict, get_preset, read_json
from ds_minimodel.errors import InputError, require_file
from ds_minimodel.pipeline.sections import section
from ds_minimodel.pipeline.source_model import GivenModel, given_model, given_primary
from ds_minimodel.pipeline.step2_init import check_step2_init
from ds_minimodel.stages.specs import (
    AdaptSpec,
    Count,
    FinetuneSpec,
    HeadSpec,
    MiniPostSpec,
    PositiveInt,
    PretrainSpec,
    Updates,
)
from ds_minimodel.systems import (
    AT,
    AUX_WEIGHT,
    BASELINE,
    DEPTH_FAMILY,
    Depths,
    depth_of,
    get_system,
    is_system,
    system_names,
)

RELEARN_SUFFIX = "-relearn"
"""The source-relearn control's name where a target language's would stand: ``en-relearn``."""


STAGE_LENGTH = {"ds_config": str, "steps": Updates, "save_every": PositiveInt}
"""What every training section must set: the pipeline decides when a run is finished by its update count."""
OWN_MLM = ("data", "seq_len", "seed")
"""The MLM stages' fields the plan sets for each job from the config's top level."""
Step1Settings = section(PretrainSpec, "Step1Settings", required=STAGE_LENGTH,
                        owned=(*OWN_MLM, "variant", "aux_layer", "small_layers", "preset", "model_config"))
"""Step 1: pretraining the primaries from scratch (``PretrainSpec``'s fields: e.g. ``forget_every``)."""
HeadSettings = section(HeadSpec, "HeadSettings", required=STAGE_LENGTH, owned=(*OWN_MLM, "from_"))
"""The MLM head of ``source.model`` (``HeadSpec``; ``train_body``: an MLM continuation of the whole given model,
which is then BL_BASE's primary and MiniPost's source in its place)."""
Step1bSettings = section(MiniPostSpec, "Step1bSettings", required=STAGE_LENGTH,
                         owned=(*OWN_MLM, "from_", "keep_layers", "new_layers"))
"""Step 1b (``MiniPostSpec``): a system's own depths are the system's (``System.depths_of``)."""
Step2Settings = section(AdaptSpec, "Step2Settings", required=STAGE_LENGTH, owned=(
    *OWN_MLM, "system", "body", "lang", "shared_with", "word_list", "source_data", "keep_checkpoints"))
"""Step 2 (``AdaptSpec``; every checkpoint is scored in Step 4, so none is dropped). ``init`` may also be auto:
per target, focus with ``word_anchors`` from its ``word_list`` where it has one, else focus alone (``target_init``;
chosen on dev, RESULTS.md), said before its Step 2 starts. The source-relearn control uses specials, or ``init``
with ``relearn_anchor`` (focus under auto)."""
OWN_FINETUNE = ("model", "task", "format", "train", "dev", "dev_format", "language", "seed")
"""Step 3's fields the plan sets for each job from the task and the finetuning seed."""
Step3Settings = section(FinetuneSpec, "Step3Settings", required={"ds_config": str}, owned=OWN_FINETUNE,
                        defaults={"log_every": 50}, extra=[("seeds", Annotated[list[Count], pydantic.Field(
                            min_length=1)], field(default_factory=lambda: [1, 2, 3, 4, 5]))])
"""Step 3 for every task (``FinetuneSpec``; a finetuning run is a few hundred updates: a line every 50), one run
per seed of ``seeds``. A task's own ``finetune`` section comes first, the paper's per-format settings
(``FORMAT_FINETUNING``) after these (``task_finetuning``)."""
TaskFinetune = section(FinetuneSpec, "TaskFinetune", owned=OWN_FINETUNE)
"""One task's own Step-3 settings (any of ``step3``'s but ``seeds``): its DeepSpeed JSON (learning rate),
``max_len`` or ``epochs``."""


FORMAT_FINETUNING: dict[str, dict[str, Any]] = {"squad": {"max_len": 384, "doc_stride": 128}}
"""The paper's finetuning settings where a task format differs from ``step3``'s defaults (Sec. 4.1 and appendix:
extractive QA reads 384 tokens with a stride of 128). A task's own ``finetune`` section and the config's ``step3``
section, where they set a value, come first. Its learning rates (1e-5 classification, 3e-5 QA) live in the
DeepSpeed JSONs ``ds_configs/finetune_cls_fp16.json`` and ``finetune_qa_fp16.json``, chosen per task by
``finetune.ds_config``."""


@dataclass(frozen=True, kw_only=True)
class CorpusSettings:
    lang: str
    corpus: str
    vocab_size: int | None = None
    """This language's vocabulary size (default: the config's ``vocab_size``); Chinese or Japanese need more."""
    character_coverage: float | None = None
    """SentencePiece's character coverage (default: chosen by script, see ``data.tokenizer``)."""
    lowercase: bool | None = None
    """Train this language's tokenizer to case-fold its text (``prepare --lowercase``). Default: as the source
    tokenizer does: on for every target of an uncased ``source.model`` (its body never saw a capital letter, and
    case-folded target pieces match its vocabulary more often), off otherwise."""
    tokenizer: str | None = None
    """An existing tokenizer to use instead of training one: a SentencePiece model or a Hugging Face folder."""
    word_list: str | None = None
    """A target language's bilingual word list with the source language (``step2.init`` wechsel; one
    'target_word<TAB>source_word' pair a line; ``scripts/make_dictionaries.py``)."""
    static_vectors: str | None = None
    """A language's static vectors for ``step2.init`` focus or wechsel (the source's: wechsel's side of the
    alignment), trained before on this very corpus with its tokenizer (a ``.static_vectors/*.npz`` an earlier run
    kept in its prepared folder, or what ``scripts/gpu_prepare.py`` carries to a GPU machine): used instead of
    training them, so that no gensim is needed where every language that needs vectors has them; any other text's
    are refused."""
    model: str | None = None
    """The source language only: an existing pretrained model to start from instead of pretraining one (a Hugging
    Face BERT, DistilBERT, RoBERTa or XLM-R folder, or a model folder or checkpoint of ours). It is BL_BASE's
    primary (and MiniPost's source): Step 1 does not run for it, its tokenizer is the source language's, and a bare encoder gets
    its MLM head trained first (the ``head`` section). See ``GivenModel``."""


@dataclass(frozen=True, kw_only=True)
class TaskSettings:
    name: str
    format: str
    train: str
    """Source-language training file."""
    dev: dict[str, str] = field(default_factory=dict)
    """{language: file}: the source language's is scored with the source embeddings after Step 3; a target
    language's with every Step-2 checkpoint in Step 4, to choose the checkpoint to use (``pipeline.dev_choice``)."""
    test: dict[str, str] = field(default_factory=dict)
    """{language: file} scored zero-shot in Step 4 with each target language's embeddings."""
    eval_format: str | None = None
    """Format of the dev and test files when it differs from ``format`` (XNLI: train ``multinli``, eval ``xnli``)."""
    finetune: TaskFinetune = field(default_factory=TaskFinetune)
    """This task's own finetuning settings (any ``step3`` key but ``seeds``): e.g. its DeepSpeed JSON (learning
    rate), ``max_len`` or ``epochs``."""


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    out: str
    source: CorpusSettings
    targets: list[CorpusSettings]
    tasks: list[TaskSettings]
    step2: Step2Settings
    step3: Step3Settings
    step1: Step1Settings | None = None
    """Step 1: pretraining the primaries from scratch. Required, unless ``source.model`` gives BL_BASE's primary;
    then it pretrains the other primaries the systems need (BL_SMALL's, MiniJoint's), which are refused without it."""
    head: HeadSettings | None = None
    """Training the MLM head of ``source.model`` when it is a bare encoder (``run_head.py``: body
    and embeddings frozen). Required for such a model, refused for one that has a trained head."""
    step1b: Step1bSettings | None = None
    systems: list[str] = field(default_factory=system_names)
    preset: str = "base"
    model: dict[str, Any] | None = None
    """ModelConfig fields over the preset's for the primaries Step 1 pretrains here, as ``run_pretrain.py
    --model-config`` reads them: e.g. {"num_layers": 6, "hidden_size": 384, "ffn_size": 1536} for a size no preset
    names. ``None``: the preset as it is."""
    seq_len: int = TrainConfig.seq_len
    vocab_size: int = 50_000
    fit_vocab: bool = False
    """A language whose corpus cannot give ``vocab_size`` pieces (or its own) gets the largest vocabulary
    SentencePiece can learn from it, said when it is trained, instead of an error (a low-resource language)."""
    ranks: int = 1
    aux_layer: int = Depths.aux
    small_layers: int = Depths.small
    keep_layers: int = Depths.keep
    new_layers: int = Depths.new
    seed: int = TrainConfig.seed
    slurm: dict[str, Any] | None = None
    """Batch-job settings for ``python -m ds_minimodel submit`` (``submit.SlurmSettings``)."""
    source_relearn: list[str] = field(default_factory=list)
    """Systems that also run the source-relearn control: Step 2 on the source corpus itself with only the special
    rows copied (``run_adapt.py --init specials``), scored on the source test files. No language gap is involved,
    so the gap to the model's own source score is what Step 2 loses at that budget (issue 16)."""
    relearn_anchor: str | None = None
    """A target language: the source-relearn control then copies only the source rows that this language's
    initialisation copies (the pieces its vocabulary shares with the source's), and starts the rest with
    ``step2.init``: the anchored control of issue 27, what Step 2 loses without a language gap when it starts as a
    real target would. None: the plain control (the five special rows only)."""
    pretrain_seeds: list[int] = field(default_factory=list)
    """More pretraining runs (appendix A.5): each seed k repeats Steps 1-3 for every system, language, task and
    finetuning seed in ``<out>/pretrain-seed<k>/`` (Steps 1 and 2 with seed k; the prepared data are shared), and Step
    4 scores their final Step-2 checkpoints beside the main run's (``seed``, in ``out``), for the spread over
    pretraining runs next to the spread over finetuning seeds."""
    step2_seeds: list[int] = field(default_factory=list)
    """Further Step-2 runs: each seed k repeats Step 2 alone for every system and target language, with seed k (the
    drawn rows, static vectors, data order, masks and dropout), over the main run's bodies, in
    ``<out>/step2-seed<k>/`` (job names end ``.step2-seed<k>``); Step 4 scores every checkpoint of each with the
    main run's Step-3 models, and the analysis gives each run's time to target and the speedup's spread over runs
    (one Step-2 run per system does not size a speedup: ``results/relearn-long/fine/seed2``)."""
    source_minis: list[str] = field(default_factory=list)
    """Systems whose mini-model (the body their Step 2 trains over) is also finetuned on each task and scored on the
    source test files, beside the primaries (the paper's Table 5: does dual-head pretraining hurt English?)."""

    @classmethod
    def load(cls, path: Path) -> PipelineConfig:
        source = str(path)
        raw = read_json(path)
        cfg = dataclass_from_dict(cls, raw, source)
        unknown = [name for name in cfg.systems if not is_system(name)]
        if unknown or not cfg.systems or len(set(cfg.systems)) != len(cfg.systems):
            raise InputError(f"{source}: systems must be a non-empty list of distinct names among "
                             f"{', '.join(system_names())} or {DEPTH_FAMILY}{AT}N; got {cfg.systems}")
        for name in cfg.systems:
            if get_system(name).step1b and cfg.step1b is None:
                raise InputError(f"{source}: {name} needs a step1b section")
        _check_names(cfg, source)
        if any(target.model is not None for target in cfg.targets):
            raise InputError(f"{source}: targets[].model: a pretrained model belongs to the source language "
                             "(source.model); a target language gets new embeddings in Step 2")
        if cfg.source.model is None:
            if cfg.step1 is None:
                raise InputError(f"{source}: step1 is missing: it pretrains the primaries (or give source.model, "
                                 "a pretrained model to start from)")
            if cfg.head is not None:
                raise InputError(f"{source}: the head section trains the MLM head of source.model, which is not set")
        else:
            scratch = [name for name in cfg.systems if get_system(name).primary != given_primary()]
            if scratch and cfg.step1 is None:
                raise InputError(
                    f"{source}: {', '.join(scratch)} need{'s' if len(scratch) == 1 else ''} a primary pretrained "
                    f"from scratch, but source.model gives only {get_system(BASELINE).paper_name}'s primary; add a "
                    "step1 section to pretrain it here, or leave it out of systems")
            if cfg.pretrain_seeds:
                raise InputError(f"{source}: pretrain_seeds repeats Step 1 with other seeds, but source.model is a "
                                 "given model that Step 1 does not train; leave pretrain_seeds out")
        if not set(cfg.source_relearn) <= set(cfg.systems):
            raise InputError(f"{source}: source_relearn must name systems of this pipeline ({', '.join(cfg.systems)});"
                             f" got {cfg.source_relearn}")
        if cfg.relearn_anchor is not None and cfg.relearn_anchor not in [t.lang for t in cfg.targets]:
            raise InputError(f"{source}: relearn_anchor must be one of the target languages, got "
                             f"{cfg.relearn_anchor!r}")
        for key in ("pretrain_seeds", "step2_seeds"):  # further runs beside the main one, which has seed
            seeds = getattr(cfg, key)
            if not all(k >= 0 for k in seeds) or len(set(seeds)) != len(seeds) or cfg.seed in seeds:
                raise InputError(f"{source}: {key} must be distinct integers of at least 0, other than seed "
                                 f"({cfg.seed}); got {seeds}")
        controls = [key for key in ("source_relearn", "source_minis") if getattr(cfg, key)]
        if controls and not cfg.tasks:
            what = "are controls" if len(controls) > 1 else "is a control"
            raise InputError(f"{source}: {' and '.join(controls)} {what} scored on a task's source-language test "
                             "file, but tasks is empty; name a task or leave it out")
        minis = [name for name in cfg.source_minis if name not in cfg.systems or get_system(name).whole_primary]
        if minis:
            raise InputError(f"{source}: source_minis must name systems of this pipeline that adapt a mini-model "
                             f"({', '.join(s for s in cfg.systems if not get_system(s).whole_primary) or 'none'}); "
                             f"got {cfg.source_minis}")
        return cfg

    def architecture(self, source: str = "pipeline config") -> ModelConfig:
        """The shape of the primaries Step 1 pretrains: the preset's, with ``model``'s fields over it (an unknown
        field or a bad value is one InputError naming ``source``)."""
        try:
            preset = get_preset(self.preset)
        except InputError as e:
            raise InputError(f"{source}: preset: {e}") from None
        if self.model is None:
            return preset
        for key, setting in (("vocab_size", "each language's vocabulary (vocab_size)"), ("aux_head_layer", "aux_layer")):
            if key in self.model:
                raise InputError(f"{source}: model.{key}: the pipeline sets it from {setting}, not here")
        return ModelConfig.from_dict({**preset.to_dict(), **self.model}, source=f"{source}: model")

    def depths(self, layers: int | None = None) -> Depths:
        """The layer counts the systems' entries are functions of (the primary's depth: ``layers``, the given
        model's, else the architecture's)."""
        return Depths(layers=layers or self.architecture().num_layers, small=self.small_layers,
                      aux=self.aux_layer, keep=self.keep_layers, new=self.new_layers)

    def trained_primaries(self) -> list[str]:
        """The primaries Step 1 pretrains here: all of them, but the one ``source.model`` gives."""
        return [p for p in self.primaries() if not (self.source.model is not None and p == given_primary())]

    def primaries(self) -> list[str]:
        """The Step-1 models this pipeline's systems adapt, by name."""
        return sorted({get_system(name).primary for name in self.systems})


PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A language's or task's name: it names folders under ``out`` (``data/<lang>``, ``step3/<task>``), so nothing that
climbs out of them."""


def _check_names(cfg: PipelineConfig, source: str) -> None:
    """Languages and tasks: plain names, each once (a target that is the source language too); finetuning seeds
    each once."""
    langs = [cfg.source.lang, *(t.lang for t in cfg.targets)]
    for what, names in (("language", langs), ("task", [t.name for t in cfg.tasks])):
        bad = [name for name in names if not PLAIN_NAME.fullmatch(name) or ".." in name]
        if bad:
            raise InputError(f"{source}: {what} name {bad[0]!r} is not a plain name (letters, digits, '-', '_', "
                             "'.'): it names folders under out")
        twice = [name for name in names if names.count(name) > 1]
        if twice:
            same = " (a target language that is the source language)" if twice[0] == cfg.source.lang else ""
            raise InputError(f"{source}: {what} {twice[0]!r} is named twice{same}: every record would count twice")
    seeds = cfg.step3.seeds
    if len(set(seeds)) != len(seeds):
        raise InputError(f"{source}: step3.seeds {seeds} names a seed twice: the spread over seeds would be false")


def task_finetuning(step3: Step3Settings, task: TaskSettings) -> Step3Settings:
    """The Step-3 settings of one task: its own ``finetune`` section, then the config's ``step3`` where that sets a
    value, then the paper's for its format (``FORMAT_FINETUNING``), then the spec's defaults."""
    merged = {**FORMAT_FINETUNING.get(task.format, {}), **step3.values(), **task.finetune.values()}
    return Step3Settings(**merged, seeds=step3.seeds)


def only_systems(cfg: PipelineConfig, systems: list[str], source: str) -> PipelineConfig:
    """``cfg`` cut down to ``systems``, a subset of its own (``--systems``); the same folders, so what the subset
    runs is what the whole config would, and its Step-4 scores are reused by the whole config's."""
    unknown = [s for s in systems if s not in cfg.systems]
    if unknown or not systems:
        raise InputError(f"--systems: {', '.join(unknown) or 'none given'}: not among {source}'s systems "
                         f"({', '.join(cfg.systems)})")
    return dataclasses.replace(cfg, systems=[s for s in cfg.systems if s in systems],
                               source_relearn=[s for s in cfg.source_relearn if s in systems],
                               source_minis=[s for s in cfg.source_minis if s in systems])


def check(cfg: PipelineConfig, source: str, *, world_size: int | None) -> GivenModel | None:
    """Everything that can be known before the first update: numbers, shapes against the preset (or the given
    model), every file named (exists, parses), each language's vocabulary against its text, ``source.model`` (read
    once; returned). ``world_size``: the ranks the training stages will have, when known here (not under srun,
    whose allocation decides)."""
    from ds_minimodel.data.corpus_text import check_corpus, check_vocabulary_fits
    from ds_minimodel.data.tokenizer import open_tokenizer
    from ds_minimodel.model.encoder import POOLINGS
    from ds_minimodel.tasks.formats import FORMATS, KINDS, read_examples
    from ds_minimodel.tasks.qa import window_room

    if not cfg.targets:
        raise InputError(f"{source}: targets is empty: name at least one target language ({{\"lang\": ..., "
                         "\"corpus\": ...}), or there is nothing to transfer to")
    arch = cfg.architecture(source)
    shaped = f"{cfg.preset} preset's" + (" (with the config's model fields)" if cfg.model else "")
    for name, value, low in (("seq_len", cfg.seq_len, 1), ("vocab_size", cfg.vocab_size, 1), ("ranks", cfg.ranks, 1),
                             ("seed", cfg.seed, 0)):
        if value < low:
            raise InputError(f"{source}: {name} must be at least {low}, got {value}")
    given = given_model(cfg.source.model, f"{source}: source.model")
    # The primaries' shape: the given model's where there is one (the architecture then shapes only the primaries
    # Step 1 pretrains from scratch, which are compared with it), else the architecture's.
    shape = ("source.model's", given.num_layers, given.max_positions) if given else (
        shaped, arch.num_layers, arch.max_positions)
    what, layers, positions = shape
    if cfg.seq_len > positions:
        raise InputError(f"{source}: seq_len {cfg.seq_len} exceeds the {what} {positions} positions")
    if given and cfg.trained_primaries() and cfg.seq_len > arch.max_positions:
        raise InputError(f"{source}: seq_len {cfg.seq_len} exceeds the {shaped} {arch.max_positions} positions "
                         f"(the shape of {', '.join(cfg.trained_primaries())}, pretrained here)")
    entries = [get_system(name) for name in cfg.systems]
    applies = {"aux_layer": any(e.dual_head for e in entries), "keep_layers": any(e.step1b for e in entries),
               "new_layers": any(e.step1b for e in entries), "small_layers": "small" in cfg.trained_primaries()}
    for name, value, low, high in (("aux_layer", cfg.aux_layer, 1, layers - 1), ("keep_layers", cfg.keep_layers, 1,
                                   layers - 1), ("small_layers", cfg.small_layers, 1, layers), ("new_layers",
                                   cfg.new_layers, 1, layers)):
        if not applies[name]:
            continue  # a layer count of a system this config does not run (the defaults are the paper's 12 layers)
        if not low <= value <= high:
            raise InputError(f"{source}: {name} must be between {low} and {high} for the {what} {layers} layers, "
                             f"got {value}")
    if cfg.step1 is not None and cfg.step1.get("aux_weight") != AUX_WEIGHT and not applies["aux_layer"]:
        raise InputError(f"{source}: step1.aux_weight is the weight of MiniJoint's second head, and no system of this "
                         "config has one")
    for name in cfg.systems:
        if depth_of(name) is not None and depth_of(name) > layers:  # (before get_system registers such a name)
            raise InputError(f"{source}: {name} puts the second head after layer {depth_of(name)}, above the "
                             f"{what} {layers} layers")
        own = get_system(name).depths_of(cfg.depths(layers))  # a Step-1b system's own depths (System.depths_of)
        if get_system(name).step1b and not (1 <= own.keep <= layers - 1 and own.new >= 1):
            raise InputError(f"{source}: {name}'s Step 1b must keep 1 to {layers - 1} of the {what} {layers} "
                             f"layers and add 1 or more; it keeps {own.keep} and adds {own.new}")
    if given is not None:
        if given.needs_head and cfg.head is None:
            raise InputError(f"{given.path}: a bare encoder (no MLM head); Step 2 learns through that head, so "
                             f"{source} needs a head section ({{\"ds_config\", \"steps\", \"save_every\"}}) to "
                             "train it first")
        if not given.needs_head and cfg.head is not None:
            raise InputError(f"{given.path}: has a trained MLM head already; {source}'s head section would "
                             "train another over it: leave the head section out")
        if cfg.source.tokenizer is not None and open_tokenizer(cfg.source.tokenizer).sha256 != \
                given.tokenizer["sha256"]:
            raise InputError(f"{cfg.source.tokenizer}: not the tokenizer of source.model {given.path} (another "
                             "hash); leave source.tokenizer out: the model's own is used")
    for name in ("step1", "head", "step1b", "step2"):  # (their ranges: the specs' annotations, at load)
        stage = getattr(cfg, name)
        if stage is not None:
            _check_ds_config(stage.ds_config, f"{source}: {name}.ds_config", world_size, steps=stage.steps)
    check_step2_init(cfg, source)
    for task in cfg.tasks:
        own = task_finetuning(cfg.step3, task)
        where = f"{source}: task {task.name}'s finetuning"
        _check_ds_config(own.ds_config, f"{where} (ds_config)", world_size)
        if own.get("max_len") > positions or own.get("pooling") not in POOLINGS:
            raise InputError(f"{where}: needs max_len at most {positions} (the {what} positions) and pooling one "
                             f"of {', '.join(POOLINGS)}; got {own.get('max_len')}, {own.get('pooling')!r}")
        if task.format in FORMATS and KINDS[FORMATS[task.format].kind].windows:
            problem = window_room(own.get("max_len"), own.get("doc_stride"))
            if problem:
                raise InputError(f"{where}: {problem}")
    for corpus in [cfg.source, *cfg.targets]:
        where = f"{source}: {corpus.lang}"
        require_file(corpus.corpus, "corpus file", where)
        check_corpus(Path(corpus.corpus))  # empty, binary, another encoding
        if corpus.lowercase is not None and (corpus.tokenizer is not None or (corpus is cfg.source and given)):
            raise InputError(f"{where}: lowercase is for a tokenizer trained here; this language's is given "
                             f"({corpus.tokenizer or 'source.model'}'s own)")
        if corpus is cfg.source and given is not None:
            continue  # the model's own tokenizer, checked above
        if corpus.tokenizer is not None:
            if not Path(corpus.tokenizer).exists():
                raise InputError(f"{corpus.tokenizer}: tokenizer not found ({where})")
        else:
            check_vocabulary_fits(Path(corpus.corpus), corpus.vocab_size or cfg.vocab_size,
                                  corpus.character_coverage)
    for task in cfg.tasks:
        where = f"{source}: task {task.name}"
        for fmt in filter(None, (task.format, task.eval_format)):
            if fmt not in FORMATS:
                raise InputError(f"{where}: unknown format {fmt!r}; known: {', '.join(FORMATS)}")
        if task.eval_format and FORMATS[task.eval_format].kind != FORMATS[task.format].kind:
            raise InputError(f"{where}: eval_format {task.eval_format!r} is not a {FORMATS[task.format].kind} task")
        for path in [task.train, *task.dev.values(), *task.test.values()]:
            require_file(path, "task file", where)
        train = read_examples(task.format, Path(task.train), language=cfg.source.lang, training=True)
        for lang, path in [*task.dev.items(), *task.test.items()]:
            read_examples(task.eval_format or task.format, Path(path), labels=train.labels or None, language=lang)
        langs = [cfg.source.lang, *(t.lang for t in cfg.targets)]
        stray = sorted((set(task.dev) | set(task.test)) - set(langs))
        if stray:
            raise InputError(f"{source}: task {task.name}: a dev or test file for {stray[0]!r}, which is neither the "
                             f"source nor a target language ({', '.join(langs)}): it would never be scored")
        targets = [t.lang for t in cfg.targets]
        if not set(task.test) & set(targets):
            raise InputError(f"{source}: task {task.name} has no test file in a target language ({', '.join(targets)}):"
                             f" its finetuning would transfer to nothing; add \"test\": {{\"{targets[0]}\": "
                             "<labelled file>}, or leave the task out")
    return given


def _check_ds_config(path: str, where: str, world_size: int | None, *, steps: int | None = None) -> None:
    """The whole DeepSpeed JSON, as each stage will check it, before the first job starts."""
    from ds_minimodel.ds_config import load_ds_config, resolve_batch
    from ds_minimodel.train.ds_validate import check_ds_config

    if not Path(path).is_file():
        raise InputError(f"{path}: DeepSpeed config not found ({where})")
    config = load_ds_config(path)
    check_ds_config(config, f"{path} ({where})", steps=steps)
    if world_size is not None:
        resolve_batch(config, world_size, source=path)

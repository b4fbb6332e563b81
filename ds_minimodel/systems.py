"""The systems the paper compares (Marchisio et al., 2023, Sec. 2-3), one registry entry each.

A *primary* is a Step-1 model: one pretraining run, shared by every system that adapts it. A *system* says which
primary it adapts and what Step 2 trains over: the whole primary, its mini-model (the layers below a second MLM
head, and that head), or a mini-model built by Step 1b (the bottom layers, new layers trained on top). Pretraining,
Step 2, the pipeline's plan, the FLOP count, the benchmark and the analysis all read these entries; a new system is
one ``register`` call, made in this module or in a plugin module named by ``DS_MINIMODEL_PLUGINS`` (comma-separated
module names, imported on first use, in every process: the launched ranks too).

Depths are functions of ``Depths`` (a pipeline config's layer counts) so that one entry serves every model size.
MiniJoint at another depth, for the depth study (section 5.2), needs no entry: ``minijoint@N`` names MiniJoint with
its second head after layer N (its own primary and system, registered the first time the name is looked up, in
whichever process looks it up). Nothing here imports torch.
"""
from __future__ import annotations

import enum
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from ds_minimodel.errors import InputError

BODIES = ("primary", "mini", "step1b")
"""What Step 2 trains over. primary: the whole primary model. mini: the layers below the primary's second MLM head
and that head (MiniJoint). step1b: the model Step 1b builds from the primary (MiniPost: its bottom ``keep`` layers,
frozen, with ``new`` layers trained on top under its frozen head)."""

PLUGINS_ENV = "DS_MINIMODEL_PLUGINS"


class Step(enum.StrEnum):
    """The method's steps, one name each: the FLOP formulas (``flops.per_update_flops``), the benchmark's cases, the
    pipeline's jobs and output folders, and the training runs' names all spell a step this way."""

    PREPARE = "prepare"
    """Tokenizers trained and corpora tokenized (the pipeline's first job; no training)."""
    PRETRAIN = "step1"
    """A primary pretrained with MLM (two heads where it has a second one: MiniJoint)."""
    MINIPOST = "step1b"
    """MiniPost's mini-model: the primary's bottom layers copied and frozen, new layers trained on top."""
    ADAPT = "step2"
    """New embeddings learned over a frozen body."""
    FINETUNE = "step3"
    """The primary (or a mini-model) finetuned on a source-language task, embeddings frozen."""
    TRANSFER = "step4"
    """Zero-shot: the target embeddings swapped into the finetuned model and scored."""


@dataclass(frozen=True)
class Depths:
    """Layer counts of one experiment; the defaults are the paper's (Sec. 3)."""

    layers: int = 12
    """The primary's depth (the model preset's ``num_layers``)."""
    small: int = 4
    """BL_SMALL's depth."""
    aux: int = 4
    """N for MiniJoint: the layer its second MLM head reads."""
    keep: int = 4
    """N for MiniPost: the bottom layers it copies from the primary."""
    new: int = 2
    """MiniPost's new layers, trained in Step 1b."""


AUX_WEIGHT = 0.5
"""MiniJoint's second head's share of the Step-1 loss, the top head's being the rest: the paper trains on the mean of
both heads (Sec. 2.2)."""


@dataclass(frozen=True)
class Primary:
    """A Step-1 model. ``name`` is ``run_pretrain.py --variant`` and the run folder ``step1/<name>``."""

    name: str
    num_layers: Callable[[Depths], int]
    aux_head_layer: Callable[[Depths], int | None] = lambda d: None
    """The layer a second MLM head reads (MiniJoint's dual-head pretraining), or None."""


@dataclass(frozen=True)
class System:
    """One way to learn a new language's embeddings (Step 2), with the pretraining it needs."""

    name: str
    """Its name in pipeline configs, ``run_adapt.py --system``, run folders and results."""
    paper_name: str
    primary: str
    """The ``Primary`` whose Step-1 model it adapts (and whose finetuned copy Step 4 plugs its embeddings into)."""
    body: str
    """What Step 2 trains over: one of ``BODIES``."""
    step2_layers: Callable[[Depths], int]
    """Depth of the Step-2 body, for the FLOP count (of the system's own depths, ``depths_of``)."""
    description: str = ""
    depths_of: Callable[[Depths], Depths] = lambda d: d
    """The depths this system's own steps use, from the experiment's: a Step-1b system of another shape than the
    config's ``keep_layers``/``new_layers`` says so here (``lambda d: dataclasses.replace(d, keep=6)``), so that two
    MiniPost-like systems of different depths run side by side. Its Step 1b, Step 2 and FLOP count read them."""

    @property
    def step1b(self) -> bool:
        """Whether it needs Step 1b (``run_minipost.py`` over its primary)."""
        return self.body == "step1b"

    @property
    def body_step(self) -> Step:
        """The step whose output Step 2 trains over: Step 1 (the primary, or its mini-model) or Step 1b."""
        return Step.MINIPOST if self.step1b else Step.PRETRAIN

    @property
    def whole_primary(self) -> bool:
        """Whether Step 2 trains over the whole primary (rather than a mini-model of it)."""
        return self.body == "primary"

    @property
    def dual_head(self) -> bool:
        """Whether Step 2 trains over the mini-model below its primary's second MLM head (MiniJoint)."""
        return self.body == "mini"


PRIMARIES: dict[str, Primary] = {}
SYSTEMS: dict[str, System] = {}
_plugins_loaded = False


def register(entry: Primary | System) -> Primary | System:
    """Add a primary or a system to the registry (a system's primary must be registered first)."""
    if isinstance(entry, Primary):
        if entry.name in PRIMARIES or entry.name in ("minipost", "head"):
            raise InputError(f"primary {entry.name!r} is already registered (or names a job of its own: "
                             "run_minipost.py, run_head.py)")
        PRIMARIES[entry.name] = entry
        return entry
    if entry.name in SYSTEMS:
        raise InputError(f"system {entry.name!r} is already registered")
    if entry.primary not in PRIMARIES:
        raise InputError(f"system {entry.name!r}: unknown primary {entry.primary!r}; registered: "
                         f"{', '.join(PRIMARIES)}")
    if entry.body not in BODIES:
        raise InputError(f"system {entry.name!r}: body must be one of {', '.join(BODIES)}, got {entry.body!r}")
    if entry.body == "mini" and PRIMARIES[entry.primary].aux_head_layer(Depths()) is None:
        raise InputError(f"system {entry.name!r}: body 'mini' needs a primary with a second MLM head")
    SYSTEMS[entry.name] = entry
    return entry


def systems_with_body(body: str) -> list[str]:
    """The registered systems whose Step 2 trains over ``body`` (one of ``BODIES``)."""
    return [name for name in system_names() if SYSTEMS[name].body == body]


def load_plugins() -> None:
    """Import the modules named in ``DS_MINIMODEL_PLUGINS`` once; each registers its entries when imported."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name in filter(None, (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise InputError(f"{PLUGINS_ENV}: cannot import {name!r}: {err}") from None


DEPTH_FAMILY, AT = "minijoint", "@"
"""``minijoint@N``: MiniJoint with the second head after layer N (1 <= N <= the primary's layers; at N = layers both
heads read the top layer, the paper's "virtually equivalent to BL_BASE", footnote 7)."""


def depth_of(name: str) -> int | None:
    """N of a depth-study name ``minijoint@N``; None for every other name."""
    family, at, n = name.partition(AT)
    if family == DEPTH_FAMILY and at and n.isdigit() and n == str(int(n)) and int(n) >= 1:
        return int(n)
    return None


def _register_depth_variant(name: str) -> bool:
    """Register the primary and the system of ``minijoint@N`` (once); False when ``name`` is not such a name."""
    n = depth_of(name)
    if n is None:
        return False
    if name not in PRIMARIES:
        register(Primary(name, num_layers=lambda d: d.layers, aux_head_layer=lambda d, n=n: n))
    if name not in SYSTEMS:
        register(System(name, f"MiniJoint (N={n})", name, "mini", step2_layers=lambda d, n=n: n,
                        description=f"MiniJoint with its second head after layer {n} (the depth study, section 5.2)"))
    return True


def is_system(name: str) -> bool:
    """Whether ``name`` is a registered system or a depth-study name (which this registers)."""
    load_plugins()
    return name in SYSTEMS or _register_depth_variant(name)


MINI_PREFIX = "mini-"
"""A system's finetuned mini-model (the pipeline's ``source_minis``): Step-3 job ``step3-mini-<system>``, runs in
``step3/<task>/mini-<system>/seed<k>``, scored on the source test files as ``primary`` ``mini-<system>``. Spelled
by ``mini_name`` and read back by ``mini_system`` only."""


def mini_name(system: str) -> str:
    return f"{MINI_PREFIX}{system}"


def mini_system(name: str) -> str | None:
    """The system whose mini-model Step-3 model ``name`` is; None for a primary."""
    system = name.removeprefix(MINI_PREFIX)
    return system if system != name and is_system(system) else None


def system_names() -> list[str]:
    """Every registered system, in registration order (the order of tables and plots)."""
    load_plugins()
    return list(SYSTEMS)


def primary_names() -> list[str]:
    load_plugins()
    return list(PRIMARIES)


def order_key(name: str) -> tuple[int, int, str]:
    """Where ``name`` goes in tables and plots: the registered systems in registration order, then the depth study's
    ``minijoint@N`` by N, then anything else by name."""
    load_plugins()
    if depth_of(name) is not None:
        return (1, depth_of(name), name)
    fixed = [n for n in SYSTEMS if depth_of(n) is None]
    return (0, fixed.index(name), name) if name in fixed else (2, 0, name)


def get_system(name: str, *, source: str = "--system") -> System:
    """The registered system ``name``; an unknown one is refused, named after ``source`` ("" for none)."""
    if not is_system(name):
        raise InputError(f"{source + ': ' if source else ''}unknown system {name!r}; known: {', '.join(SYSTEMS)} "
                         f"and {DEPTH_FAMILY}{AT}N (the second head after layer N)")
    return SYSTEMS[name]


def get_primary(name: str, *, source: str = "--variant") -> Primary:
    """The registered primary ``name``; an unknown one is refused, named after ``source`` ("" for none)."""
    load_plugins()
    if name not in PRIMARIES and not _register_depth_variant(name):
        raise InputError(f"{source + ': ' if source else ''}unknown primary {name!r}; known: {', '.join(PRIMARIES)}")
    return PRIMARIES[name]


BASELINE = "bl_base"
"""The system speedups are measured against (the paper's BL_BASE)."""

register(Primary("base", num_layers=lambda d: d.layers))
register(Primary("small", num_layers=lambda d: d.small))
register(Primary("minijoint", num_layers=lambda d: d.layers, aux_head_layer=lambda d: d.aux))
# Standard adaptation (Artetxe et al., 2020) over the whole primary ...
register(System("bl_base", "BL_BASE", "base", "primary", step2_layers=lambda d: d.layers,
                description="standard adaptation over the whole primary"))
# ... and over a shallow model used end to end.
register(System("bl_small", "BL_SMALL", "small", "primary", step2_layers=lambda d: d.small,
                description="a shallow model pretrained, adapted and finetuned end to end"))
# Dual-head pretraining; Step 2 over the bottom N layers and the second head.
register(System("minijoint", "MiniJoint", "minijoint", "mini", step2_layers=lambda d: d.aux,
                description="second MLM head after layer N during pretraining; Step 2 over the layers below it"))
# Plain pretraining; Step 1b trains new layers over N frozen ones; Step 2 over N + new layers.
register(System("minipost", "MiniPost", "base", "step1b", step2_layers=lambda d: d.keep + d.new,
                description="bottom N layers of a pretrained model plus new layers trained in Step 1b"))

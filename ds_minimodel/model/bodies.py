"""What Step 2 trains over, as behaviour: one entry per body kind of the registry (``systems.BODIES``).

A system names its body kind; the entry here says which checkpoints can be that body and how the body is made from
them (``take``: Step 2 on a loaded checkpoint), and how it is cut from a model of the system's primary shape
(``cut``: the benchmark builds it from fresh weights). Nothing else compares body names.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.transforms import build_minipost, drop_aux_head, extract_minijoint
from ds_minimodel.systems import Depths, System, systems_with_body
from ds_minimodel.train.checkpoint import Kind

MINI_KINDS = (Kind.MINIJOINT_MINI, Kind.MINIPOST_MINI)


@dataclass(frozen=True)
class Body:
    name: str
    take: Callable[[MaskedLM, Kind, Path, System], MaskedLM]
    """(loaded model, its checkpoint kind, its folder, the system) -> the Step-2 body; refuses a wrong checkpoint."""
    cut: Callable[[MaskedLM, Depths], MaskedLM]
    """(a model of the primary's shape, the depths) -> the Step-2 body made from it."""


def _no_dual_head(model: MaskedLM, folder: Path) -> None:
    if model.cfg.aux_head_layer is not None:
        raise InputError(f"{folder}: a MiniJoint model (second head after layer {model.cfg.aux_head_layer}); adapt "
                         f"its mini-model with --system {' or '.join(systems_with_body('mini'))}, or all its layers "
                         f"with --system {' or '.join(systems_with_body('primary'))}")


def _take_primary(model: MaskedLM, kind: Kind, folder: Path, system: System) -> MaskedLM:
    """The whole pretrained model; a MiniJoint primary's second head is dropped (Step 2 reads the top head), so that
    a system can adapt a MiniJoint model over all its layers, as BL_BASE adapts its own."""
    if kind in MINI_KINDS:
        raise InputError(f"{folder}: a {kind.value} model; --system {system.name} trains over a pretrained "
                         "model's body")
    return drop_aux_head(model)


def _take_mini(model: MaskedLM, kind: Kind, folder: Path, system: System) -> MaskedLM:
    if model.cfg.aux_head_layer is not None:
        return extract_minijoint(model)
    if kind != Kind.MINIJOINT_MINI:
        raise InputError(f"{folder}: --system {system.name} needs a MiniJoint checkpoint or its extracted mini-model")
    return model


def _take_step1b(model: MaskedLM, kind: Kind, folder: Path, system: System) -> MaskedLM:
    _no_dual_head(model, folder)
    if kind != Kind.MINIPOST_MINI:
        raise InputError(f"{folder}: --system {system.name} needs the output of run_minipost.py (Step 1b)")
    return model


BODY = {b.name: b for b in (
    Body("primary", _take_primary, lambda model, depths: drop_aux_head(model)),
    Body("mini", _take_mini, lambda model, depths: extract_minijoint(model)),
    Body("step1b", _take_step1b, lambda model, depths: build_minipost(model, keep_layers=depths.keep,
                                                                      new_layers=depths.new)),
)}
"""Every body kind of ``systems.BODIES``, by name (the same kinds: tests/unit/test_surgery.py)."""


def taken_from(model: MaskedLM, body: MaskedLM) -> str | None:
    """The line Step 2 prints when ``body`` was taken from a MiniJoint primary ``model``: which of its two models
    the new rows are learned through (None for a one-head model, taken as it is)."""
    aux, total = model.cfg.aux_head_layer, model.cfg.num_layers
    if aux is None:
        return None
    if body.cfg.num_layers < total:
        return f"a MiniJoint primary: Step 2 trains through its mini-model (layers 1-{aux} and the second head)"
    return (f"a MiniJoint primary: Step 2 trains through all {total} layers and the top head (the second head, "
            f"after layer {aux}, is dropped)")


def body_of(system: System) -> Body:
    return BODY[system.body]

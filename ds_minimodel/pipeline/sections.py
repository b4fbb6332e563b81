"""The pipeline config's stage sections as partial stage specs.

A section (``step1``, ``head``, ``step1b``, ``step2``, ``step3``, a task's ``finetune``) sets some of the fields of
one stage's spec (``stages.specs``), under the spec's names and checked against the spec's own annotations when the
config loads; the plan fills in the rest for each job (paths, the system, the language, the seed) and builds the
spec. A setting is written once, on the spec, with its type, range, default, role and help; a spec field that a
section leaves out (None) keeps the spec's default. The fields the plan sets per job are the section's ``OWNED``:
a config cannot set them.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable
from typing import Any, ClassVar

from ds_minimodel.config import Role, fields_in
from ds_minimodel.stages.specs import RunSpec


class Section:
    """What every section type has (``section`` makes them)."""

    SPEC: ClassVar[type[RunSpec]]
    """The stage spec whose fields this section sets."""
    OWNED: ClassVar[frozenset[str]]
    """The spec's fields the plan sets for each job (and the spec's places: out, resume, ...)."""
    EXTRA: ClassVar[frozenset[str]]
    """The section's own fields, not the spec's (``step3.seeds``)."""

    def values(self) -> dict[str, Any]:
        """The spec fields this section sets, by name (None: not set, the spec's default holds)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if f.name not in self.EXTRA and getattr(self, f.name) is not None}

    def get(self, name: str) -> Any:
        """Spec field ``name`` as a job of this section gets it: set here, else the spec's default."""
        value = getattr(self, name)
        return value if value is not None else self.SPEC.defaults().get(name)

    def spec(self, source: str, *, leave_out: Iterable[str] = (), **job: Any) -> RunSpec:
        """The whole spec of one job: this section's values (but ``leave_out``: options the job's initialiser does
        not take) and the plan's ``job`` values, each checked as a spec file's are (errors name ``source``)."""
        left_out = set(leave_out)
        values = {key: value for key, value in self.values().items() if key not in left_out}
        return self.SPEC.from_dict({**values, **job}, source)


def section(spec: type[RunSpec], name: str, *, owned: Iterable[str], required: dict[str, Any] | None = None,
            defaults: dict[str, Any] | None = None, extra: Iterable[tuple[str, Any, Any]] = ()) -> type[Section]:
    """A section type over ``spec``: every field of the spec but its places and ``owned``, each optional with the
    spec's annotation (a path is a string in a config file), but those in ``required`` ({field: annotation}: the
    pipeline needs them set); ``defaults``: the pipeline's own where it differs from the spec's; ``extra``: the
    section's own fields ((name, annotation, dataclasses.field))."""
    required, defaults, owned = required or {}, defaults or {}, frozenset(owned)
    places = fields_in(spec, Role.PLACE)
    hints = typing.get_type_hints(spec, include_extras=True)
    fields: list[Any] = [(key, hint) for key, hint in required.items()]
    for f in dataclasses.fields(spec):
        if f.name in owned or f.name in required or f.name in places:
            continue
        hint = str if f.name in spec.path_fields() else hints[f.name]
        fields.append((f.name, hint | None, dataclasses.field(default=defaults.get(f.name))))
    fields += list(extra)
    cls = dataclasses.make_dataclass(name, fields, bases=(Section,), frozen=True, kw_only=True)
    cls.__module__ = __name__
    cls.SPEC, cls.OWNED, cls.EXTRA = spec, owned | places, frozenset(key for key, *_ in extra)
    return cls

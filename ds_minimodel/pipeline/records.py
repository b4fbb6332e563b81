"""What Step 4 writes and the analysis reads, as typed records: a pipeline's ``results.json`` parsed once.

A score record is one finetuned model (Step 3, one seed) scored on one test file, with a Step-2 checkpoint's embeddings
swapped in (``system`` set: the zero-shot runs, the further Step-2 runs, the source-relearn control, the pretraining
runs' finals) or with its own (``primary`` set: each finetuned model on the source test files). Its metrics are the task
kind's (``tasks.formats``: accuracy and macro-F1 for classification, accuracy for tagging, F1 and exact match for QA),
kept flat in the file as the pipeline has always written them. A mean record is one Step-2 checkpoint's mean over
finetuning seeds (a point of the paper's Figure 3). ``Results.load`` refuses a file that does not hold these, naming the
file, the list and the position; ``Results.write`` writes the file the pipeline always wrote, byte for byte.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pydantic

from ds_minimodel.config import read_json, type_adapter, write_json
from ds_minimodel.errors import InputError

METRICS = ("accuracy", "macro_f1", "f1", "exact_match")
"""Every metric a task kind scores (``tasks.formats.score``, ``tasks.qa``)."""


class _Record:
    """Flat JSON objects as frozen dataclasses: each field checked against its annotation by JSON's own rules; the
    keys in ``FLAT`` (metrics, baselines' scores) gathered into the dict field of that name."""

    FLAT: ClassVar[tuple[str, tuple[str, ...]] | None] = None
    """(the dict field, the keys it gathers), or None."""

    @classmethod
    def from_dict(cls, data: Any, where: str) -> typing.Self:
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        if cls.FLAT is not None:
            name, keys = cls.FLAT
            values[name] = {k: _checked(float, data[k], where, k) for k in keys if k in data}
        unknown = sorted(set(data) - set(fields) - set(cls.FLAT[1] if cls.FLAT else ()))
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}")
        for name, f in fields.items():
            if cls.FLAT is not None and name == cls.FLAT[0]:
                continue
            if name in data:
                values[name] = _checked(hints[name], data[name], where, name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{where}: missing key {name!r}")
        return cls(**values)

    ALWAYS: ClassVar[frozenset[str]] = frozenset()
    """Fields its writer always writes, None as null; any other field is written only when set."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, its flat keys inline."""
        flat = self.FLAT[0] if self.FLAT else None
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != flat and (getattr(self, f.name) is not None or f.name in self.ALWAYS)}
        return {**out, **(getattr(self, flat) if flat else {})}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # once per record type, not per record


def _checked(hint: Any, value: Any, where: str, name: str) -> Any:
    try:  # JSON's own rules, strictly: no "3" for 3, no true for 1
        return type_adapter(hint).validate_json(json.dumps(value), strict=True)
    except pydantic.ValidationError as err:
        problem = err.errors()[0]["msg"]
        raise InputError(f"{where}: {name}: {problem[0].lower() + problem[1:]} (got {value!r})") from None


@dataclass(frozen=True)
class Score(_Record):
    """One Step-4 score (see the module's docstring)."""

    FLAT: ClassVar = ("metrics", METRICS)
    ALWAYS: ClassVar = frozenset({"seed"})

    task: str
    lang: str
    """the test file's language, as results name it (the source-relearn control's: ``<source>-relearn``)"""
    seed: int | None
    """the finetuning seed"""
    metrics: dict[str, float] = field(default_factory=dict)
    n: int | None = None
    """examples scored"""
    test_file: str | None = None
    task_model: str | None = None
    system: str | None = None
    embeddings: str | None = None
    step2_update: int | None = None
    step2_flops: float | None = None
    v100_days: float | None = None
    primary: str | None = None
    """with its own embeddings: the finetuned model's name (a primary, or ``mini-<system>``)"""
    pretrain_seed: int | None = None
    """a pretraining run's final scores (``pretrain_runs``): its Step-1 seed"""
    step2_seed: int | None = None
    """a further Step-2 run's scores (``step2_runs``): its Step-2 seed"""

    @property
    def metric(self) -> str:
        """The paper's headline metric: accuracy for classification and tagging, F1 for QA."""
        return "accuracy" if "accuracy" in self.metrics else "f1"

    @property
    def score(self) -> float:
        """The headline metric's value."""
        return self.metrics[self.metric]


@dataclass(frozen=True)
class MeanScore(_Record):
    """One Step-2 checkpoint's score, mean and sample standard deviation over finetuning seeds."""

    task: str
    system: str
    lang: str
    step2_update: int
    step2_flops: float
    v100_days: float
    metric: str
    mean: float
    std: float
    seeds: list[int]
    step2_seed: int | None = None
    """a further Step-2 run's (``step2_runs_over_seeds``): its Step-2 seed"""


@dataclass(frozen=True)
class DevScore(_Record):
    """A finetuned model's score on the source language's dev file, written by Step 3."""

    FLAT: ClassVar = ("metrics", METRICS)
    ALWAYS: ClassVar = frozenset({"language", "file"})

    task: str
    primary: str
    seed: int
    language: str | None = None
    file: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DevChoice(_Record):
    """The Step-2 checkpoint a target language's dev file chooses for one task, system and Step-2 run
    (``pipeline.dev_choice``), with dev and test read at it and at the run's last checkpoint, each a mean over
    finetuning seeds."""

    ALWAYS: ClassVar = frozenset({"test_mean", "test_std", "test_last", "test_selected", "test_selected_last"})

    task: str
    system: str
    lang: str
    selected_on: str
    """the metric the choice maximises on dev"""
    step2_update: int
    """the chosen checkpoint's update (the earliest of equal dev scores)"""
    embeddings: str
    """the chosen checkpoint"""
    dev: float
    dev_last: float
    last_update: int
    metric: str
    """the headline metric the test columns hold"""
    test_mean: float | None
    """None: the task has no test file in the language"""
    test_std: float | None
    test_last: float | None
    test_selected: float | None
    """the selection metric on test at the chosen checkpoint (None: no test file)"""
    test_selected_last: float | None
    step2_seed: int | None = None
    """a further Step-2 run's choice (``step2_seeds``): its Step-2 seed; None for the main run's"""
    seed: int | None = None
    """the finetuning seed whose classifier reads dev best at the chosen checkpoint (the lowest of equals): with
    ``task_model``, its Step-3 model, the pair ``hf export`` makes a model of (None in files written before it)"""
    task_model: str | None = None


TRIVIAL = ("majority", "bag_of_words")
"""The trivial baselines of a test file (``tasks.baselines``)."""


@dataclass(frozen=True)
class Baseline(_Record):
    """The trivial baselines' scores on one dev or test file."""

    FLAT: ClassVar = ("scores", TRIVIAL)

    task: str
    lang: str
    split: str
    file: str | None = None
    scores: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Results:
    """A pipeline's results.json."""

    zero_shot: list[Score]
    zero_shot_over_seeds: list[MeanScore]
    source_dev: list[DevScore] = field(default_factory=list)
    source_test: list[Score] = field(default_factory=list)
    source_relearn: list[Score] = field(default_factory=list)
    source_relearn_over_seeds: list[MeanScore] = field(default_factory=list)
    baselines: list[Baseline] = field(default_factory=list)
    pretrain_runs: list[Score] = field(default_factory=list)
    step2_runs: list[Score] = field(default_factory=list)
    """every further Step-2 run's scores (``step2_seeds``), as ``zero_shot`` holds the main run's"""
    step2_runs_over_seeds: list[MeanScore] = field(default_factory=list)
    zero_shot_dev: list[Score] = field(default_factory=list)
    """every Step-2 run's checkpoints scored on the target languages' dev files, where the task has them (a further
    run's with its ``step2_seed``)"""
    chosen_on_dev: list[DevChoice] = field(default_factory=list)
    source_model: dict[str, Any] | None = None
    """the given English model BL_BASE's primary is (``pipeline.source_model``), or None when Step 1 trained it"""

    KINDS: ClassVar[dict[str, type[_Record]]] = {
        "zero_shot": Score, "zero_shot_over_seeds": MeanScore, "source_dev": DevScore, "source_test": Score,
        "source_relearn": Score, "source_relearn_over_seeds": MeanScore, "baselines": Baseline,
        "pretrain_runs": Score, "step2_runs": Score, "step2_runs_over_seeds": MeanScore, "zero_shot_dev": Score,
        "chosen_on_dev": DevChoice}
    WHEN_SET: ClassVar[frozenset[str]] = frozenset({"step2_runs", "step2_runs_over_seeds", "zero_shot_dev",
                                                    "chosen_on_dev"})
    """Lists written only when they hold something: a file without further Step-2 runs or target dev files is as it
    was before them."""

    @classmethod
    def load(cls, path: Path) -> Results:
        return cls.from_dict(read_json(path), str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str) -> Results:
        if not isinstance(data, dict) or not isinstance(data.get("zero_shot_over_seeds"), list):
            raise InputError(f"{source}: no 'zero_shot_over_seeds' list; is this a results.json written by "
                             "python -m ds_minimodel pipeline?")
        unknown = sorted(set(data) - set(cls.KINDS) - {"source_model"})
        if unknown:
            raise InputError(f"{source}: unknown key(s) {', '.join(unknown)}")
        lists = {}
        for key, kind in cls.KINDS.items():
            rows = data.get(key, [])
            if not isinstance(rows, list):
                raise InputError(f"{source}: {key}: expected a list, got {type(rows).__name__}")
            lists[key] = [kind.from_dict(row, f"{source}: {key}[{i}]") for i, row in enumerate(rows)]
        source_model = data.get("source_model")
        if source_model is not None and not isinstance(source_model, dict):
            raise InputError(f"{source}: source_model: expected a JSON object or null")
        return cls(**lists, source_model=source_model)

    def to_dict(self) -> dict[str, Any]:
        return {**{key: [r.to_dict() for r in getattr(self, key)] for key in self.KINDS
                    if getattr(self, key) or key not in self.WHEN_SET}, "source_model": self.source_model}

    def write(self, path: Path) -> None:
        write_json(path, self.to_dict())

"""A downstream task as Steps 3 and 4 see it: read a file in its distributed format, turn it into model inputs,
compute the loss, predict, and score.

| format    | files                                              | model head | metric                |
|-----------|----------------------------------------------------|------------|-----------------------|
| generic   | JSONL/TSV with text, optional text_pair, label     | sequence   | accuracy, macro-F1    |
| multinli  | MultiNLI JSONL (English training data for XNLI)    | sequence   | accuracy, macro-F1    |
| xnli      | XNLI-1.0 xnli.{dev,test}.tsv, language column      | sequence   | accuracy, macro-F1    |
| pawsx     | PAWS-X <lang>/{train,dev_2k,test_2k}.tsv           | sequence   | accuracy, macro-F1    |
| conllu    | CoNLL-U, UPOS column                               | token      | accuracy over words   |
| squad     | SQuAD v1.1 JSON (SQuAD, MLQA, XQuAD)               | span       | F1, exact match (MLQA)|
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ds_minimodel.data.streams import trim_padding
from ds_minimodel.data.tokenizer import IGNORE_INDEX, AnyTokenizer
from ds_minimodel.errors import InputError, require_file
from ds_minimodel.model.encoder import POOLINGS, TaskModel
from ds_minimodel.model.loading import TaskHead, load
from ds_minimodel.tasks import qa, readers
from ds_minimodel.tasks.features import classification_features, token_classification_features
from ds_minimodel.train import checkpoint


@dataclass(frozen=True)
class TaskFormat:
    """One task format (a row of the table above): how its files are read and what kind of head it trains."""

    name: str
    kind: str
    """The head it trains: ``sequence``, ``token`` or ``span`` (``model.encoder.TASK_KINDS``)."""
    read: Callable[[Path, Sequence[str] | None, str | None, bool], readers.Examples]
    """(path, training labels or None, language or None, whether it is a training file) -> examples."""

    @property
    def main_metric(self) -> str:
        return KINDS[self.kind].main_metric


def _needs_language(path: Path, language: str | None) -> str:
    if language is None:
        raise InputError(f"{path}: an XNLI file holds every language; say which (language)")
    return language


FORMATS: dict[str, TaskFormat] = {f.name: f for f in (
    TaskFormat("generic", "sequence", lambda path, labels, lang, training: readers.read_generic(path, labels)),
    TaskFormat("multinli", "sequence", lambda path, labels, lang, training: readers.read_multinli_jsonl(path)),
    TaskFormat("xnli", "sequence",
               lambda path, labels, lang, training: readers.read_xnli_tsv(path, _needs_language(path, lang))),
    TaskFormat("pawsx", "sequence",
               lambda path, labels, lang, training: readers.read_pawsx_tsv(path, skip_empty=training)),
    TaskFormat("conllu", "token", lambda path, labels, lang, training: readers.read_conllu(path)),
    TaskFormat("squad", "span", lambda path, labels, lang, training: readers.read_squad(path, strict=training)),
)}
"""Every task format, by name: a new format is one entry here (and its reader in ``tasks.readers``)."""
KIND_OF_FORMAT = {name: f.kind for name, f in FORMATS.items()}


@dataclass(frozen=True)
class TaskSpec:
    """What Step 3 trains and Step 4 evaluates; stored in the finetuned model's meta.json."""

    name: str
    format: str
    labels: list[str] = field(default_factory=list)
    """Class names (sequence) or tags (token), in the order of the head's outputs; empty for span."""
    max_len: int = 128
    doc_stride: int = 128
    pooling: str = "cls"
    """Sequence tasks: the vector the classifier reads, ``cls`` (the <s> position, RoBERTa) or ``mean`` (the mean
    over real tokens: positions that MLM pretraining and Step 2 both trained)."""

    def __post_init__(self) -> None:
        if self.format not in KIND_OF_FORMAT:
            raise InputError(f"task {self.name}: unknown format {self.format!r}; known: {', '.join(KIND_OF_FORMAT)}")
        if self.pooling not in POOLINGS:
            raise InputError(f"task {self.name}: unknown pooling {self.pooling!r}; known: {', '.join(POOLINGS)}")

    @property
    def kind(self) -> str:
        return KIND_OF_FORMAT[self.format]

    @property
    def head(self) -> TaskHead:
        """The head a model finetuned on this task has (what ``model.loading`` rebuilds from meta.json)."""
        return TaskHead(self.kind, tuple(self.labels), self.pooling)

    @property
    def num_labels(self) -> int:
        return self.head.num_labels

    def to_dict(self) -> dict[str, Any]:
        """What a task model's meta.json records as ``task``; ``kind`` is how ``model.loading`` rebuilds its head."""
        return {"name": self.name, "format": self.format, "kind": self.kind, "labels": self.labels,
                "max_len": self.max_len, "doc_stride": self.doc_stride, "pooling": self.pooling}


def task_spec(meta: checkpoint.Record, folder: Path) -> TaskSpec:
    """A finetuned task model's ``TaskSpec`` from its meta.json."""
    task = dict(meta.details.get("task") or {})
    task.pop("kind", None)  # follows from the format (and was not recorded before)
    try:
        return TaskSpec(**task)
    except TypeError as err:
        raise InputError(f"{Path(folder) / checkpoint.META}: task description incomplete ({err})") from None


def load_task_model(folder: Path) -> tuple[TaskModel, TaskSpec, checkpoint.Record]:
    """A finetuned task model: (model, its ``TaskSpec``, meta)."""
    model, meta = load(folder)
    if not isinstance(model, TaskModel):
        raise InputError(f"{Path(folder) / checkpoint.META}: not a finetuned task model "
                         f"(kind {meta.kind.value!r})")
    return model, task_spec(meta, folder), meta


def read_examples(fmt: str, path: Path, *, labels: Sequence[str] | None = None, language: str | None = None,
                  training: bool = False) -> readers.Examples:
    """Examples of one file. Evaluation files are read with the training file's labels, so an unknown label there
    is an error naming the file and line."""
    path = require_file(path, "task file")
    if fmt not in FORMATS:
        raise InputError(f"{path}: unknown task format {fmt!r}; known: {', '.join(FORMATS)}")
    examples = FORMATS[fmt].read(path, labels, language, training)
    if training and examples.labels is not None and len(examples.labels) < 2:
        raise InputError(f"{path}: every training example has the label {examples.labels[0]!r}: a classifier needs "
                         "at least two labels to learn anything")
    return examples


def read_eval_examples(spec: TaskSpec, fmt: str | None, path: Path, language: str | None) -> readers.Examples:
    """A dev or test file, read with the training labels, in ``fmt`` (default: the training format) which must
    give the same kind of task (XNLI's TSV after MultiNLI's JSONL, MLQA after SQuAD)."""
    fmt = fmt or spec.format
    if fmt not in KIND_OF_FORMAT or KIND_OF_FORMAT[fmt] != spec.kind:
        raise InputError(f"{path}: format {fmt!r} does not fit task {spec.name!r}, trained as {spec.format!r} "
                         f"({spec.kind}); use one of: "
                         + ", ".join(f for f, kind in KIND_OF_FORMAT.items() if kind == spec.kind))
    return read_examples(fmt, path, labels=spec.labels or None, language=language)


def task_labels(fmt: str, examples: readers.Examples) -> list[str]:
    """The head's outputs a training file gives (``TaskKind.labels``)."""
    return KINDS[KIND_OF_FORMAT[fmt]].labels(examples)


@dataclass
class Features:
    arrays: dict[str, np.ndarray]
    """Model inputs and targets, one row per model input."""
    windows: list[Any] = field(default_factory=list)
    """QA only: the context windows behind each row, for turning logits back into answer text."""


def featurize(spec: TaskSpec, examples: Sequence[Any], tokenizer: AnyTokenizer) -> Features:
    return KINDS[spec.kind].featurize(spec, examples, tokenizer)


def task_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Cross-entropy for whichever head the model has (its ``kind``)."""
    logits = model(batch["input_ids"], batch["attention_mask"]).float()
    if "start_positions" in batch:  # span: mean of the start and end losses, as in BERT's SQuAD recipe
        loss = (F.cross_entropy(logits[..., 0], batch["start_positions"]) +
                F.cross_entropy(logits[..., 1], batch["end_positions"])) / 2
    else:  # sequence (B, C) vs (B,), or token (B, S, C) vs (B, S) with IGNORE_INDEX off the first pieces
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1),
                               ignore_index=IGNORE_INDEX)
    return {"loss": loss}


@torch.no_grad()
def predict(model: torch.nn.Module, arrays: dict[str, np.ndarray], *, batch_size: int = 64) -> np.ndarray:
    """Logits for every row, in eval mode, in the rows' order.

    Rows are batched by length (longest first), each batch cut to its longest input (``trim_padding``): a lohelp
    test file averages 27 of 128 tokens but nearly every batch of 64 in file order holds one long input, so batches
    in file order cost about four times the compute (measured: 16 s against 4 s for German test on the reference
    body, one thread). The outputs of the real positions do not depend on the padding."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    width = arrays["input_ids"].shape[1]
    order = np.argsort(-arrays["attention_mask"].sum(1), kind="stable")  # longest first: the first batch is the peak
    out = []
    try:
        for start in range(0, len(order), batch_size):
            picked = order[start:start + batch_size]
            rows = trim_padding({k: arrays[k][picked] for k in ("input_ids", "attention_mask")})
            ids = torch.from_numpy(rows["input_ids"]).to(device)
            mask = torch.from_numpy(rows["attention_mask"]).to(device)
            logits = model(ids, mask).float().cpu().numpy()
            if logits.ndim == 3 and logits.shape[1] < width:  # per-position logits back to the features' width
                logits = np.pad(logits, ((0, 0), (0, width - logits.shape[1]), (0, 0)))
            out.append(logits)
    finally:
        model.train(was_training)
    logits = np.concatenate(out) if out else np.zeros((0,))
    restored = np.empty_like(logits)
    restored[order] = logits  # back to the rows' order
    return restored


def macro_f1(gold: np.ndarray, pred: np.ndarray, num_labels: int) -> float:
    """Unweighted mean of per-class F1 over the classes present in gold or predictions."""
    scores = []
    for c in range(num_labels):
        tp = np.sum((pred == c) & (gold == c))
        fp, fn = np.sum((pred == c) & (gold != c)), np.sum((pred != c) & (gold == c))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def score(spec: TaskSpec, examples: Sequence[Any], features: Features, logits: np.ndarray, lang: str
          ) -> dict[str, float]:
    """The task's metrics in percent."""
    return KINDS[spec.kind].score(spec, examples, features, logits, lang)


# ----------------------------------------------------------------------------------------------- kinds of task
@dataclass(frozen=True)
class TaskKind:
    """What a kind of task does beyond reading its files (``TaskFormat.read``): the labels its head outputs, its
    model inputs, its scores. The head itself is the model's (``model.encoder.TaskModel``, by the same name). A new
    kind is one entry in ``KINDS`` with its head there."""

    name: str
    main_metric: str
    """The paper's headline metric for it."""
    labels: Callable[[readers.Examples], list[str]]
    featurize: Callable[[TaskSpec, Sequence[Any], AnyTokenizer], Features]
    score: Callable[[TaskSpec, Sequence[Any], Features, np.ndarray, str], dict[str, float]]
    windows: bool = False
    """Long inputs are cut into overlapping windows (``doc_stride``) around a question of bounded length."""


def _token_labels(examples: readers.Examples) -> list[str]:
    seen = {tag for example in examples for tag in example.tags}
    return [t for t in readers.UPOS if t in seen]  # read_conllu refuses any other UPOS tag


def _token_features(spec: TaskSpec, examples: Sequence[Any], tokenizer: AnyTokenizer) -> Features:
    arrays, _ = token_classification_features(examples, tokenizer, spec.labels, max_len=spec.max_len)
    return Features(arrays)


def _span_features(spec: TaskSpec, examples: Sequence[Any], tokenizer: AnyTokenizer) -> Features:
    windows = [w for example in examples
               for w in qa.qa_features(example, tokenizer, max_len=spec.max_len, doc_stride=spec.doc_stride)]
    return Features(qa.stack_qa_windows(windows), windows)


def _sequence_score(spec: TaskSpec, examples: Sequence[Any], features: Features, logits: np.ndarray, lang: str
                    ) -> dict[str, float]:
    gold, pred = features.arrays["labels"], logits.argmax(-1)
    return {"accuracy": 100 * float(np.mean(pred == gold)), "macro_f1": 100 * macro_f1(gold, pred, spec.num_labels)}


def _token_score(spec: TaskSpec, examples: Sequence[Any], features: Features, logits: np.ndarray, lang: str
                 ) -> dict[str, float]:
    gold, pred = features.arrays["labels"], logits.argmax(-1)
    words = gold != IGNORE_INDEX
    return {"accuracy": 100 * float(np.mean(pred[words] == gold[words]))}


def _span_score(spec: TaskSpec, examples: Sequence[Any], features: Features, logits: np.ndarray, lang: str
                ) -> dict[str, float]:
    answers = qa.postprocess_qa(features.windows, logits[..., 0], logits[..., 1])
    return qa.evaluate_qa(answers, examples, lang)


KINDS: dict[str, TaskKind] = {k.name: k for k in (
    TaskKind("sequence", "accuracy", lambda examples: list(examples.labels),
             lambda spec, examples, tokenizer: Features(classification_features(examples, tokenizer,
                                                                                max_len=spec.max_len)),
             _sequence_score),
    TaskKind("token", "accuracy", _token_labels, _token_features, _token_score),
    TaskKind("span", "f1", lambda examples: [], _span_features, _span_score, windows=True),
)}
"""Every kind of task, by the name of the head it trains (``model.encoder.TASK_KINDS``)."""

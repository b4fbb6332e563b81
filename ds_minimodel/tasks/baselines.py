"""Trivial reference scores for a task, next to which the model's scores are read (issue 16).

- **majority class**: always predict the training file's most common label (sequence tasks) or tag (token tasks).
  A zero-shot score at or below it means no transfer, whatever a speedup computed from it would say.
- **bag of words**: multinomial Naive Bayes on lower-cased word tokens of the training file (sequence tasks), add-one
  smoothing. In the training language it says how good a body must be to be worth adapting; in another language it
  is what surface overlap alone (names, numbers, code) gives without any transfer.

Scores are percentages, as ``task.score`` gives them. QA has no trivial class: it gets no baseline.
"""
from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ds_minimodel.errors import InputError, report
from ds_minimodel.tasks.formats import KIND_OF_FORMAT, read_examples
from ds_minimodel.tasks.readers import ClassificationExample, TokenExample

_WORD = re.compile(r"\w+", re.UNICODE)


def _words(example: ClassificationExample) -> list[str]:
    text = example.text if example.text_pair is None else f"{example.text} {example.text_pair}"
    return _WORD.findall(text.lower())


def majority_accuracy(train: Sequence[Any], test: Sequence[Any]) -> float | None:
    """Accuracy of always predicting the training set's most common label (tag, for token tasks)."""
    if train and isinstance(train[0], ClassificationExample):
        majority = Counter(e.label for e in train).most_common(1)[0][0]
        return 100 * float(np.mean([e.label == majority for e in test]))
    if train and isinstance(train[0], TokenExample):
        majority = Counter(t for e in train for t in e.tags).most_common(1)[0][0]
        tags = [t for e in test for t in e.tags]
        return 100 * float(np.mean([t == majority for t in tags]))
    return None


def naive_bayes_accuracy(train: Sequence[Any], test: Sequence[Any]) -> float | None:
    """Accuracy of a multinomial Naive Bayes over lower-cased words, trained on ``train`` (sequence tasks only)."""
    if not train or not isinstance(train[0], ClassificationExample):
        return None
    num_labels = 1 + max(max(e.label for e in train), max(e.label for e in test))
    vocab: dict[str, int] = {}
    counts: list[Counter] = [Counter() for _ in range(num_labels)]
    for e in train:
        for w in _words(e):
            counts[e.label][vocab.setdefault(w, len(vocab))] += 1
    table = np.ones((num_labels, len(vocab)))  # add-one smoothing
    for label, c in enumerate(counts):
        table[label, list(c)] += list(c.values())
    log_likelihood = np.log(table / table.sum(1, keepdims=True))  # (labels, words)
    prior = np.bincount([e.label for e in train], minlength=num_labels) + 1.0
    log_prior = np.log(prior / prior.sum())
    correct = 0
    for e in test:
        ids = [vocab[w] for w in _words(e) if w in vocab]  # unseen words carry no evidence
        correct += int(np.argmax(log_prior + log_likelihood[:, ids].sum(1)) == e.label)
    return 100 * correct / len(test)


def baselines(train: Sequence[Any], test: Sequence[Any]) -> dict[str, float]:
    """The trivial scores that apply to this task: {"majority": ..., "bag_of_words": ...}, each when defined."""
    scores = {"majority": majority_accuracy(train, test), "bag_of_words": naive_bayes_accuracy(train, test)}
    return {k: v for k, v in scores.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    """``python -m ds_minimodel baselines --format generic --train train.en.jsonl dev.de.jsonl ...``"""
    p = argparse.ArgumentParser(prog="ds-minimodel baselines",
                                description="Majority-class and bag-of-words scores of evaluation files.")
    p.add_argument("--format", choices=sorted(KIND_OF_FORMAT), required=True, help="the task files' format")
    p.add_argument("--train", type=Path, required=True, help="the training file (its majority class and words)")
    p.add_argument("--language", help="the language to read from files that hold several (XNLI's TSV files)")
    p.add_argument("files", type=Path, nargs="+", help="dev or test files in the same format")
    args = p.parse_args(argv)
    try:
        train = read_examples(args.format, args.train, language=args.language, training=True)
        for path in args.files:
            scores = baselines(train, read_examples(args.format, path, labels=train.labels, language=args.language))
            print(f"{path}: " + ", ".join(f"{name} {value:.1f}" for name, value in scores.items()))
    except InputError as err:
        return report(err)
    return 0

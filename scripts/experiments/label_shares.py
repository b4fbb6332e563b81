#!/usr/bin/env python
"""Which labels does a classifier predict, against the labels the file holds? (RESULTS.md, issue 16)

    python scripts/experiments/label_shares.py --task-model STEP3_CHECKPOINT [--embeddings STEP2_CHECKPOINT ...] \
        --file DEV_FILE --lang de

Accuracy alone hides a classifier that predicts one or two labels for everything: on a file whose commonest label
differs from the training file's, such a classifier can score far above the majority-class baseline (which predicts
the *training* file's commonest label) without reading the text. One JSON record per embeddings: the file's label
shares, the predicted label shares, accuracy, macro-F1, and the accuracy of the best constant prediction for this
file (its own commonest label: an oracle, since it reads the file's labels).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ds_minimodel.errors import InputError, report  # noqa: E402
from ds_minimodel.tasks.evaluate import predict_zero_shot  # noqa: E402
from ds_minimodel.tasks.formats import score  # noqa: E402


def shares(indices, labels: list[str]) -> dict[str, float]:
    counts = Counter(int(i) for i in indices)
    return {label: round(100 * counts[i] / len(indices), 1) for i, label in enumerate(labels)}


def label_shares(task_folder: Path, embeddings: Path | None, path: Path, lang: str) -> dict:
    p = predict_zero_shot(task_folder, embeddings, path, lang)
    if p.spec.kind != "sequence":
        raise InputError(f"{task_folder}: a {p.spec.kind} task; label shares are for sequence classification")
    record = {"task_model": str(task_folder), "file": str(path), "lang": lang,
              **({"embeddings": str(embeddings)} if embeddings is not None else {})}
    gold_shares = shares(p.features.arrays["labels"], p.spec.labels)
    return {**record, **score(p.spec, p.examples, p.features, p.logits, lang), "gold": gold_shares,
            "predicted": shares(p.logits.argmax(-1), p.spec.labels), "best_constant": max(gold_shares.values())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task-model", type=Path, required=True, help="finetuned model folder (Step 3)")
    p.add_argument("--embeddings", type=Path, nargs="*", default=[], help="Step-2 checkpoints; none: own embeddings")
    p.add_argument("--file", type=Path, required=True, help="a dev or test file of the task")
    p.add_argument("--lang", required=True)
    args = p.parse_args(argv)
    try:
        for emb in args.embeddings or [None]:
            print(json.dumps(label_shares(args.task_model, emb, args.file, args.lang)), flush=True)
    except InputError as err:
        return report(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())

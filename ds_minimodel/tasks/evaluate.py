"""Step 4: zero-shot transfer. Swap a language's embeddings (and tokenizer) into a finetuned task model and score
it on that language's test set (``python -m ds_minimodel evaluate``).

Evaluating every saved Step-2 checkpoint gives the training curves behind the paper's Figure 3 and Table 3.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ds_minimodel.data.tokenizer import load_tokenizer
from ds_minimodel.errors import InputError, report, require_file
from ds_minimodel.model.surgery import check_fits, load_trained, swap_checked
from ds_minimodel.tasks.formats import (
    KIND_OF_FORMAT,
    Features,
    TaskSpec,
    featurize,
    load_task_model,
    predict,
    read_eval_examples,
    score,
)
from ds_minimodel.train import checkpoint


@dataclass
class ZeroShotPredictions:
    """What a task model predicts on one file with a language's embeddings swapped in, before any metric."""
    record: dict[str, Any]
    spec: TaskSpec
    examples: Sequence[Any]
    features: Features
    logits: np.ndarray


def predict_zero_shot(task_folder: Path, embeddings_folder: Path | None, test_file: Path, lang: str,
                      *, test_format: str | None = None, batch_size: int = 64) -> ZeroShotPredictions:
    """The task model in ``task_folder`` with the embeddings of ``embeddings_folder`` swapped in (None: the
    model's own embeddings), run on ``test_file`` (in ``test_format``, default the training format)."""
    model, spec, meta = load_task_model(task_folder)
    tokenizer_ref = meta.tokenizer_dict
    record: dict[str, Any] = {"task": spec.name, "lang": lang, "test_file": str(test_file),
                              "task_model": str(task_folder), "seed": meta.details.get("seed")}
    if embeddings_folder is not None:
        emb_meta = swap_checked(model, meta, Path(task_folder), Path(embeddings_folder))
        tokenizer_ref = emb_meta.tokenizer_dict
        record.update(embeddings=str(embeddings_folder), system=emb_meta.details.get("system"),
                      step2_update=emb_meta.step, step2_flops=emb_meta.flops)
    tokenizer = load_tokenizer(tokenizer_ref, embeddings_folder or task_folder)
    examples = read_eval_examples(spec, test_format, test_file, lang)
    features = featurize(spec, examples, tokenizer)
    if torch.cuda.is_available():  # Step 4 scores every Step-2 checkpoint: on the GPU where there is one
        model.to("cuda")
    return ZeroShotPredictions(record, spec, examples, features, predict(model, features.arrays,
                                                                         batch_size=batch_size))


def zero_shot(task_folder: Path, embeddings_folder: Path | None, test_file: Path, lang: str,
              *, test_format: str | None = None, batch_size: int = 64) -> dict[str, Any]:
    """Scores of :func:`predict_zero_shot`'s predictions."""
    p = predict_zero_shot(task_folder, embeddings_folder, test_file, lang, test_format=test_format,
                          batch_size=batch_size)
    return {**p.record, "n": len(p.examples), **score(p.spec, p.examples, p.features, p.logits, lang)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task-model", type=Path, required=True, help="finetuned model folder (Step 3)")
    p.add_argument("--embeddings", type=Path, nargs="*", default=[],
                   help="embeddings folders (Step-2 checkpoints); none: the model's own embeddings")
    p.add_argument("--test", type=Path, required=True, help="the target-language file scored")
    p.add_argument("--lang", required=True, help="its language (results name it; XNLI files hold several)")
    p.add_argument("--format", choices=sorted(KIND_OF_FORMAT),
                   help="format of --test when it differs from the training format (e.g. xnli after multinli)")
    args = p.parse_args(argv)
    try:
        task_meta = checkpoint.load_meta(args.task_model)
        hidden = (task_meta.model_config or {}).get("hidden_size")
        for emb in args.embeddings:  # every folder read and checked before the first score is printed
            _, emb_meta = load_trained(emb)
            check_fits(task_meta, hidden, args.task_model, emb, emb_meta)
            trained_for = emb_meta.details.get("lang")
            if trained_for is not None and trained_for != args.lang:
                raise InputError(f"{emb}: embeddings learned for {trained_for!r}, but --lang is {args.lang!r}: the "
                                 f"record would name the wrong language; score {trained_for} files with them")
        require_file(args.test, "task file")
        for emb in args.embeddings or [None]:
            print(json.dumps(zero_shot(args.task_model, emb, args.test, args.lang,
                                                  test_format=args.format), sort_keys=True), flush=True)
    except InputError as err:
        return report(err)
    return 0

#!/usr/bin/env python
"""How much of a task each layer of a body reads: a linear probe per layer (RESULTS.md, "Does the task reward depth").

    python scripts/experiments/layer_probe.py --model MODEL --format generic \
        --train train.en.jsonl --dev dev.en.jsonl --test test.en.jsonl --out probe.jsonl
    python scripts/experiments/layer_probe.py --model MODEL --format conllu --train train.conllu --dev dev.conllu ...

The body is frozen. Its embedding layer's output (layer 0) and every layer's output are read once: for a sequence
task the mean over the input's real tokens (the ``mean`` pooling of Step 3), for a token task the first piece of each
word (Step 3's tagging scheme). Each layer's vectors, standardised on the training set, train a multinomial logistic
regression (full batch, L-BFGS); its L2 weight is chosen from a small grid on ``--dev`` by the task's selection metric
(macro-F1 for sequence tasks, whose dev and test label mixes differ here; accuracy for tagging), and the chosen probe
is read once on ``--test``. Without ``--test`` the weight is chosen on a held-out tenth of the training examples
(every tenth) and ``--dev`` is the score reported.

What it answers: whether the top layer of a body reads a task better than its bottom layers do. Where layer 2 reads
as well as layer 6, a 2-layer model cannot lose to a 6-layer one by depth, whatever their pretraining. Next to each
body, ``--random-init`` gives the same architecture with freshly initialised weights (the probe's usual control:
what a layer reads without any pretraining), and the script prints the lexical baselines (majority class; Naive
Bayes over words for sequence tasks, each word's commonest training tag for tagging). One JSON record per (model,
layer) in ``--out``; a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ds_minimodel.data.streams import trim_padding
from ds_minimodel.data.tokenizer import IGNORE_INDEX, load_tokenizer
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.tasks.baselines import majority_accuracy, naive_bayes_accuracy
from ds_minimodel.tasks.features import classification_features, token_classification_features
from ds_minimodel.tasks.formats import KIND_OF_FORMAT, macro_f1, read_examples, task_labels

WEIGHT_DECAYS = (1e-5, 1e-4, 1e-3, 1e-2)
"""The L2 weights tried per layer (on the standardised features' logistic loss, mean over examples)."""


@torch.no_grad()
def layer_features(model: MaskedLM, arrays: dict[str, np.ndarray], kind: str, *, batch_size: int = 64
                   ) -> tuple[list[np.ndarray], np.ndarray]:
    """([layer 0 (the embeddings' output), layer 1, ..., layer L] as (items, h) float32 arrays, targets (items,)).

    Items are inputs (sequence: the mean over real tokens) or tagged words (token: their first piece), in the
    features' order. Batches are formed longest first and cut to their longest input, as ``tasks.formats.predict``
    does: the real positions' outputs do not depend on the padding."""
    model.eval()
    order = np.argsort(-arrays["attention_mask"].sum(1), kind="stable")
    per_layer: list[list[np.ndarray]] = [[] for _ in range(model.cfg.num_layers + 1)]
    targets, rows_of = [], []
    for start in range(0, len(order), batch_size):
        picked = order[start:start + batch_size]
        rows = trim_padding({k: arrays[k][picked] for k in ("input_ids", "attention_mask", "labels")})
        ids, mask = torch.from_numpy(rows["input_ids"]), torch.from_numpy(rows["attention_mask"])
        outputs = [model.embeddings(ids), *model.hidden_states(ids, mask)]
        if kind == "sequence":
            weights = mask.float()[..., None]
            for layer, x in enumerate(outputs):
                per_layer[layer].append(((x.float() * weights).sum(1) / weights.sum(1).clamp(min=1.0)).numpy())
            targets.append(rows["labels"])
            rows_of.append(picked)
        else:
            tagged = torch.from_numpy(rows["labels"] != IGNORE_INDEX)
            for layer, x in enumerate(outputs):
                per_layer[layer].append(x.float()[tagged].numpy())
            targets.append(rows["labels"][rows["labels"] != IGNORE_INDEX])
            # A word's rank in file order: (row in the file, position), so the items can be put back in order.
            r, c = np.nonzero(rows["labels"] != IGNORE_INDEX)
            rows_of.append(picked[r] * arrays["input_ids"].shape[1] + c)
    back = np.argsort(np.concatenate(rows_of), kind="stable")
    return [np.concatenate(chunks)[back] for chunks in per_layer], np.concatenate(targets)[back]


def fit_probe(x: np.ndarray, y: np.ndarray, num_labels: int, weight_decay: float, *, max_iter: int = 300
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression by full-batch L-BFGS from zero weights (deterministic): (W (h, C), b (C,))."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    w = torch.zeros(x.shape[1], num_labels, requires_grad=True)
    b = torch.zeros(num_labels, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, history_size=20, tolerance_grad=1e-6,
                            tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(xt @ w + b, yt) + weight_decay * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def scores(w: torch.Tensor, b: torch.Tensor, x: np.ndarray, y: np.ndarray, num_labels: int) -> dict[str, float]:
    pred = (torch.from_numpy(x) @ w + b).argmax(-1).numpy()
    return {"accuracy": round(100 * float(np.mean(pred == y)), 2),
            "macro_f1": round(100 * macro_f1(y, pred, num_labels), 2)}


def word_tag_accuracy(train, test) -> float:
    """Each (lower-cased) word's commonest training tag, the commonest tag overall for unseen words: the tagging
    analogue of the bag of words."""
    counts: dict[str, Counter] = {}
    for e in train:
        for word, tag in zip(e.tokens, e.tags):
            counts.setdefault(word.lower(), Counter())[tag] += 1
    default = Counter(t for e in train for t in e.tags).most_common(1)[0][0]
    best = {word: c.most_common(1)[0][0] for word, c in counts.items()}
    pairs = [(best.get(word.lower(), default), tag) for e in test for word, tag in zip(e.tokens, e.tags)]
    return 100 * float(np.mean([p == t for p, t in pairs]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, action="append", required=True,
                   help="a model folder, checkpoint or Hugging Face folder (repeatable)")
    p.add_argument("--format", choices=["generic", "conllu"], required=True)
    p.add_argument("--train", type=Path, required=True)
    p.add_argument("--dev", type=Path, required=True)
    p.add_argument("--test", type=Path, help="read once with the probe --dev chose; without it --dev is read")
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--train-limit", type=int, help="read only the first N training examples (a tagging file's words "
                   "are many: 2,500 Brown sentences give about 45,000)")
    p.add_argument("--random-init", action="store_true", help="also each model's architecture, freshly initialised")
    p.add_argument("--seed", type=int, default=0, help="the random-init control's seed")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    kind = KIND_OF_FORMAT[args.format]
    train = read_examples(args.format, args.train, training=True)
    labels = task_labels(args.format, train)  # from the whole file, so that a rare tag keeps its place
    train = train[:args.train_limit]
    dev = read_examples(args.format, args.dev, labels=labels if kind == "sequence" else None)
    if args.test is not None:
        select, report = dev, read_examples(args.format, args.test, labels=labels if kind == "sequence" else None)
        select_name, report_name = str(args.dev), str(args.test)
    else:  # every tenth training example chooses the weight; dev is the held-out score
        select, report = train[9::10], dev
        train = [e for i, e in enumerate(train) if i % 10 != 9]
        select_name, report_name = f"{args.train} (every tenth example, held out)", str(args.dev)
    metric = "macro_f1" if kind == "sequence" else "accuracy"
    base = {"majority": majority_accuracy(train, report)}
    if kind == "sequence":
        base["bag_of_words"] = naive_bayes_accuracy(train, report)
    else:
        base["word_tag"] = word_tag_accuracy(train, report)
    print(f"{report_name}: " + ", ".join(f"{k} {v:.2f}" for k, v in base.items()), flush=True)

    bodies = []
    for folder in args.model:
        model, meta = load_mlm(folder)
        tokenizer = load_tokenizer(meta.tokenizer_dict, folder)
        bodies.append((str(folder), model, tokenizer))
        if args.random_init:
            torch.manual_seed(args.seed)
            bodies.append((f"{folder} (random init, seed {args.seed})", MaskedLM(model.cfg), tokenizer))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for name, model, tokenizer in bodies:
            began = time.time()
            if kind == "sequence":
                feats = [classification_features(part, tokenizer, max_len=args.max_len)
                         for part in (train, select, report)]
            else:
                feats = [token_classification_features(part, tokenizer, labels, max_len=args.max_len)[0]
                         for part in (train, select, report)]
            (tr, y_tr), (se, y_se), (re_, y_re) = (layer_features(model, f, kind) for f in feats)
            print(f"{name}: features of {len(y_tr):,} / {len(y_se):,} / {len(y_re):,} items in "
                  f"{time.time() - began:.0f} s", flush=True)
            for layer in range(len(tr)):
                mean, std = tr[layer].mean(0), tr[layer].std(0) + 1e-6
                x_tr, x_se, x_re = ((a[layer] - mean) / std for a in (tr, se, re_))
                tried = []
                for decay in WEIGHT_DECAYS:
                    w, b = fit_probe(x_tr, y_tr, len(labels), decay)
                    tried.append((scores(w, b, x_se, y_se, len(labels))[metric], decay, w, b))
                chosen, decay, w, b = max(tried, key=lambda t: (t[0], t[1]))  # ties: the stronger weight
                record = {"model": name, "task": str(args.train), "format": args.format, "layer": layer,
                          "weight_decay": decay, "selected_on": select_name, "selection_metric": metric,
                          "selection_score": chosen, "reported_on": report_name,
                          "report": scores(w, b, x_re, y_re, len(labels)),
                          "train_score": scores(w, b, x_tr, y_tr, len(labels)),
                          "items": {"train": len(y_tr), "selection": len(y_se), "report": len(y_re)},
                          "baselines": {k: round(v, 2) for k, v in base.items()}}
                out.write(json.dumps(record) + "\n")
                out.flush()
                r = record["report"]
                print(f"  layer {layer}: {r['accuracy']:6.2f} (macro-F1 {r['macro_f1']:6.2f})  weight decay "
                      f"{decay:g}, {metric} {chosen:.2f} on selection", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

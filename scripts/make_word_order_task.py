"""A classification task answered by word order alone, built from any task's texts: SentEval's bigram shift.

    python scripts/make_word_order_task.py --from reference_data/tasks/lohelp --out runs/bshift \\
        --langs en de fr es [--seed 1] [--min-words 5] [--max-words 30]

For each ``<from>/{train,dev,test}.<lang>.jsonl[.xz]`` that exists, ``<out>/{train,dev,test}.<lang>.jsonl`` (the
``generic`` format): every item whose text has ``--min-words`` to ``--max-words`` words (split on spaces) once,
labelled ``inverted`` with two neighbouring different words swapped, or ``original`` as written; half of each. What
is swapped and which items are, is drawn from ``--seed`` and the item's id, so that a rebuild gives the same files and
an item translated into several languages (lohelp's dev and test are parallel by id) gets the same label in each.

Why: both labels hold the same words, so a bag of words reads it at chance (the majority class, about 50) and a
body can only answer it from the order it reads (Conneau et al., 2018, "What you can cram into a single vector",
one of their probing tasks). lohelp is answered mostly by its words (RESULTS.md, "Does the task reward depth"): this
is the task where BL_SMALL can fall below BL_BASE by depth.
Words are spaces' pieces: for scripts written without spaces (Japanese, Chinese, Khmer) the script refuses.

lohelp's dev and test paragraphs are in no corpus of the reference data (its README), so Step 1 and Step 2 never see
the evaluated texts as written; its training paragraphs are in the English corpus, as a task's training text often is.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_language_data import read_jsonl

LABELS = ("original", "inverted")
SPLITS = ("train", "dev", "test")


def draw(seed: int, item_id: str, n: int) -> int:
    """A number in [0, n) fixed by the seed and the item's id (the same in every language and on every rebuild)."""
    digest = hashlib.sha256(f"{seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


def inverted(words: list[str], seed: int, item_id: str) -> list[str] | None:
    """``words`` with one pair of neighbouring different words swapped (the pair drawn from ``seed`` and the id), or
    None where every neighbour repeats the word before it."""
    pairs = [i for i in range(len(words) - 1) if words[i] != words[i + 1]]
    if not pairs:
        return None
    i = pairs[draw(seed + 1, item_id, len(pairs))]
    return [*words[:i], words[i + 1], words[i], *words[i + 2:]]


def check_items(items: list[dict], path: Path) -> list[dict]:
    for number, item in enumerate(items, 1):
        if not isinstance(item.get("text"), str) or "id" not in item:
            raise SystemExit(f"make_word_order_task.py: {path}:{number}: needs a text and an id")
    return items


def build(items: list[dict], seed: int, min_words: int, max_words: int) -> list[dict]:
    """One example per item of ``min_words`` to ``max_words`` words (each text once), half of them inverted."""
    out, seen = [], set()
    for item in items:
        words = item["text"].split()
        text = " ".join(words)
        if not min_words <= len(words) <= max_words or text in seen:
            continue
        seen.add(text)
        label = LABELS[draw(seed, str(item["id"]), 2)]
        if label == "inverted":
            swapped = inverted(words, seed, str(item["id"]))
            if swapped is None:
                continue
            text = " ".join(swapped)
        out.append({"id": item["id"], "text": text, "label": label})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", type=Path, required=True,
                   help="a generic-format task folder: {train,dev,test}.<lang>.jsonl[.xz] with an id per item")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--langs", nargs="+", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-words", type=int, default=5)
    p.add_argument("--max-words", type=int, default=30,
                   help="longer texts are left out: a swap past a classifier's max_len could not be read")
    args = p.parse_args(argv)
    if not 2 <= args.min_words <= args.max_words:
        p.error(f"need 2 <= --min-words <= --max-words, got {args.min_words} and {args.max_words}")
    found = {(split, lang): read_jsonl(args.source, f"{split}.{lang}.jsonl") for split in SPLITS for lang in args.langs}
    if not any(items is not None for items in found.values()):
        p.error(f"{args.source}: no {{train,dev,test}}.<lang>.jsonl[.xz] for {', '.join(args.langs)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for (split, lang), items in found.items():
        if items is None:
            continue
        path = args.source / f"{split}.{lang}.jsonl"
        items = check_items(items, path)
        if len(items) > 20 and sum(" " in item["text"] for item in items) < len(items) / 2:
            p.error(f"{path}: most texts have no spaces (a script written without them): words cannot be swapped")
        examples = build(items, args.seed, args.min_words, args.max_words)
        target = args.out / f"{split}.{lang}.jsonl"
        target.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples), encoding="utf-8")
        inverted_share = sum(e["label"] == "inverted" for e in examples) / max(1, len(examples))
        print(f"{target}: {len(examples):,} of {len(items):,} items, {100 * inverted_share:.1f}% inverted")
    return 0


if __name__ == "__main__":
    sys.exit(main())

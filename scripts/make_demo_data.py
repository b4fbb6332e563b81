"""Rebuild ``demo_data/`` (or, with ``--reference``, ``reference_data/``) from the full data pack (``../shared/data``
in the developers' checkout).

The demo set must be small (a few MB), real, and free to redistribute: it keeps the MPL-2.0 LibreOffice-help
documents and the Brown corpus documents, and leaves out the GPL-licensed dictionary, manual-page and fortune text.
The pack writes documents source by source (LibreOffice help first, then Brown for English), so whole documents are
taken from the front of each source. Deterministic: the same pack gives byte-identical files.

    python scripts/make_demo_data.py ../shared/data demo_data

The reference experiment (``configs/reference.json``) takes every redistributable document instead: all LibreOffice
help and Brown documents in English, all help documents in German, French and Spanish, and the whole ``lohelp`` task
in the four languages, and the English POS task (Brown, universal tags). It ships xz-compressed (``scripts/reference.sh`` unpacks it):

    python scripts/make_demo_data.py --reference ../shared/data reference_data
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

# Documents per source, in the pack's order (see its README "corpus/<lang>.txt"); byte caps keep the demo small.
EN_LOHELP_DOCS, EN_BROWN_DOCS = 2185, 448
DE_LOHELP_DOCS = 2190
LOHELP_DOCS = {"de": DE_LOHELP_DOCS, "fr": 2179, "es": 2153}
EN_LOHELP_BYTES, EN_BROWN_BYTES, DE_LOHELP_BYTES = 1_000_000, 600_000, 1_200_000
TRAIN_EXAMPLES = 3000  # of the 12,374 English lohelp training examples, a seeded sample


def read_documents(path: Path) -> list[list[str]]:
    docs, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                current.append(line)
            elif current:
                docs.append(current)
                current = []
    if current:
        docs.append(current)
    return docs


def take(docs: list[list[str]], max_bytes: int) -> list[list[str]]:
    taken, size = [], 0
    for doc in docs:
        doc_bytes = sum(len(p.encode("utf-8")) + 1 for p in doc) + 1
        if size + doc_bytes > max_bytes:
            break
        taken.append(doc)
        size += doc_bytes
    return taken


def write_documents(path: Path, docs: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in docs) + "\n")


def main(pack: Path, out: Path) -> None:
    en = read_documents(pack / "corpus/en.txt")
    lohelp_en, brown = en[:EN_LOHELP_DOCS], en[EN_LOHELP_DOCS:EN_LOHELP_DOCS + EN_BROWN_DOCS]
    # Spread the English help sample over all modules rather than the first pages only.
    random.Random(20240607).shuffle(lohelp_en)
    write_documents(out / "corpus/en.txt", take(lohelp_en, EN_LOHELP_BYTES) + take(brown, EN_BROWN_BYTES))
    de = read_documents(pack / "corpus/de.txt")[:DE_LOHELP_DOCS]
    random.Random(20240607).shuffle(de)
    write_documents(out / "corpus/de.txt", take(de, DE_LOHELP_BYTES))

    tasks = pack / "tasks/lohelp"
    (out / "tasks/lohelp").mkdir(parents=True, exist_ok=True)
    train = (tasks / "train.en.jsonl").read_text(encoding="utf-8").splitlines()
    sample = sorted(random.Random(20240607).sample(range(len(train)), TRAIN_EXAMPLES))
    (out / "tasks/lohelp/train.en.jsonl").write_text("".join(train[i] + "\n" for i in sample), encoding="utf-8")
    for name in ("dev.en.jsonl", "test.en.jsonl", "dev.de.jsonl", "test.de.jsonl"):
        (out / "tasks/lohelp" / name).write_bytes((tasks / name).read_bytes())
    for path in sorted(out.rglob("*.*")):
        if path.suffix in (".txt", ".jsonl"):
            lines = path.read_text(encoding="utf-8").count("\n")
            print(f"{path.relative_to(out)}: {path.stat().st_size / 1e6:.2f} MB, {lines} lines")
    json.loads((out / "tasks/lohelp/train.en.jsonl").read_text(encoding="utf-8").splitlines()[0])


def main_reference(pack: Path, out: Path) -> None:
    """Every MPL-2.0 help document and every Brown document, the whole task and Brown POS, xz-compressed."""
    import lzma

    en = read_documents(pack / "corpus/en.txt")
    files = {"corpus/en.txt": en[:EN_LOHELP_DOCS + EN_BROWN_DOCS]}
    for lang, docs in LOHELP_DOCS.items():
        files[f"corpus/{lang}.txt"] = read_documents(pack / f"corpus/{lang}.txt")[:docs]
    for name, docs in files.items():
        text = "\n\n".join("\n".join(doc) for doc in docs) + "\n"
        write_xz(out / f"{name}.xz", text.encode("utf-8"), lzma)
        print(f"{name}: {len(docs):,} documents, {len(text.encode('utf-8')) / 1e6:.2f} MB")
    for path in sorted((pack / "tasks/lohelp").glob("*.jsonl")):
        write_xz(out / "tasks/lohelp" / f"{path.name}.xz", path.read_bytes(), lzma)
        print(f"tasks/lohelp/{path.name}: {path.stat().st_size / 1e6:.2f} MB")
    # Which help page is in which split: what keeps dev and test pages out of scripts/make_help_lexicons.py's lists.
    (out / "tasks/lohelp/splits.tsv").write_bytes((pack / "tasks/lohelp/splits.tsv").read_bytes())
    # English POS (Brown, the universal tagset): the task whose answer needs more than the words, for the depth probe.
    for path in sorted((pack / "tasks/brown-pos").glob("*.conllu")):
        write_xz(out / "tasks/brown-pos" / f"{path.name}.xz", path.read_bytes(), lzma)
        print(f"tasks/brown-pos/{path.name}: {path.stat().st_size / 1e6:.2f} MB")
    (out / "tasks/brown-pos/splits.tsv").write_bytes((pack / "tasks/brown-pos/splits.tsv").read_bytes())


def write_xz(path: Path, data: bytes, lzma) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # No timestamps or names in an .xz stream: the same pack gives byte-identical files.
    path.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))


if __name__ == "__main__":
    if sys.argv[1] == "--reference":
        main_reference(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]))

"""Build a new target language's corpus and lohelp dev/test sets from Debian's LibreOffice help (issue 46).

    python scripts/make_language_data.py --langs ja ko km pl fi [--debs DIR] [--out reference_data]
        [--max-bytes 400000]

For each language, from ``libreoffice-help-<lang>`` (4:7.4.7-1+deb12u14, MPL-2.0; fetched from the Debian archive or
read from ``--debs``, unpacked in memory) and the English help the task was built from:

- ``<out>/tasks/lohelp/{dev,test}.<lang>.jsonl``: the translations of the English dev and test items
  (``<task>/{dev,test}.en.jsonl[.xz]``), paired by page and element id (``data.help_pages``), with the English
  item's label, each page read as its application shows it (``help_pages.MODULE_CASES``), as the English items were.
  An item is kept only where the help really translates it (``help_pages.is_translation``: not the English text
  but for case, spaces and punctuation, and not 80% or more of its words the English item's). Product names that give the label away are masked as the English items are (``ProductName``;
  Latin-script names: a translation that transliterates one keeps it). A text met twice in a split is kept once, and
  dev drops what test holds.
- ``<out>/corpus/<lang>.txt``: the CC-100 layout (one paragraph a line, a blank line between documents; a document
  is a help page) of every page outside the task's dev and test splits (``<task>/splits.tsv``; pages of modules the
  task does not use count as train), without the paragraphs the help leaves in English, Unicode NFC, whitespace collapsed, control characters dropped, paragraphs
  without a letter dropped, each paragraph once, and none equal to any paragraph of a dev or test page.
  ``--max-bytes`` cuts it after the first pages that fit (a low-resource language, issue 46 item 3).

It prints, per language, what it kept (pages, paragraphs, MB, items per split) and whether FreeDict has a
dictionary between the language and English (``scripts/make_dictionaries.py``). The outputs are git-ignored, as the
unpacked reference data are; rebuilding gives the same files (nothing here samples).
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import sys
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_help_lexicons import PACKAGES, help_packages, help_pages  # noqa: E402

from ds_minimodel.data.help_pages import is_translation, letters  # noqa: E402

FREEDICT_TO_ENGLISH = {"ja": "jpn-eng", "de": "deu-eng", "fr": "fra-eng", "es": "spa-eng", "it": "ita-eng",
                       "pl": "pol-eng", "fi": "fin-eng", "ru": "eng-rus", "hi": "eng-hin", "ko": None, "km": None,
                       "zh": None}
"""FreeDict's dictionary between the language and English in Debian 12 (``dict-freedict-<code>``): to English, or
from English where it has none the other way (``eng-<xxx>``, which ``make_dictionaries.py`` reads backwards), None
where it has neither (Korean, Khmer, Chinese); checked with ``apt-cache search freedict``."""


def freedict_direction(lang: str) -> str:
    """What ``FREEDICT_TO_ENGLISH`` knows of a language (a cut such as fi-small is its language): "to English", "from
    English", "none" or "not checked"."""
    name = FREEDICT_TO_ENGLISH.get(lang.split("-")[0], "unknown")
    if name is None or name == "unknown":
        return {None: "none", "unknown": "not checked"}[name]
    return "from English" if name.startswith("eng-") else "to English"


def freedict_says(lang: str) -> str:
    """``freedict_direction`` with the package to build the list from."""
    direction = freedict_direction(lang)
    if direction in ("none", "not checked"):
        return direction
    return f"dict-freedict-{FREEDICT_TO_ENGLISH[lang.split('-')[0]]}" + (
        " (from English: make_dictionaries.py reads it backwards)" if direction == "from English" else "")


MASK = "ProductName"
_SUITES = r"(?:LibreOfficeDev|LibreOffice|%PRODUCTNAME|OpenOffice\.org|StarOffice)"
_PRODUCTS = r"(?:Calc|Writer|Impress|Base|Math|Chart|Draw|Basic|BASIC)"
PRODUCT = re.compile(r"(?<![A-Za-z0-9_%])(?:" + _SUITES + r"(?:[\s-]*" + _PRODUCTS + r"(?![A-Za-z0-9_]))?"
                     r"|Star(?:Basic|BASIC|Calc|Writer|Impress|Draw|Math|Base)|" + _PRODUCTS + r")(?![A-Za-z0-9_])")
"""The suite's and its applications' names, alone or joined ("LibreOffice Calc", "StarBasic", "Writer"): each names
the label of the page it is on."""
CONTROL = re.compile(r"[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u200b-\u200d\u2060\ufeff]")
WORD = re.compile(r"[^\W\d_]+")


def clean(text: str) -> str:
    """NFC, no control or zero-width characters, whitespace runs as one space."""
    return " ".join(CONTROL.sub("", unicodedata.normalize("NFC", text)).split())


def mask(text: str) -> str:
    return re.sub(MASK + r"(?:[\s-]*" + MASK + r")+", MASK, PRODUCT.sub(MASK, text))


def read_jsonl(task: Path, name: str) -> list[dict] | None:
    """The items of ``task/name``, or of ``task/name.xz`` where only the shipped archive is there; None where neither
    is (also read by ``make_word_order_task.py``)."""
    for path in (task / name, task / f"{name}.xz"):
        if path.is_file():
            raw = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
            return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    return None


def _english_items(task: Path, name: str) -> list[dict]:
    items = read_jsonl(task, name)
    if items is None:
        raise SystemExit(f"{task / name}: not found (nor its .xz): the English items to translate")
    return items


def splits(task: Path) -> dict[str, str]:
    path = task / "splits.tsv"
    if not path.is_file():
        raise SystemExit(f"{path}: not found: which help page is in which split")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:] if line.strip()]
    return {page: split for page, _, split in rows}


def task_items(pages: dict[str, dict[str, str]], english: dict[str, list[dict]]) -> tuple[dict[str, list[dict]],
                                                                                          dict[str, int]]:
    """({split: items}, {reason: count of English items left out}) in the target language."""
    kept: dict[str, list[dict]] = {}
    left_out = {"no such paragraph": 0, "not translated": 0, "duplicate": 0}
    for split in ("test", "dev"):  # test first: dev drops what test holds
        seen = {letters(item["text"]) for items in kept.values() for item in items}
        kept[split] = []
        for item in english[split]:
            page, _, element = item["id"].partition("#")
            text = pages.get(page, {}).get(element)
            if text is None:
                left_out["no such paragraph"] += 1
                continue
            text = mask(clean(text))
            if not is_translation(text, item["text"]):
                left_out["not translated"] += 1
            elif letters(text) in seen:
                left_out["duplicate"] += 1
            else:
                seen.add(letters(text))
                kept[split].append({"id": item["id"], "text": text, "label": item["label"]})
    return {"dev": kept["dev"], "test": kept["test"]}, left_out


def corpus(pages: dict[str, dict[str, str]], english: dict[str, dict[str, str]], split_of: dict[str, str],
           max_bytes: int | None) -> tuple[str, dict]:
    """The CC-100-layout text of the pages outside dev and test, and what it holds: the paragraphs the help
    translates (a paragraph left in English, ``is_translation`` against the English page's, is not the language's
    text)."""
    held_out = {clean(text) for page, paragraphs in pages.items() if split_of.get(page, "train") in ("dev", "test")
                for text in paragraphs.values()}
    seen, documents, size, stats = set(), [], 0, {"pages": 0, "paragraphs": 0, "left in English": 0}
    for page in sorted(pages):
        if split_of.get(page, "train") in ("dev", "test"):
            continue
        lines = []
        for pid, raw in pages[page].items():
            text, source = clean(raw), english.get(page, {}).get(pid)
            if source is not None and not is_translation(text, clean(source)):
                stats["left in English"] += 1
                continue
            if text and WORD.search(text) and text not in seen and text not in held_out:
                seen.add(text)
                lines.append(text)
        block = "\n".join(lines) + "\n"
        if not lines:
            continue
        if max_bytes is not None and size + len(block.encode("utf-8")) > max_bytes:
            break
        documents.append(block)
        size += len(block.encode("utf-8")) + 1
        stats["pages"] += 1
        stats["paragraphs"] += len(lines)
    return "\n".join(documents), stats


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", required=True,
                        help="LANG (libreoffice-help-LANG) or LANG=SUFFIX, e.g. ja ko km pl fi zh=zh-cn")
    parser.add_argument("--debs", type=Path, help="folder holding the .deb files already (no download)")
    parser.add_argument("--task", type=Path, default=Path("reference_data/tasks/lohelp"),
                        help="the task folder: splits.tsv and the English dev/test items")
    parser.add_argument("--out", type=Path, default=Path("reference_data"),
                        help="writes corpus/<lang>.txt and tasks/lohelp/{dev,test}.<lang>.jsonl below it")
    parser.add_argument("--max-bytes", type=int, help="cut each corpus after the pages that fit in this many bytes")
    parser.add_argument("--force", action="store_true", help="write over files an earlier build left")
    parser.add_argument("--corpus-name", default="{lang}",
                        help="the corpus file's name without .txt (default: the language; e.g. {lang}-small)")
    args = parser.parse_args(argv)
    langs = help_packages(args.langs)
    for lang in langs:  # a shipped language's files (their .xz beside them) or an earlier build are never replaced
        outputs = [args.out / "corpus" / f"{args.corpus_name.format(lang=lang)}.txt",
                   *(args.out / "tasks" / "lohelp" / f"{split}.{lang}.jsonl" for split in ("dev", "test"))]
        shipped = [p for p in outputs if p.with_name(p.name + ".xz").exists()]
        if shipped:
            raise SystemExit(f"{shipped[0]}: shipped with the project ({shipped[0].name}.xz); build {lang} into "
                             "another --out")
        existing = [p for p in outputs if p.exists()]
        if existing and not args.force:
            raise SystemExit(f"{existing[0]}: exists (an earlier build); --force writes over it")
    split_of = splits(args.task)
    english = {split: _english_items(args.task, f"{split}.en.jsonl") for split in ("dev", "test")}
    english_pages, _ = help_pages(*PACKAGES["en"], args.debs, cases=True)
    for lang, (suffix, sha256) in langs.items():
        pages, digest = help_pages(suffix, sha256, args.debs, cases=True)  # each page as its application shows it
        items, left_out = task_items(pages, english)
        text, stats = corpus(pages, english_pages, split_of, args.max_bytes)
        name = args.corpus_name.format(lang=lang)
        write(args.out / "corpus" / f"{name}.txt", text)
        for split, rows in items.items():
            write(args.out / "tasks" / "lohelp" / f"{split}.{lang}.jsonl",
                  "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        print(f"{lang}: libreoffice-help-{suffix} (SHA-256 {digest[:12]}): corpus {args.out}/corpus/{name}.txt "
              f"{len(text.encode('utf-8')) / 1e6:.2f} MB, {stats['pages']:,} pages, {stats['paragraphs']:,} "
              f"paragraphs ({stats['left in English']:,} left in English dropped); dev {len(items['dev']):,} and test {len(items['test']):,} items of "
              f"{len(english['dev']):,} and {len(english['test']):,} English (left out: "
              + ", ".join(f"{k} {v:,}" for k, v in left_out.items()) + f"); FreeDict: {freedict_says(lang)}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

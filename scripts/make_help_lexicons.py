"""Build in-domain bilingual word lists for ``--init wechsel`` from the LibreOffice help's parallel pages.

    python scripts/make_help_lexicons.py [--langs de fr es it ...] [--debs DIR] [--out reference_data/lexicons]

Debian's ``libreoffice-help-en-us`` and ``libreoffice-help-<lang>`` (4:7.4.7-1+deb12u14, MPL-2.0) are fetched from
the Debian archive, or read from ``--debs`` where they were downloaded before (``apt-get download
libreoffice-help-de``), checked against the SHA-256 pinned below and unpacked in memory. Every help page's paragraphs
are paired across the two languages by page and element id (``data.help_pages``), **only on pages outside the
lohelp task's dev and test splits** (``reference_data/tasks/lohelp/splits.tsv``; pages of modules the task does not
use count as train, as they do for the corpora), and a pair whose English or target text is a dev or test item is
dropped too. The pairs' words are aligned in both directions by eflomal (Östling and Tiedemann, 2016;
``pip install eflomal``), and the word pairs both directions link often become ``<lang>-en.help.tsv``
(``target_word<TAB>english_word``; ``data.bilingual.lexicon_from_links``). Words are split at spaces and
punctuation, except in languages whose script puts no space between words (``UNSPACED``: Japanese, Chinese, Thai,
Lao, Khmer, Burmese), which ICU's dictionary-based word breaker segments (``pip install icu4py``; without it such a
"word" would be a whole phrase, and the list would keep only the phrases that recur).

Any language Debian ships a help package for works (``--langs it``: ``libreoffice-help-it``; ``LANG=SUFFIX`` where
the package's suffix is not the language's code). The packages the results used are checked against the SHA-256
pinned below; another's is written into its list's first line.

eflomal samples, and takes no seed: a rebuild gives a list that differs in its rarest pairs. The lists the results
were measured with ship in ``reference_data/lexicons/`` (the help text's licence, MPL-2.0, allows it).
"""
from __future__ import annotations

import argparse
import io
import json
import lzma
import os
import re
import sys
import tarfile
import tempfile
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from make_dictionaries import deb_members, fetch_deb, language_packages  # noqa: E402

from ds_minimodel.data.bilingual import lexicon_from_links, parse_links  # noqa: E402
from ds_minimodel.data.help_pages import MODULE_CASES, page_paragraphs, parallel_paragraphs  # noqa: E402

VERSION = "4:7.4.7-1+deb12u14"
PACKAGES = {  # language: (package suffix, SHA-256 of the .deb)
    "en": ("en-us", "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712"),
    "de": ("de", "00490b63c509ac96f7f212d6a6e40452d3e0d1f97ccf4b824dd5ec4c01e8277f"),
    "fr": ("fr", "c796530d3e95af1ea4d054076682efc8aad2b569ae9513f3d4a776b2df3fd206"),
    "es": ("es", "9128a84d83d92c8b1c618d90469d16affddb7d1290b09d42a0c5109cb16f0480"),
    "ja": ("ja", "7799ace9bfe0845771ed2499913e7f7e521318cf3727c007672e3b020f8eb7b9"),
    "ko": ("ko", "7ef2d854e9ed58e6bf861cfa9fa2579555233f9df874baf327fcb07ccd190669"),
    "km": ("km", "58700c6513c15d78e6dbbfda82b05f45fcb5a8acf0832f3dca50918d71e27f50"),
    "pl": ("pl", "27441ce6d1303524b223aa94a17356bf7195f388d9b05a9e5e346866d7983694"),
    "fi": ("fi", "47b0bf9820e7eef19de7d56400aae8139de26eca4f3d72f57d6769c751630f26"),
    "zh": ("zh-cn", "db867cdece4c2f9c7eebe65e519c6cf386fdcf49d6e061db3dffec893b3e1dee"),
    "hi": ("hi", "fda6f59354cb79f7ecfe379a502b009119a506aa0873416b044f1f39ad00a4cf"),
    "ru": ("ru", "5a2f75d5b0dfcf660275070647af528a81be28b5d3e9c3ec2d419ef5518db7a2"),
}
DEBIAN_HELP = ("ca", "cs", "da", "de", "dz", "el", "en-gb", "en-us", "es", "et", "eu", "fi", "fr", "gl", "hi", "hu",
               "id", "it", "ja", "km", "ko", "nl", "om", "pl", "pt", "pt-br", "ru", "sk", "sl", "sv", "tr", "vi",
               "zh-cn", "zh-tw")
"""The languages Debian 12 ships LibreOffice help for, as its package names them (``libreoffice-help-<suffix>``;
``apt-cache search --names-only ^libreoffice-help-``)."""
HELP_TEXT = re.compile(r"\./usr/share/libreoffice/help/([^/]+)/text/(.+\.html)")
ARCHIVE = "https://deb.debian.org/debian/pool/main/libr/libreoffice"
WORD = regex.compile(r"[\w\p{M}]+|[^\w\p{M}\s]")
"""A word (letters, digits and the combining marks that carry Indic and Southeast Asian vowels) or one mark of
punctuation."""
UNSPACED = {"ja", "zh", "th", "lo", "km", "my"}
"""Languages written without spaces between words: ICU segments them with its dictionaries."""


def words(text: str, lang: str) -> list[str]:
    """``text``'s words and punctuation marks, one a token: ``WORD``'s split, or ICU's word breaker in a language
    of ``UNSPACED`` (``lang`` a code as ``--langs`` names it; ``zh-cn`` is Chinese)."""
    if lang.split("-")[0].lower() not in UNSPACED:
        return WORD.findall(text)
    try:
        from icu4py.breakers import WordBreaker
    except ImportError:
        raise SystemExit(f"{lang} is written without spaces between words: segmenting it needs ICU's word breaker "
                         "(pip install icu4py, or the package's [lexicons] extra)") from None
    return [w for w in WordBreaker(text, lang) if not w.isspace()]


def help_packages(specs: list[str]) -> dict[str, tuple[str, str | None]]:
    """``{lang: (help package suffix, pinned SHA-256 or None)}`` from ``--langs``: LANG (pinned, or a package named
    as the language: ``it``) or LANG=SUFFIX (``pt=pt-br``); a suffix Debian 12 has no help package for is refused
    here, before anything is fetched."""
    langs = language_packages([spec if "=" in spec or spec in PACKAGES else f"{spec}={spec.lower()}"
                               for spec in specs], PACKAGES)
    missing = [f"{lang} (libreoffice-help-{suffix})" for lang, (suffix, _) in langs.items()
               if suffix not in DEBIAN_HELP]
    if missing:
        raise SystemExit(f"--langs: Debian 12 has no LibreOffice help package for {', '.join(missing)}; it has one for "
                         f"{' '.join(DEBIAN_HELP)}: name it as LANG=SUFFIX (e.g. pt=pt-br)")
    return langs


def help_pages(suffix: str, sha256: str | None, debs: Path | None, *, cases: bool = False
               ) -> tuple[dict[str, dict[str, str]], str]:
    """(``{page path below text/: {id: text}}`` of one language's help package, the package's SHA-256). ``cases``:
    each application's pages read with its switch case (``help_pages.MODULE_CASES``), as inside the application."""
    filename = f"libreoffice-help-{suffix}_{VERSION.split(':', 1)[1]}_all.deb"
    deb, digest = fetch_deb(ARCHIVE, filename, sha256, debs)
    data = next(v for k, v in deb_members(deb).items() if k.startswith("data.tar"))
    pages, folders = {}, set()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            page = HELP_TEXT.fullmatch(member.name)
            if member.isfile() and page:
                folders.add(page[1])  # the help's language folder (en-US, de, pt-BR, ...): one per package
                case = MODULE_CASES.get(page[2].split("/")[0]) if cases else None
                pages[page[2]] = page_paragraphs(tar.extractfile(member).read().decode("utf-8"), case)
    if len(folders) != 1:
        raise SystemExit(f"{filename}: expected the help pages of one language, found folders {sorted(folders)}")
    return pages, digest


def held_out(task: Path) -> tuple[set[str], set[str]]:
    """(pages of the dev and test splits, texts of every dev and test item in any language)."""
    pages = set()
    for line in (task / "splits.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        page, _, split = line.split("\t")
        if split in ("dev", "test"):
            pages.add(page)
    texts, read = set(), set()
    for path in sorted([*task.glob("*.jsonl"), *task.glob("*.jsonl.xz")]):
        split, name = path.name.split(".")[0], path.name.removesuffix(".xz")
        if split in ("dev", "test") and name not in read:  # a clone holds the .xz files only until unpacked
            read.add(name)
            raw = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
            texts.update(json.loads(line)["text"] for line in raw.decode("utf-8").splitlines())
    if not {"dev", "test"} <= {name.split(".")[0] for name in read}:
        raise SystemExit(f"{task}: no dev or test files (dev.<lang>.jsonl[.xz]) to keep out of the word lists")
    return pages, texts


def align(target: list[list[str]], source: list[list[str]]) -> tuple[list, list]:
    import eflomal

    with tempfile.TemporaryDirectory() as tmp:
        fwd, bwd = Path(tmp, "fwd"), Path(tmp, "bwd")
        eflomal.Aligner().align([" ".join(s) for s in target], [" ".join(s) for s in source],
                                links_filename_fwd=str(fwd), links_filename_rev=str(bwd))
        read = lambda path: [parse_links(line) for line in path.read_text().splitlines()]  # noqa: E731
        return read(fwd), read(bwd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", default=["de", "fr", "es"],
                        help="LANG (libreoffice-help-LANG) or LANG=SUFFIX, e.g. de fr es it pt=pt-pt")
    parser.add_argument("--debs", type=Path, help="folder holding the .deb files already (no download)")
    parser.add_argument("--task", type=Path, default=Path("reference_data/tasks/lohelp"),
                        help="the task folder: splits.tsv and the dev/test files to keep out")
    parser.add_argument("--out", type=Path, default=Path("reference_data/lexicons"))
    parser.add_argument("--min-count", type=int, default=3)
    args = parser.parse_args()
    langs = help_packages(args.langs)
    pages, texts = held_out(args.task)
    english, english_sha256 = help_pages(*PACKAGES["en"], args.debs)
    english = {p: paras for p, paras in english.items() if p not in pages}
    args.out.mkdir(parents=True, exist_ok=True)
    for lang, (suffix, sha256) in langs.items():
        target_pages, target_sha256 = help_pages(suffix, sha256, args.debs)
        pairs = [(key, t, s) for key, t, s in parallel_paragraphs(target_pages, english)
                 if t not in texts and s not in texts]
        target = [words(t, lang) for _, t, _ in pairs]
        source = [words(s, "en") for _, _, s in pairs]
        lexicon = lexicon_from_links(target, source, *align(target, source), min_count=args.min_count)
        path = args.out / f"{lang}-en.help.tsv"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(f"# LibreOffice help {VERSION} (MPL-2.0; .deb SHA-256 en {english_sha256}, {lang} "
                       f"{target_sha256}), {len(pairs):,} parallel paragraphs of pages outside "
                       f"lohelp's dev/test, eflomal links in both directions, pairs linked >= {args.min_count} "
                       "times; scripts/make_help_lexicons.py\n"
                       + "".join(f"{t}\t{s}\n" for t, s, _ in lexicon), encoding="utf-8")
        os.replace(tmp, path)
        print(f"{path}: {len(lexicon):,} pairs, {len({t for t, _, _ in lexicon}):,} {lang} words, "
              f"from {len(pairs):,} paragraph pairs")


if __name__ == "__main__":
    main()

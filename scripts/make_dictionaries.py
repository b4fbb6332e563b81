"""Build the bilingual word lists that ``--init wechsel`` aligns with, from Debian's FreeDict packages.

    python scripts/make_dictionaries.py [--langs de fr es it=ita ...] [--debs DIR] [--out reference_data/dictionaries]

Each package (``dict-freedict-<xxx>-eng``, version 2022.04.21-1) is fetched from the Debian archive, or read from
``--debs`` where it was downloaded before (``apt-get download dict-freedict-deu-eng``), and unpacked in memory; its
dictd entries become ``<lang>-en.tsv`` (``target_word<TAB>english_word``, single words only;
``data.bilingual.dictd_pairs``). The dictionaries are GPL-licensed, so the lists are rebuilt here rather than
shipped. German-English (Ding) is large; French and Spanish are small (a few thousand headwords).

Any language FreeDict pairs with English works: ``LANG=XXX`` names the package by FreeDict's three-letter code
(``it=ita`` for ``dict-freedict-ita-eng``; the list is ``it-en.tsv``); German, French and Spanish need only ``de``,
``fr``, ``es``. ``LANG=XXX@VERSION`` takes another version: Debian 12 builds Finnish and Polish from WikDict
(``fi=fin@2022.12.07-2 pl=pol@2022.12.07-2``), in another folder of the archive, which this machine's apt index
(``apt-cache show``) gives with the package's SHA-256. The packages the results used are checked against the SHA-256 pinned below; another language's is
written into its list's first line, so a result names the exact package it came from.

Where FreeDict has no dictionary from a language to English it may have one the other way: of Debian 12's 30
``dict-freedict-eng-<xxx>`` packages, those for Bulgarian, Hindi, Indonesian, Norwegian, Romany and Russian have no
twin to English. ``LANG=eng-XXX`` reads such a dictionary backwards (``ru=eng-rus``, ``hi=eng-hin``): each English
headword's translations become the target words, and a target word's English words are listed first where it was
its headword's first translation (``reversed_pairs``), the order word anchors take as preference.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ds_minimodel.data.bilingual import dictd_pairs  # noqa: E402

VERSION = "2022.04.21-1"
PACKAGES = {  # language: (FreeDict's code in dict-freedict-<code>-eng, SHA-256 of the .deb)
    "de": ("deu", "52fa2ba6c73ebe84df0e4a7b8612a94a45e6026a157fc75f5ae36c4a1106e3db"),
    "fr": ("fra", "fb853d1f3da00ddddfe60dc3b88b5aaca122eecf3ba5c219131bea479d6274db"),
    "es": ("spa", "debf5f88fcdaebe824704664cdbb42b6c14f82ab4adda4e91bc388b16200eefc"),
}
ARCHIVE = "https://deb.debian.org/debian/pool/main/f/freedict"


def deb_members(deb: bytes) -> dict[str, bytes]:
    """The members of an ``ar`` archive (a .deb): 60-byte headers, each member padded to an even length."""
    if not deb.startswith(b"!<arch>\n"):
        raise SystemExit("not a .deb (ar) archive")
    members, at = {}, 8
    while at + 60 <= len(deb):
        header = deb[at:at + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        members[name] = deb[at + 60:at + 60 + size]
        at += 60 + size + (size % 2)
    return members


def dictd_files(deb: bytes, name: str) -> tuple[str, str]:
    """(index text, dict text) of ``freedict-<name>`` inside the package."""
    data = next(v for k, v in deb_members(deb).items() if k.startswith("data.tar"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        def read(suffix: str) -> bytes:
            member = next(m for m in tar.getmembers() if m.name.endswith(f"freedict-{name}{suffix}"))
            return tar.extractfile(member).read()

        return read(".index").decode("utf-8"), gzip.decompress(read(".dict.dz")).decode("utf-8")


def indexed(package: str, version: str) -> tuple[str, str] | None:
    """(the archive folder, the SHA-256) that this machine's apt index gives for ``package`` at ``version``, or None
    where it has no apt or does not know that version. Debian 12 builds some FreeDict dictionaries from another
    source package (``freedict-wikdict``: Finnish, Polish), in another folder of the archive."""
    try:
        shown = subprocess.run(["apt-cache", "show", f"{package}={version}"], capture_output=True, text=True,
                               check=False).stdout
    except OSError:
        return None
    fields = dict(line.split(": ", 1) for line in shown.splitlines() if ": " in line and not line.startswith(" "))
    if "Filename" not in fields or "SHA256" not in fields:
        return None
    return f"https://deb.debian.org/debian/{fields['Filename'].rsplit('/', 1)[0]}", fields["SHA256"]


def fetch_deb(archive: str, filename: str, sha256: str | None, debs: Path | None) -> tuple[bytes, str]:
    """(a Debian package, its SHA-256), from ``debs`` if given (no download) or from the archive folder, checked
    against ``sha256`` where one is pinned (or the apt index gives one)."""
    if debs is not None:
        if not (debs / filename).is_file():
            raise SystemExit(f"{debs / filename}: not found (apt-get download {filename.split('_')[0]})")
        blob = (debs / filename).read_bytes()
    else:
        try:
            with urllib.request.urlopen(f"{archive}/{filename}", timeout=120) as response:
                blob = response.read()
        except urllib.error.HTTPError as err:
            raise SystemExit(f"{archive}/{filename}: {err.code} {err.reason} (does Debian ship this package at "
                             "this version?)") from None
    digest = hashlib.sha256(blob).hexdigest()
    if sha256 is not None and digest != sha256:
        raise SystemExit(f"{filename}: SHA-256 {digest} is not the pinned {sha256}")
    if sha256 is None:
        print(f"{filename}: not pinned here; SHA-256 {digest}", file=sys.stderr)
    return blob, digest


def language_packages(specs: list[str], pinned: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str | None]]:
    """``{lang: (the package's name for the language, pinned SHA-256 or None)}`` from each ``LANG`` (a language of
    ``pinned``) or ``LANG=NAME``."""
    return {lang: (name, sha256) for lang, (name, sha256, _) in versioned_packages(specs, pinned).items()}


def versioned_packages(specs: list[str], pinned: dict[str, tuple[str, str]]
                       ) -> dict[str, tuple[str, str | None, str]]:
    """``language_packages`` with each package's version: ``VERSION``, or the one ``LANG=NAME@VERSION`` names (Debian
    12 ships some FreeDict dictionaries at another: ``apt-cache policy dict-freedict-fin-eng``)."""
    packages = {}
    for spec in specs:
        spec_name, _, version = spec.partition("@")
        lang, _, name = spec_name.partition("=")
        if not lang or not re.fullmatch(r"[A-Za-z0-9-]*", lang + name) or (
                version and not re.fullmatch(r"[0-9][0-9A-Za-z.+~-]*", version)):
            raise SystemExit(f"--langs {spec}: expected LANG, LANG=NAME or LANG=NAME@VERSION (letters, digits, '-')")
        version = version or VERSION
        if name:
            same = lang in pinned and pinned[lang][0] == name and version == VERSION
            packages[lang] = (name, pinned[lang][1] if same else None, version)
        elif lang in pinned:
            packages[lang] = (*pinned[lang], version) if version == VERSION else (pinned[lang][0], None, version)
        else:
            raise SystemExit(f"--langs {lang}: no package name known for it; write {lang}=NAME (known: "
                             f"{', '.join(pinned)})")
    return packages


def dictionary_name(code: str) -> tuple[str, bool]:
    """(FreeDict's dictionary name, whether it runs from English to the target) for a ``--langs`` code: ``XXX`` is
    ``XXX-eng``, whose headwords are the target's words; ``eng-XXX`` the English-to-target dictionary."""
    return (code, True) if code.startswith("eng-") else (f"{code}-eng", False)


def reversed_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(target word, English word) pairs from an English-to-target dictionary's (headword, translation) pairs, in
    the order of each translation's place in its entry: an English word whose entry lists the target word first
    comes before one whose entry lists it third, so a target word's first English word is its likeliest."""
    place: dict[str, int] = {}
    ranked = []
    for head, word in pairs:
        place[head] = place.get(head, -1) + 1
        ranked.append((place[head], word, head))
    return [(word, head) for _, word, head in sorted(ranked, key=lambda r: r[0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", default=list(PACKAGES),
                        help="LANG, LANG=FREEDICT_CODE or LANG=FREEDICT_CODE@VERSION, e.g. de fr es it=ita "
                             "fi=fin@2022.12.07-2 ru=eng-rus (an English-to-target dictionary read backwards; "
                             "default: de fr es)")
    parser.add_argument("--debs", type=Path, help="folder holding the .deb files already (no download)")
    parser.add_argument("--out", type=Path, default=Path("reference_data/dictionaries"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for lang, (code, sha256, version) in versioned_packages(args.langs, PACKAGES).items():
        name, from_english = dictionary_name(code)
        archive, index_sha256 = indexed(f"dict-freedict-{name}", version) or (ARCHIVE, None)
        deb, digest = fetch_deb(archive, f"dict-freedict-{name}_{version}_all.deb", sha256 or index_sha256,
                                args.debs)
        pairs = dictd_pairs(*dictd_files(deb, name))
        pairs = reversed_pairs(pairs) if from_english else pairs
        path = args.out / f"{lang}-en.tsv"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(f"# FreeDict {name} {version} (GPL, .deb SHA-256 {digest}), single-word pairs"
                       f"{', read backwards' if from_english else ''}; scripts/make_dictionaries.py\n"
                       + "".join(f"{t}\t{s}\n" for t, s in pairs), encoding="utf-8")
        os.replace(tmp, path)
        print(f"{path}: {len(pairs):,} pairs, {len({t for t, _ in pairs}):,} {lang} words")


if __name__ == "__main__":
    main()

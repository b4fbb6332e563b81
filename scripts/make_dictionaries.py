"""Build the bilingual word lists that ``--init wechsel`` aligns with, from Debian's FreeDict packages.

    python scripts/make_dictionaries.py [--langs de fr es] [--debs DIR] [--out reference_data/dictionaries]

Each package (``dict-freedict-<xxx>-eng``, version 2022.04.21-1) is fetched from the Debian archive, or read from
``--debs`` where it was downloaded before (``apt-get download dict-freedict-deu-eng``), checked against the SHA-256
pinned below, and unpacked in memory; its dictd entries become ``<lang>-en.tsv`` (``target_word<TAB>english_word``,
single words only; ``data.bilingual.dictd_pairs``). The dictionaries are GPL-licensed, so the lists are rebuilt
here rather than shipped. German-English (Ding) is large; French and Spanish are small (a few thousand headwords).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ds_minimodel.data.bilingual import dictd_pairs  # noqa: E402

VERSION = "2022.04.21-1"
PACKAGES = {  # language: (FreeDict name, SHA-256 of the .deb)
    "de": ("deu-eng", "52fa2ba6c73ebe84df0e4a7b8612a94a45e6026a157fc75f5ae36c4a1106e3db"),
    "fr": ("fra-eng", "fb853d1f3da00ddddfe60dc3b88b5aaca122eecf3ba5c219131bea479d6274db"),
    "es": ("spa-eng", "debf5f88fcdaebe824704664cdbb42b6c14f82ab4adda4e91bc388b16200eefc"),
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


def fetch_deb(archive: str, filename: str, sha256: str, debs: Path | None) -> bytes:
    """A Debian package, from ``debs`` if given (no download) or from the archive folder, checked by its SHA-256."""
    if debs is not None:
        blob = (debs / filename).read_bytes()
    else:
        with urllib.request.urlopen(f"{archive}/{filename}", timeout=120) as response:
            blob = response.read()
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise SystemExit(f"{filename}: SHA-256 {hashlib.sha256(blob).hexdigest()} is not the pinned {sha256}")
    return blob


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", default=list(PACKAGES), choices=list(PACKAGES))
    parser.add_argument("--debs", type=Path, help="folder holding the .deb files already (no download)")
    parser.add_argument("--out", type=Path, default=Path("reference_data/dictionaries"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for lang in args.langs:
        name, sha256 = PACKAGES[lang]
        deb = fetch_deb(ARCHIVE, f"dict-freedict-{name}_{VERSION}_all.deb", sha256, args.debs)
        pairs = dictd_pairs(*dictd_files(deb, name))
        path = args.out / f"{lang}-en.tsv"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(f"# FreeDict {name} {VERSION} (GPL), single-word pairs; scripts/make_dictionaries.py\n"
                       + "".join(f"{t}\t{s}\n" for t, s in pairs), encoding="utf-8")
        os.replace(tmp, path)
        print(f"{path}: {len(pairs):,} pairs, {len({t for t, _ in pairs}):,} {lang} words")


if __name__ == "__main__":
    main()

"""Bilingual word lists: what WECHSEL (Minixhofer et al., 2022) aligns two static-vector spaces with.

A word list is a UTF-8 text file of ``target_word<TAB>source_word`` lines (one pair a line, a word may appear in
many pairs; ``#`` starts a comment line). ``scripts/make_dictionaries.py`` builds them from Debian's FreeDict
packages (dictd format, parsed by ``dictd_pairs``), ``scripts/make_help_lexicons.py`` from word alignments of
parallel help pages (``lexicon_from_links``); any other list in that shape works the same.

The alignment itself: each word's vector is the mean of the static vectors of the pieces its own tokenizer splits it
into as the word stands in running text (``word_encoder``; ``data.static_vectors``: vectors of pieces, not words);
an orthogonal map, fitted by scipy's ``orthogonal_procrustes`` on the unit-length word vectors of the pairs both
tokenizers can embed, turns target vectors into source ones. ``piece_anchors`` reads the same pairs without static
vectors: the target pieces that are a listed word, each with the source piece of its translation (Step 2's word
anchors).
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ds_minimodel.data.hf_tokenizer import WORD_START
from ds_minimodel.errors import InputError

DICTD_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
"""dictd's index numbers: base 64 in this alphabet, most significant digit first, no padding."""


def dictd_number(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + DICTD_DIGITS.index(char)
    return value


def is_word(text: str) -> bool:
    """A word of letters: a letter, then letters and combining marks. Not ``str.isalpha``, which refuses every word
    that carries a vowel sign written as a mark (Khmer, Thai, Devanagari and the other Indic scripts)."""
    return bool(text) and unicodedata.category(text[0])[0] == "L" and all(
        unicodedata.category(c)[0] in "LM" for c in text)


def _translations(line: str) -> Iterator[str]:
    """The single-word translations on one translation line of a FreeDict entry: domain tags (``[adm.]``),
    part-of-speech marks (``<n>``), parenthesised notes and numbering dropped, split at commas and semicolons."""
    line = re.sub(r"\[[^\]]*\]|<[^>]*>|\([^)]*\)|^\s*\d+\.\s", " ", line)
    for part in re.split(r"[,;]", line):
        word = part.strip()
        if is_word(word):
            yield word


def dictd_pairs(index_text: str, dict_text: str) -> list[tuple[str, str]]:
    """(headword, translation) pairs of one FreeDict dictionary in dictd form (its ``.index`` and its decompressed
    ``.dict``), both single words as the dictionary writes them (German nouns keep their capital); the database's
    own ``00-database-*`` entries are skipped. A translation line is a line after the headword's that starts with
    at most one space and is not an example (a quoted line) or a cross-reference (``see:``, ``Synonyms:`` ...)."""
    data = dict_text.encode("utf-8")
    pairs: dict[tuple[str, str], None] = {}
    for row in index_text.splitlines():
        fields = row.split("\t")
        if len(fields) < 3 or fields[0].startswith("00-database") or fields[0].startswith("00database"):
            continue
        start, length = dictd_number(fields[1]), dictd_number(fields[2])
        lines = data[start:start + length].decode("utf-8", errors="replace").splitlines()
        # The entry's first line spells the headword as written (the index lower-cases it), then /IPA/ and <pos>.
        head = re.split(r"\s+[/<]", lines[0].strip(), maxsplit=1)[0] if lines else ""
        if not is_word(head):
            continue
        for line in lines[1:]:
            if not line.strip() or line.startswith("  ") or re.match(r"\s*(\"|[A-Za-z]+:)", line):
                continue
            for word in _translations(line):
                pairs[(head, word)] = None
    return list(pairs)


def parse_links(line: str) -> list[tuple[int, int]]:
    """One line of word links in the Pharaoh format aligners write (``0-0 1-2 ...``: source index, target index)."""
    return [(int(a), int(b)) for a, b in (link.split("-") for link in line.split())]


def lexicon_from_links(target: list[list[str]], source: list[list[str]], forward: list[list[tuple[int, int]]],
                       backward: list[list[tuple[int, int]]], *, min_count: int = 3, min_share: float = 0.3
                       ) -> list[tuple[str, str, int]]:
    """(target word, source word, links) from word-aligned parallel sentences: the links both alignment directions
    agree on (their intersection, the high-precision symmetrisation), counted by word pair over words (``is_word``) of
    two characters or more; a pair is kept when it is linked at least ``min_count`` times and carries at least
    ``min_share`` of its target word's links. Both link lists index (target word, source word); most links first."""
    from collections import Counter

    pairs: Counter[tuple[str, str]] = Counter()
    for t_words, s_words, fwd, bwd in zip(target, source, forward, backward, strict=True):
        for i, j in set(fwd) & set(bwd):
            t, s = t_words[i], s_words[j]
            if len(t) > 1 and len(s) > 1 and is_word(t) and is_word(s):
                pairs[(t, s)] += 1
    per_word: Counter[str] = Counter()
    for (t, _), n in pairs.items():
        per_word[t] += n
    kept = [(t, s, n) for (t, s), n in pairs.items() if n >= min_count and n >= min_share * per_word[t]]
    return sorted(kept, key=lambda p: (-p[2], p[0], p[1]))


@dataclass(frozen=True)
class WordList:
    path: Path
    pairs: list[tuple[str, str]]
    sha256: str

    @classmethod
    def read(cls, path: Path | str) -> WordList:
        """The pairs of a word list file; a line that is not two tab-separated words is refused with its number."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{path}: cannot read the bilingual word list ({exc.strerror or exc})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: the bilingual word list is not UTF-8 (byte {exc.start})") from None
        pairs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not all(f.strip() for f in fields):
                raise InputError(f"{path}:{number}: expected 'target_word<TAB>source_word', got {line[:80]!r}")
            pairs.append((fields[0].strip(), fields[1].strip()))
        if not pairs:
            raise InputError(f"{path}: the bilingual word list has no pairs")
        return cls(path, pairs, hashlib.sha256(raw).hexdigest())


SAMPLE_BYTES = 20 << 20
"""How much of each corpus ``check_covered`` reads: enough to meet any real list's common words."""


def _words(corpus: Path) -> set[str]:
    """The lowercased words of the corpus's first ``SAMPLE_BYTES``, punctuation stripped."""
    with Path(corpus).open(encoding="utf-8", errors="replace") as text:
        return {t.strip(".,;:!?()[]{}\"'«»„“”") for t in text.read(SAMPLE_BYTES).lower().split()}


def check_covered(words: WordList, source_corpus: Path, needed: int) -> None:
    """Refuse, before any work, a word list whose source words the source corpus does not contain: fewer than
    ``needed`` pairs (the static vectors' dimensions, as ``fit_alignment`` needs) with their source word in a sample
    of it. The source side only: the target's script may not put spaces between words (Chinese, Japanese, Khmer),
    so its words cannot be looked up this way. A necessary condition: ``fit_alignment`` asks more."""
    source_words = _words(source_corpus)
    found = sum(s.lower() in source_words for _, s in words.pairs)
    if found < needed:
        raise InputError(f"{words.path}: only {found:,} of its {len(words.pairs):,} pairs have a source word found in "
                         f"{source_corpus} (its first {SAMPLE_BYTES >> 20} MB), fewer than the {needed} WECHSEL's "
                         "alignment needs: is it a word list of these languages, target word first?")


def word_encoder(encode: Callable[[str], list[int]], pieces: list[str]) -> Callable[[str], list[int]]:
    """``encode`` for a word of a list, as the word's pieces stand in running text. SentencePiece marks the start of
    its input as a word start, so a word whose vocabulary has no marked piece for it encodes as the bare mark and
    then its pieces (``▁`` ``クリック``): inside text without spaces (Japanese, Khmer) the word never carries the
    mark, and in spaced text the mark is a piece of its own before it. That leading bare mark says nothing of the word:
    it is dropped, so that a word the vocabulary holds as a piece is one piece (``fit_alignment``'s single-piece
    pairs), and a longer word's mean is of its own pieces."""
    bare = {i for i, piece in enumerate(pieces) if piece == WORD_START}

    def encode_word(word: str) -> list[int]:
        ids = encode(word)
        return ids[1:] if len(ids) > 1 and ids[0] in bare else ids

    return encode_word


def piece_anchors(words: WordList, target: Callable[[str], list[int]], source: Callable[[str], list[int]],
                  first: int) -> dict[int, int]:
    """Target piece id -> source piece id: a target word that is one piece of its vocabulary (as ``target``, a
    ``word_encoder``, encodes it) anchored to the first listed translation that is one source piece; ids below
    ``first`` (the special pieces: an unknown word is ``<unk>``) are never anchors. A word list's order is its
    preference (the help lexicons list a word's most linked translation first)."""
    anchors: dict[int, int] = {}
    for t, s in words.pairs:
        t_ids = target(t)
        if len(t_ids) != 1 or t_ids[0] < first or t_ids[0] in anchors:
            continue
        s_ids = source(s)
        if len(s_ids) == 1 and s_ids[0] >= first:
            anchors[t_ids[0]] = s_ids[0]
    return anchors


def word_vectors(words: list[str], encode: Callable[[str], list[int]], vectors: np.ndarray, known: np.ndarray,
                 max_pieces: int) -> tuple[np.ndarray, np.ndarray]:
    """(vectors (len(words), dim), ok (len(words),) bool): each word's vector is the mean of its pieces' static
    vectors, as ``encode`` splits it; ok where it has at most ``max_pieces`` pieces and every one has a vector."""
    out = np.zeros((len(words), vectors.shape[1]), dtype=np.float64)
    ok = np.zeros(len(words), dtype=bool)
    for i, word in enumerate(words):
        ids = encode(word)
        if 0 < len(ids) <= max_pieces and all(known[j] for j in ids):
            out[i] = vectors[ids].mean(0)
            ok[i] = True
    return out, ok


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@dataclass(frozen=True)
class Alignment:
    """``unit(target_vector - target_mean) @ map`` lands near ``unit(source_vector - source_mean)`` of its
    translation (centred and unit-length, as MUSE and WECHSEL normalise before Procrustes)."""

    map: np.ndarray
    target_mean: np.ndarray
    source_mean: np.ndarray
    record: dict[str, Any]

    def target(self, vectors: np.ndarray) -> np.ndarray:
        return unit_rows(vectors.astype(np.float64) - self.target_mean) @ self.map

    def source(self, vectors: np.ndarray) -> np.ndarray:
        return unit_rows(vectors.astype(np.float64) - self.source_mean)


def fit_alignment(words: WordList, target: tuple[Callable[[str], list[int]], np.ndarray, np.ndarray],
                  source: tuple[Callable[[str], list[int]], np.ndarray, np.ndarray], *, max_pieces: int = 1
                  ) -> Alignment:
    """The orthogonal map between the two static spaces, fitted by Procrustes on the pairs whose words both sides can
    embed in at most ``max_pieces`` pieces each (1: words that are a piece of their vocabulary, whose vectors FastText
    trained; longer words' means of pieces are weaker anchors); ``target``/``source`` are (encode, vectors, known).
    Its record names the list (path, hash), the pairs used, and the mean cosine of those pairs before and after."""
    from scipy.linalg import orthogonal_procrustes

    t_vec, t_ok = word_vectors([t for t, _ in words.pairs], *target, max_pieces=max_pieces)
    s_vec, s_ok = word_vectors([s for _, s in words.pairs], *source, max_pieces=max_pieces)
    use = t_ok & s_ok
    if t_vec.shape[1] != s_vec.shape[1]:
        raise InputError(f"static vectors of {t_vec.shape[1]} and {s_vec.shape[1]} dimensions cannot be aligned")
    if use.sum() < t_vec.shape[1]:
        raise InputError(f"{words.path}: only {int(use.sum())} of its {len(words.pairs):,} pairs have static vectors "
                         f"on both sides (words of at most {max_pieces} piece(s)), fewer than the {t_vec.shape[1]} "
                         "dimensions the map has: too few to fit it")
    t_mean, s_mean = t_vec[use].mean(0), s_vec[use].mean(0)
    x, y = unit_rows(t_vec[use] - t_mean), unit_rows(s_vec[use] - s_mean)
    w, _ = orthogonal_procrustes(x, y)
    record = {"word_list": str(words.path.resolve()), "word_list_sha256": words.sha256, "pairs": len(words.pairs),
              "max_pieces": max_pieces, "pairs_used": int(use.sum()),
              "pair_cosine_before": float((x * y).sum(1).mean()),
              "pair_cosine_after": float((unit_rows(x @ w) * y).sum(1).mean())}
    return Alignment(w, t_mean, s_mean, record)

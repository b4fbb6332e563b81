"""Bilingual word lists (data.bilingual): FreeDict's dictd entries read into pairs, word-list files checked line
by line, and the orthogonal map that WECHSEL aligns static vectors with, on constructed data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ds_minimodel.data.bilingual import (
    DICTD_DIGITS,
    WordList,
    dictd_number,
    dictd_pairs,
    fit_alignment,
    is_word,
    lexicon_from_links,
    parse_links,
    word_encoder,
)
from ds_minimodel.errors import InputError


def dictd_index_number(value: int) -> str:
    digits = ""
    while True:
        digits = DICTD_DIGITS[value % 64] + digits
        value //= 64
        if not value:
            return digits


def test_dictd_entries_become_single_word_pairs_with_the_headword_as_written():
    entries = [
        "00-database-info\nGerman - English\n",
        "Haus /hˈaʊs/ <neut, n, sg>\nhouse <n>\n      \"ein Haus bauen\"  - build a house\n see: {Häuser}\n",
        "Haus /hˈaʊs/ <neut, n, sg>\n [adm.] establishment <n>, institution <n>\n   Synonyms: {Anstalt}\n",
        "frei Haus /frˈaɪ hˈaʊs/\ncarriage free, delivered free\n",  # two-word headword: left out
        "schnell /ʃnˈɛl/ <adj>\n1. quick; fast (speedy), rapid\n",
    ]
    text, index = "", []
    for entry in entries:
        head = entry.split(" /")[0].split("\n")[0]
        index.append(f"{head.lower()}\t{dictd_index_number(len(text.encode()))}\t"
                     f"{dictd_index_number(len(entry.encode()))}")
        text += entry
    assert dictd_number("B0") == 64 + 52 and dictd_number(dictd_index_number(123456)) == 123456
    pairs = dictd_pairs("\n".join(index), text)
    assert pairs == [("Haus", "house"), ("Haus", "establishment"), ("Haus", "institution"),
                     ("schnell", "quick"), ("schnell", "fast"), ("schnell", "rapid")]


def test_a_word_list_file_is_read_and_each_bad_line_named(tmp_path):
    good = tmp_path / "de-en.tsv"
    good.write_text("# a comment\nHaus\thouse\n\nschnell\tfast\n", encoding="utf-8")
    words = WordList.read(good)
    assert words.pairs == [("Haus", "house"), ("schnell", "fast")] and len(words.sha256) == 64
    for content, message in ((b"Haus house\n", ":1: expected"), (b"Haus\thouse\nx\ty\tz\n", ":2: expected"),
                             (b"# only a comment\n", "has no pairs"), (b"Haus\thou\xffse\n", "not UTF-8")):
        bad = tmp_path / "bad.tsv"
        bad.write_bytes(content)
        with pytest.raises(InputError, match=f"{bad}.*{message}" if message.startswith(":") else message):
            WordList.read(bad)
    with pytest.raises(InputError, match="cannot read"):
        WordList.read(tmp_path / "missing.tsv")


def test_the_alignment_recovers_a_rotation_from_word_pairs(tmp_path):
    """Source words are single pieces with random vectors; each target word is two pieces whose mean is the source
    word's vector turned by a rotation. The map fitted on the pairs (words of up to two pieces) undoes the rotation:
    centred and unit-length, every mapped target word lands on its translation."""
    rng = np.random.default_rng(1)
    dim, n = 8, 40
    source_vectors = rng.normal(size=(n, dim))
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    halves = rng.normal(size=(n, dim))
    target_vectors = np.concatenate([source_vectors @ rotation + halves, source_vectors @ rotation - halves])
    path = tmp_path / "xx-en.tsv"
    path.write_text("".join(f"t{i}\ts{i}\n" for i in range(n)) + "unknown\ts0\n", encoding="utf-8")

    def target_encode(word):  # t<i> -> pieces i and n + i; "unknown" -> a piece without a vector
        return [int(word[1:]), n + int(word[1:])] if word.startswith("t") else [2 * n]

    target_known = np.r_[np.ones(2 * n, dtype=bool), False]
    source = (lambda w: [int(w[1:])], source_vectors, np.ones(n, dtype=bool))
    alignment = fit_alignment(WordList.read(path), (target_encode, np.r_[target_vectors, np.zeros((1, dim))],
                                                    target_known), source, max_pieces=2)
    assert np.allclose(alignment.map, rotation.T, atol=1e-8)
    mapped = alignment.target((target_vectors[:n] + target_vectors[n:]) / 2)
    assert np.allclose(mapped, alignment.source(source_vectors), atol=1e-8)
    record = alignment.record
    assert record["pairs"] == n + 1 and record["pairs_used"] == n and record["pair_cosine_after"] > 0.999
    with pytest.raises(InputError, match="at most 1 piece"):  # single-piece words only: no target word qualifies
        fit_alignment(WordList.read(path), (target_encode, np.r_[target_vectors, np.zeros((1, dim))], target_known),
                      source)
    with pytest.raises(InputError, match="fewer than the 8 dimensions"):
        short = tmp_path / "short.tsv"
        short.write_text("t0\ts0\nt1\ts1\n", encoding="utf-8")
        fit_alignment(WordList.read(short), (target_encode, target_vectors, target_known[:-1]), source,
                      max_pieces=2)


def test_a_word_is_encoded_as_its_pieces_stand_in_running_text():
    """SentencePiece encodes a word alone as the bare word-start mark, then the word's pieces, where its vocabulary has
    no marked piece for it (a word inside unspaced text: Japanese, Khmer). ``word_encoder`` drops that leading mark,
    so such a word is one piece for the alignment; a marked piece, a mark inside a word and a word that is the mark
    alone are kept."""
    pieces = ["<pad>", "\u2581", "クリック", "\u2581file", "s", "x"]
    spelled = {"クリック": [1, 2], "file": [3], "files": [3, 4], "xs": [1, 5, 4], "x\u2581": [5, 1], "": [1]}
    encode = word_encoder(spelled.__getitem__, pieces)
    assert [encode(w) for w in spelled] == [[2], [3], [3, 4], [5, 4], [5, 1], [1]]
    # In the alignment: the word counts as the single piece it is (the mark has a vector too, and would spoil it).
    vectors, known = np.eye(len(pieces)), np.ones(len(pieces), dtype=bool)
    words = WordList(path=Path("ja-en.tsv"), pairs=[("クリック", "click"), ("file", "file")], sha256="")
    source = ({"click": [2], "file": [3]}.__getitem__, vectors, known)
    with pytest.raises(InputError, match=r"only 1 of its 2 pairs"):
        fit_alignment(words, (spelled.__getitem__, vectors, known), source)
    with pytest.raises(InputError, match=r"only 2 of its 2 pairs"):  # both single pieces now (and too few to fit)
        fit_alignment(words, (encode, vectors, known), source)


def test_a_lexicon_keeps_the_pairs_both_alignment_directions_link_often():
    target = [["Die", "Zelle", "ist", "leer", "."]] * 4 + [["Zelle", "3"]]
    source = [["The", "cell", "is", "empty", "."]] * 4 + [["cell", "3"]]
    both = [(0, 0), (1, 1), (2, 2), (4, 4)]
    forward = [both + [(3, 3)]] * 4 + [[(0, 0), (1, 1)]]
    backward = [both] * 4 + [[(0, 0), (1, 1)]]
    lexicon = lexicon_from_links(target, source, forward, backward, min_count=3)
    # 'leer'-'empty' is linked one way only, '.' and '3' are not words: neither is kept; 'Zelle' has 5 links.
    assert lexicon == [("Zelle", "cell", 5), ("Die", "The", 4), ("ist", "is", 4)]
    assert lexicon_from_links(target, source, forward, backward, min_count=5) == [("Zelle", "cell", 5)]
    # A translation that carries under min_share of its word's links is noise of the aligner, not a sense.
    noisy = [[(1, 1)]] * 9 + [[(1, 0)]] * 3
    words = [["x", "Zelle"]] * 12
    english = [["the", "cell"]] * 12
    assert lexicon_from_links(words, english, noisy, noisy, min_count=3, min_share=0.3) == [("Zelle", "cell", 9)]
    assert ("Zelle", "the", 3) in lexicon_from_links(words, english, noisy, noisy, min_count=3, min_share=0.2)


def test_words_whose_vowels_are_combining_marks_are_words():
    # Khmer's and Devanagari's vowel signs are marks (Mn/Mc), which str.isalpha refuses: the Khmer help lexicon
    # kept only vowel-less fragments of words until words were read this way.
    for word in ("ឯកសារ", "ទិន្នន័យ", "किताब", "挿入", "ドキュメント", "Zelle", "été"):
        assert is_word(word) and not (word.isalpha() and word in ("ឯកសារ", "किताब"))
    for word in ("", "3", "x3", "\u0301a", "-", "don't", "ا\u064b1"):
        assert not is_word(word), word
    target = [["ចុច", "លើ", "ប៊ូតុង"]] * 3
    source = [["click", "the", "button"]] * 3
    links = [[(0, 0), (2, 2)]] * 3
    assert lexicon_from_links(target, source, links, links) == [("ចុច", "click", 3), ("ប៊ូតុង", "button", 3)]
    text, index = "", []
    for head, entry in (("किताब", "किताब <n>\nbook\n"), ("ఇల్లు", "ఇల్లు <n>\nhouse, home\n")):
        index.append(f"{head}\t{dictd_index_number(len(text.encode()))}\t{dictd_index_number(len(entry.encode()))}")
        text += entry
    assert dictd_pairs("\n".join(index), text) == [("किताब", "book"), ("ఇల్లు", "house"), ("ఇల్లు", "home")]


def test_pharaoh_links_are_parsed_as_index_pairs():
    assert parse_links("0-0 2-1 10-3") == [(0, 0), (2, 1), (10, 3)]
    assert parse_links("") == []

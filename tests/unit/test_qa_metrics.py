"""MLQA's official answer normalisation and F1 / exact match, on hand-computed cases per language."""

from __future__ import annotations

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.tasks.qa import (
    SQUAD_V1,
    evaluate_qa,
    exact_match,
    f1_score,
    max_over_ground_truths,
    normalize_answer,
)
from ds_minimodel.tasks.readers import QAExample


@pytest.mark.parametrize("lang, text, normalized", [
    # English: lower-case, punctuation gone, a/an/the removed as whole words only ("theatre" stays).
    ("en", "The  Quick, brown fox!", "quick brown fox"),
    ("en", "An apple at the theatre", "apple at theatre"),
    # Any Unicode punctuation (P*) goes, plus ASCII's symbols ($); other symbols (€) stay.
    ("en", "“5 €” – or $5…", "5 € or 5"),
    # German articles in every case; "Dieser" is not one.
    ("de", "Das Haus des Nikolaus", "haus nikolaus"),
    ("de", "Dem Mann, einer Frau: dieser Hund", "mann frau dieser hund"),
    # Spanish: punctuation first, so "«el»" becomes the article "el"; "elefante" is not an article.
    ("es", "¿Dónde está «el» museo?", "dónde está museo"),
    ("es", "Los Ángeles y el elefante", "ángeles y elefante"),
    # Vietnamese: MLQA's list (classifiers, "của", "là").
    ("vi", "Cái bàn của tôi", "bàn tôi"),
    # Hindi: no articles; the danda "।" is punctuation (Po).
    ("hi", "भारत की राजधानी।", "भारत की राजधानी"),
    # Chinese: every CJK character is a token; runs of other characters split on whitespace.
    ("zh", "北京大学。", "北 京 大 学"),
    ("zh", "2008年北京奥运会", "2008 年 北 京 奥 运 会"),
    ("zh", "iPhone 6手机", "iphone 6 手 机"),
    # Arabic: the letters "ال" are replaced by a space wherever they occur (MLQA's regex), so the article goes...
    ("ar", "الكتاب الجديد", "كتاب جديد"),
    # ...and so does the same pair inside a word: "مال" (money) -> "م".
    ("ar", "مال", "م"),
    # SQuAD v1.1 (XQuAD): ASCII punctuation only, English articles; the guillemets stay.
    (SQUAD_V1, "«The» café!", "« » café"),
])
def test_normalize_answer(lang: str, text: str, normalized: str) -> None:
    assert normalize_answer(text, lang) == normalized


def test_english_f1_and_exact_match() -> None:
    # prediction -> [cat, sat, on, mat], truth -> [cat, on, mat] (articles removed)
    # common = 3; precision = 3/4, recall = 3/3; F1 = 2 * 3/4 * 1 / (3/4 + 1) = 6/7
    assert f1_score("the cat sat on a mat", "a cat on the mat", "en") == pytest.approx(6 / 7)
    assert exact_match("the cat sat on a mat", "a cat on the mat", "en") == 0.0
    assert exact_match("The Cat.", "cat", "en") == 1.0
    assert f1_score("dog", "cat", "en") == 0.0


def test_german_and_spanish_f1() -> None:
    # [in, stadt, köln] vs [köln]: common 1; P = 1/3, R = 1; F1 = 2 * 1/3 / (4/3) = 1/2
    assert f1_score("in der Stadt Köln", "Köln", "de") == pytest.approx(0.5)
    assert exact_match("Die Nordsee", "Nordsee", "de") == 1.0
    # [niños, de, casa] vs [casa]: common 1; P = 1/3, R = 1; F1 = 2 * 1/3 / (4/3) = 1/2
    assert f1_score("Los niños de la casa", "una casa", "es") == pytest.approx(0.5)
    # "del" is not in MLQA's Spanish list: [casa, del, niño] vs [casa, de, niño]: common 2; P = R = 2/3 -> 2/3
    assert f1_score("la casa del niño", "casa de el niño", "es") == pytest.approx(2 / 3)


def test_chinese_f1_counts_characters() -> None:
    # [北, 京, 大, 学] vs [北, 京]: common 2; P = 2/4, R = 2/2; F1 = 2 * 1/2 * 1 / (3/2) = 2/3
    assert f1_score("北京大学", "北京", "zh") == pytest.approx(2 / 3)
    # Repeated characters count with multiplicity: [上, 海, 上] vs [上]: common 1; P = 1/3, R = 1 -> 1/2
    assert f1_score("上海上", "上", "zh") == pytest.approx(0.5)
    # The same strings under whitespace rules are one token each: no overlap at all.
    assert f1_score("北京大学", "北京", "en") == 0.0


def test_arabic_article_removal_in_f1() -> None:
    # Both sides lose "ال": [كتاب, جديد] vs [كتاب, جديد] -> F1 1, EM 1
    assert f1_score("الكتاب الجديد", "كتاب جديد", "ar") == 1.0
    assert exact_match("الكتاب الجديد", "كتاب جديد", "ar") == 1.0
    # [في, مدرسة] vs [مدرسة]: common 1; P = 1/2, R = 1; F1 = 2 * 1/2 / (3/2) = 2/3
    assert f1_score("في المدرسة", "المدرسة", "ar") == pytest.approx(2 / 3)


def test_answer_that_normalises_to_nothing() -> None:
    # As in the official script: two empty answers match exactly, but with no tokens F1 is 0.
    assert exact_match("The", "the.", "en") == 1.0
    assert f1_score("The", "the.", "en") == 0.0


def test_max_over_ground_truths_and_evaluate() -> None:
    assert max_over_ground_truths(exact_match, "Nordsee", ["die Nordsee", "Ostsee"], "de") == 1.0
    examples = [
        QAExample("q1", "?", "ctx", ["die Nordsee", "Nordsee"], [0, 4]),
        QAExample("q2", "?", "ctx", ["Köln"], [0]),
        QAExample("q3", "?", "ctx", ["Basel"], [0]),
    ]
    predictions = {"q1": "Nordsee", "q2": "in der Stadt Köln"}  # q3 unanswered: scores 0
    # F1: q1 1, q2 1/2 (see above), q3 0 -> 100 * 1.5 / 3 = 50; EM: q1 only -> 100 / 3
    scores = evaluate_qa(predictions, examples, "de")
    assert scores["f1"] == pytest.approx(50.0)
    assert scores["exact_match"] == pytest.approx(100 / 3)


def test_unknown_language_is_refused() -> None:
    with pytest.raises(InputError, match="'fr'.*en, es, de, vi, ar, hi, zh"):
        normalize_answer("le chat", "fr")

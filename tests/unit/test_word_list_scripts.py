"""scripts/make_dictionaries.py and scripts/make_help_lexicons.py take any language Debian ships the resource for,
and keep the task's dev and test text out of the lexicons whether the task folder is unpacked or not. (Fetching and
aligning need the Debian archive: run by hand, RESULTS.md.)"""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
TASK = SCRIPTS.parent / "reference_data/tasks/lohelp"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # make_help_lexicons imports make_dictionaries by name
    spec.loader.exec_module(module)
    return module


dictionaries = load("make_dictionaries")
lexicons = load("make_help_lexicons")


def test_languages_are_the_pinned_ones_or_named_with_their_package():
    pinned = dictionaries.PACKAGES
    got = dictionaries.language_packages(["de", "it=ita", "fr=fra", "es=xyz"], pinned)
    assert got["de"] == pinned["de"] and got["fr"] == pinned["fr"]  # the same package keeps its pinned hash
    assert got["it"] == ("ita", None) and got["es"] == ("xyz", None)  # another package is not checked by it
    # Debian 12 ships some at another version than the pinned ones: named after @, and then not checked by a hash
    versioned = dictionaries.versioned_packages(["fi=fin@2022.12.07-2", "de"], pinned)
    assert versioned["fi"] == ("fin", None, "2022.12.07-2") and versioned["de"] == (*pinned["de"], dictionaries.VERSION)
    assert dictionaries.versioned_packages(["de=deu@2022.12.07-2"], pinned)["de"] == ("deu", None, "2022.12.07-2")
    for bad, message in (("it", "no package name known for it; write it=NAME"), ("=ita", "expected LANG"),
                         ("de=../x", "expected LANG"), ("fi=fin@../x", "expected LANG")):
        with pytest.raises(SystemExit, match=message):
            dictionaries.language_packages([bad], pinned)


def test_an_english_to_target_dictionary_is_read_backwards_with_each_words_likeliest_english_first():
    assert dictionaries.dictionary_name("ita") == ("ita-eng", False)
    assert dictionaries.dictionary_name("eng-rus") == ("eng-rus", True)
    assert dictionaries.versioned_packages(["ru=eng-rus"], dictionaries.PACKAGES)["ru"] == (
        "eng-rus", None, dictionaries.VERSION)
    # dictd_pairs' (English headword, translation) pairs in entry order: "на" is "on"'s first translation, "a"'s
    # second
    english_first = [("a", "в"), ("a", "на"), ("horse", "конь"), ("horse", "лошадь"), ("on", "на")]
    assert dictionaries.reversed_pairs(english_first) == [
        ("в", "a"), ("конь", "horse"), ("на", "on"), ("на", "a"), ("лошадь", "horse")]


def test_a_help_language_is_pinned_or_named_by_debians_package_and_one_debian_lacks_is_refused_before_fetching():
    got = lexicons.help_packages(["zh", "pt=pt-br", "it"])
    assert got["zh"] == lexicons.PACKAGES["zh"] and got["zh"][0] == "zh-cn"  # pinned: the results' package
    assert got["pt"] == ("pt-br", None) and got["it"] == ("it", None)
    with pytest.raises(SystemExit, match=r"no LibreOffice help package for ar \(libreoffice-help-ar\).* zh-cn zh-tw"):
        lexicons.help_packages(["ar", "de"])


def test_the_held_out_text_is_read_from_the_packed_task_files_too(tmp_path):
    packed = tmp_path / "lohelp"
    packed.mkdir()
    for path in TASK.iterdir():
        if path.name.endswith(".xz") or path.name == "splits.tsv":
            shutil.copy(path, packed)
    pages, texts = lexicons.held_out(packed)
    assert len(pages) > 100 and len(texts) > 1000
    if (TASK / "dev.de.jsonl").is_file():  # unpacked here: the same text either way
        unpacked = tmp_path / "unpacked"
        unpacked.mkdir()
        for path in TASK.iterdir():  # the shipped files only (not a language make_language_data.py built here)
            if path.with_name(path.name + ".xz").is_file() or path.name == "splits.tsv":
                shutil.copy(path, unpacked)
        assert lexicons.held_out(unpacked) == (pages, texts)
    for path in packed.glob("test.*"):
        path.unlink()
    with pytest.raises(SystemExit, match="no dev or test files"):
        lexicons.held_out(packed)


language_data = load("make_language_data")


def test_a_new_languages_task_items_are_real_translations_with_the_english_labels_and_masked_names():
    english = {"dev": [{"id": "scalc/a.html#p1", "text": "Sums the cells in ProductName.", "label": "scalc"},
                       {"id": "scalc/a.html#p2", "text": "Opens the dialog.", "label": "scalc"},
                       {"id": "scalc/a.html#p3", "text": "Missing here.", "label": "scalc"},
                       {"id": "scalc/a.html#p4", "text": "Clears it.", "label": "scalc"}],
               "test": [{"id": "swriter/b.html#p1", "text": "Inserts a frame.", "label": "swriter"},
                        {"id": "swriter/b.html#p2", "text": "Clears it.", "label": "swriter"}]}
    pages = {"scalc/a.html": {"p1": "Summiert die Zellen in LibreOffice Calc.", "p2": "Opens the dialog.",
                              "p4": "Leert  es.\u200b"},
             "swriter/b.html": {"p1": "Fügt einen Rahmen in Writer ein.", "p2": "Leert es."}}
    items, left_out = language_data.task_items(pages, english)
    assert items["test"] == [{"id": "swriter/b.html#p1", "text": "Fügt einen Rahmen in ProductName ein.",
                              "label": "swriter"},
                             {"id": "swriter/b.html#p2", "text": "Leert es.", "label": "swriter"}]
    assert items["dev"] == [{"id": "scalc/a.html#p1", "text": "Summiert die Zellen in ProductName.", "label": "scalc"}]
    assert left_out == {"no such paragraph": 1, "not translated": 1, "duplicate": 1}  # p4 is test's "Leert es."


def test_a_new_languages_corpus_holds_no_dev_or_test_page_nor_their_text_nor_english_left_untranslated():
    split_of = {"scalc/dev.html": "dev", "scalc/train.html": "train"}
    pages = {"scalc/dev.html": {"p1": "Geheimer Testsatz."},
             "scalc/train.html": {"p1": "Geheimer Testsatz.", "p2": "Ein Satz zum Lernen.", "p3": "Open the file.",
                                  "p4": "12345", "p5": "Ein Satz zum Lernen."},
             "shared/other.html": {"p1": "Noch ein Satz."}}
    english = {"scalc/train.html": {"p2": "A sentence to learn from.", "p3": "Open the file."}}
    text, stats = language_data.corpus(pages, english, split_of, None)
    assert text == "Ein Satz zum Lernen.\n\nNoch ein Satz.\n"
    assert stats == {"pages": 2, "paragraphs": 2, "left in English": 1}
    small, stats = language_data.corpus(pages, english, split_of, 30)
    assert small == "Ein Satz zum Lernen.\n" and stats["pages"] == 1


def test_a_shipped_language_or_an_earlier_build_is_never_written_over(tmp_path):
    out = tmp_path / "data"
    (out / "corpus").mkdir(parents=True)
    (out / "corpus" / "de.txt.xz").write_bytes(b"")
    with pytest.raises(SystemExit, match="shipped with the project"):
        language_data.main(["--langs", "de", "--out", str(out), "--task", str(TASK)])
    (out / "corpus" / "ja.txt").write_text("an earlier build")
    with pytest.raises(SystemExit, match="exists .an earlier build.; --force writes over it"):
        language_data.main(["--langs", "ja", "--out", str(out), "--task", str(TASK)])
    assert (out / "corpus" / "ja.txt").read_text() == "an earlier build"


def test_words_are_split_at_spaces_or_by_icu_where_the_script_has_none():
    # Words of spaced scripts keep their combining vowel signs (Python's \w alone splits a Devanagari word there).
    assert lexicons.words("Choose Insert - Table, किताब पढ़ो", "en") == ["Choose", "Insert", "-", "Table", ",",
                                                                         "किताब", "पढ़ो"]
    assert lexicons.words("표를 삽입하려면", "ko") == ["표를", "삽입하려면"]
    # Japanese and Khmer put no space between words: without a segmenter a paragraph would be one "word".
    assert lexicons.words("挿入メニューから表を選択します。", "ja") == ["挿入", "メニュー", "から", "表", "を", "選択",
                                                            "し", "ます", "。"]
    assert lexicons.words("ចុចលើប៊ូតុងនេះ", "km") == ["ចុច", "លើ", "ប៊ូតុង", "នេះ"]

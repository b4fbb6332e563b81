"""scripts/make_word_order_task.py: a task that holds the same words under both labels, the same labels for an item in
every language, and the same files on a rebuild."""
from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from ds_minimodel.tasks.formats import read_examples

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/make_word_order_task.py"
spec = importlib.util.spec_from_file_location("make_word_order_task", SCRIPT)
task = importlib.util.module_from_spec(spec)
spec.loader.exec_module(task)


def write(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))


def test_the_labels_differ_only_in_one_swapped_pair_and_agree_across_languages(tmp_path):
    source = tmp_path / "task"
    source.mkdir()
    english = [{"id": f"p{i}", "text": f"word{i} takes the first place and then the {i} next one", "label": "x"}
               for i in range(200)]
    german = [{"id": f"p{i}", "text": f"wort{i} nimmt den ersten Platz und dann den {i} nächsten", "label": "x"}
              for i in range(200)]
    write(source / "train.en.jsonl", english + [{"id": "long", "text": "w " * 40, "label": "x"},
                                               {"id": "short", "text": "two words", "label": "x"}])
    write(source / "test.de.jsonl", german)
    assert task.main(["--from", str(source), "--out", str(tmp_path / "out"), "--langs", "en", "de"]) == 0
    built = {lang: {json.loads(line)["id"]: json.loads(line) for line in
                    (tmp_path / "out" / f"{split}.{lang}.jsonl").read_text().splitlines()}
             for split, lang in (("train", "en"), ("test", "de"))}
    assert set(built["en"]) == {f"p{i}" for i in range(200)}  # 41 words and 2 words are out of the default range
    labels = Counter(e["label"] for e in built["en"].values())
    assert labels.keys() == {"original", "inverted"} and 80 < labels["inverted"] < 120
    for lang, source_items in (("en", english), ("de", german)):
        for item in source_items:
            example = built[lang][item["id"]]
            assert example["label"] == built["en"][item["id"]]["label"]  # parallel items: one label
            words, written = example["text"].split(), item["text"].split()
            assert Counter(words) == Counter(written)  # the same bag of words under both labels
            moved = [i for i, (a, b) in enumerate(zip(words, written)) if a != b]
            if example["label"] == "original":
                assert moved == []
            else:
                assert len(moved) == 2 and moved[1] == moved[0] + 1  # one pair of neighbours swapped
    # A rebuild gives the same files; the output reads as a generic task.
    first = (tmp_path / "out/test.de.jsonl").read_text()
    task.main(["--from", str(source), "--out", str(tmp_path / "out"), "--langs", "de"])
    assert (tmp_path / "out/test.de.jsonl").read_text() == first
    assert read_examples("generic", tmp_path / "out/train.en.jsonl").labels == ["inverted", "original"]


def test_text_without_spaces_and_a_folder_without_files_are_refused(tmp_path):
    source = tmp_path / "task"
    source.mkdir()
    write(source / "test.ja.jsonl", [{"id": i, "text": "単語を入れ替えることはできない", "label": "x"} for i in range(30)])
    with pytest.raises(SystemExit) as err:
        task.main(["--from", str(source), "--out", str(tmp_path / "out"), "--langs", "ja"])
    assert err.value.code == 2
    with pytest.raises(SystemExit):
        task.main(["--from", str(source), "--out", str(tmp_path / "out"), "--langs", "xx"])

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
    for bad, message in (("it", "no package name known for it; write it=NAME"), ("=ita", "expected LANG"),
                         ("de=../x", "expected LANG")):
        with pytest.raises(SystemExit, match=message):
            dictionaries.language_packages([bad], pinned)


def test_the_held_out_text_is_read_from_the_packed_task_files_too(tmp_path):
    packed = tmp_path / "lohelp"
    packed.mkdir()
    for path in TASK.iterdir():
        if path.name.endswith(".xz") or path.name == "splits.tsv":
            shutil.copy(path, packed)
    pages, texts = lexicons.held_out(packed)
    assert len(pages) > 100 and len(texts) > 1000
    if (TASK / "dev.de.jsonl").is_file():  # unpacked here: the same text either way
        assert lexicons.held_out(TASK) == (pages, texts)
    for path in packed.glob("test.*"):
        path.unlink()
    with pytest.raises(SystemExit, match="no dev or test files"):
        lexicons.held_out(packed)

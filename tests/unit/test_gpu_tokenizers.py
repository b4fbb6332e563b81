"""Tokenizers and static vectors made before a GPU lease (``tools.gpu_tokenizers``): trained as the pipeline would
train them, used by the reference part only for the very text and settings they were made with, kept across
preparations."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import lzma
from pathlib import Path
from types import SimpleNamespace

import pytest
import sentencepiece as spm

from ds_minimodel.data.prepare import prepare_tokenizer
from ds_minimodel.pipeline.plan import tokenizer_settings
from ds_minimodel.pipeline.settings import PipelineConfig, check
from ds_minimodel.tools import gpu_tokenizers
from ds_minimodel.tools.gpu_common import GPU, REPO, GpuRunSpec
from ds_minimodel.tools.gpu_reference import reference_config, step2_inits
from ds_minimodel.tools.gpu_tokenizers import MANIFEST, carried, train_carried

DEMO = REPO / "demo_data/corpus"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> SimpleNamespace:
    """The GPU reference's config over two small corpora, English as given text and German packed as the repository
    ships its corpora (``.xz`` beside a name that does not exist), and its tokenizers trained before the "lease"."""
    root = tmp_path_factory.mktemp("carried")
    en, de = root / "en.txt", root / "de.txt"
    en.write_text("".join((DEMO / "en.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:2000]))
    de_text = "".join((DEMO / "de.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:2000])
    Path(f"{de}.xz").write_bytes(lzma.compress(de_text.encode()))
    config = json.loads((REPO / "configs/reference_gpu.json").read_text())
    config.update(vocab_size=300, source={"lang": "en", "corpus": str(root / "config-en.txt")},
                  targets=[{"lang": "de", "corpus": str(de)}])
    path = root / "config.json"
    path.write_text(json.dumps(config))
    manifest = train_carried(path, en, root / "tok")
    return SimpleNamespace(root=root, en=en, de_text=de_text, config_path=path, cfg=PipelineConfig.load(path),
                           folder=root / "tok", manifest=manifest)


def pieces(model: str | Path) -> list[str]:
    processor = spm.SentencePieceProcessor(model_file=str(model))
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def test_each_language_is_trained_as_the_pipeline_would_train_it(prepared, tmp_path):
    assert sorted(prepared.manifest) == ["de", "en"] and (prepared.folder / MANIFEST).is_file()
    assert prepared.manifest["en"]["corpus"] == str(prepared.en)  # the English given, not the config's
    cfg = prepared.cfg
    own = prepare_tokenizer(prepared.en, tmp_path / "en", **tokenizer_settings(cfg, cfg.source))
    assert pieces(own) == pieces(prepared.folder / "en.model")
    assert len(pieces(prepared.folder / "de.model")) == 300
    assert prepared.manifest["de"]["static_vectors"] == "de.npz" and "static_vectors" not in prepared.manifest["en"]


def test_the_carried_vectors_serve_the_german_the_lease_prepares_without_gensim(prepared, tmp_path, monkeypatch):
    """On the GPU machine the German is unpacked and prepared elsewhere with the carried tokenizer; its Step 2 reads
    the carried vectors (gensim absent there), equal to what it would have trained itself."""
    import sys

    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors

    cfg = prepared.cfg
    de = tmp_path / "de.txt"
    de.write_text(prepared.de_text, encoding="utf-8")
    target = dataclasses.replace(cfg.targets[0], corpus=str(de), tokenizer=str(prepared.folder / "de.model"))
    prepare(de, tmp_path / "data", **tokenizer_settings(cfg, target), progress=False)
    given = gpu_tokenizers.carried_vectors(prepared.folder, cfg, dataclasses.replace(target, tokenizer=None))
    settings = StaticSettings(seed=cfg.seed, rare=cfg.step2.get("rare_vectors"))
    trained = train_static_vectors(tmp_path / "data", pieces(prepared.folder / "de.model"), settings, cache=False)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "gensim", None)
        _, known, record = train_static_vectors(tmp_path / "data", pieces(prepared.folder / "de.model"), settings,
                                                given=given)
    assert given == str(prepared.folder / "de.npz") and record["vectors_sha256"] == trained[2]["vectors_sha256"]
    assert (known == trained[1]).all()


def test_a_carried_tokenizer_serves_only_its_own_text_and_settings(prepared, tmp_path):
    cfg, folder = prepared.cfg, prepared.folder
    source = dataclasses.replace(cfg.source, corpus=str(prepared.en))
    assert carried(folder, cfg, source) == str(folder / "en.model")
    de = tmp_path / "de.txt"  # the German text unpacked, as the lease's run unpacks it
    de.write_text(prepared.de_text, encoding="utf-8")
    assert carried(folder, cfg, dataclasses.replace(cfg.targets[0], corpus=str(de))) == str(folder / "de.model")
    cut = tmp_path / "cut.txt"  # --tiny's cut corpus: another text
    cut.write_text("".join(prepared.en.read_text(encoding="utf-8").splitlines(keepends=True)[:1000]))
    assert carried(folder, cfg, dataclasses.replace(source, corpus=str(cut))) is None
    assert carried(folder, dataclasses.replace(cfg, vocab_size=400), source) is None  # other settings
    assert carried(folder, cfg, dataclasses.replace(source, tokenizer=str(folder / "de.model"))) is None  # given
    assert carried(None, cfg, source) is None and carried(tmp_path, cfg, source) is None  # nothing carried


def test_the_reference_run_takes_them_for_its_own_corpora_and_trains_the_rest(prepared, tmp_path, monkeypatch):
    def config_for(english: Path, config: Path = prepared.config_path) -> PipelineConfig:
        spec = GpuRunSpec(out=tmp_path / "out", work=tmp_path / "work", parts=("reference",),
                          config=config, english=str(english), tokenizers=prepared.folder)
        return reference_config(SimpleNamespace(spec=spec, sizes=GPU, work=tmp_path / "work", cuda=False))

    made = config_for(prepared.en)
    assert made.source.tokenizer == str(prepared.folder / "en.model")
    assert made.targets[0].tokenizer == str(prepared.folder / "de.model")  # German unpacked from its .xz
    assert made.targets[0].static_vectors == str(prepared.folder / "de.npz") and made.source.static_vectors is None
    assert step2_inits(made) == {"de": "focus (carried vectors)"}
    other = tmp_path / "other.txt"
    other.write_text(prepared.en.read_text(encoding="utf-8") + "one more line\n", encoding="utf-8")
    made = config_for(other)
    assert made.source.tokenizer is None and made.targets[0].tokenizer == str(prepared.folder / "de.model")
    # A German without carried vectors: trained where gensim is installed, the overlap rows where it is not.
    (prepared.folder / "de.npz").rename(tmp_path / "away.npz")
    try:
        assert step2_inits(config_for(prepared.en)) == {"de": "focus"}
        find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gensim"
                            else find_spec(name, *a))
        assert step2_inits(config_for(prepared.en)) == {"de": "overlap"}
        listed = json.loads(prepared.config_path.read_text())  # the recipe with a word list: its anchors stay
        listed["targets"][0]["word_list"] = str(REPO / "reference_data/lexicons/de-en.help.tsv")
        prepared.config_path.with_name("listed.json").write_text(json.dumps(listed))
        made = config_for(prepared.en, prepared.config_path.with_name("listed.json"))
        assert step2_inits(made) == {"de": "overlap + word anchors"} and made.targets[0].word_list
        check(made, "listed", world_size=1)
    finally:
        (tmp_path / "away.npz").rename(prepared.folder / "de.npz")


def test_wechsel_carries_the_sources_vectors_too_and_the_reference_run_gives_them(prepared, tmp_path):
    """WECHSEL aligns both languages' vectors: English's are carried beside German's, and given to the pipeline."""
    config = json.loads(prepared.config_path.read_text())
    config["step2"] = {**config["step2"], "init": "wechsel"}
    config["targets"][0]["word_list"] = str(REPO / "reference_data/lexicons/de-en.help.tsv")
    path = tmp_path / "wechsel.json"
    path.write_text(json.dumps(config))
    manifest = train_carried(path, prepared.en, tmp_path / "tok", earlier=prepared.folder)
    assert manifest["en"]["static_vectors"] == "en.npz" and manifest["de"]["static_vectors"] == "de.npz"
    assert (tmp_path / "tok/de.npz").read_bytes() == (prepared.folder / "de.npz").read_bytes()  # kept
    spec = GpuRunSpec(out=tmp_path / "out", work=tmp_path / "work", parts=("reference",), config=path,
                      english=str(prepared.en), tokenizers=tmp_path / "tok")
    made = reference_config(SimpleNamespace(spec=spec, sizes=GPU, work=tmp_path / "work", cuda=False))
    assert made.source.static_vectors == str(tmp_path / "tok/en.npz")
    assert made.targets[0].static_vectors == str(tmp_path / "tok/de.npz")
    assert step2_inits(made) == {"de": "wechsel (carried vectors)"}


def test_a_new_preparation_keeps_the_tokenizers_an_earlier_one_trained_on_the_same_text(prepared, tmp_path,
                                                                                          monkeypatch):
    import gensim.models

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(gpu_tokenizers, "prepare_tokenizer", no_training)
    monkeypatch.setattr(gensim.models, "FastText", no_training)
    manifest = train_carried(prepared.config_path, prepared.en, tmp_path / "again", earlier=prepared.folder)
    assert manifest == prepared.manifest
    for name in ("en.model", "de.model", "de.npz"):
        assert (tmp_path / "again" / name).read_bytes() == (prepared.folder / name).read_bytes()
    with pytest.raises(AssertionError, match="trained again"):  # another text is trained
        train_carried(prepared.config_path, prepared.root / "de.txt.xz", tmp_path / "other", earlier=prepared.folder)


def test_a_cut_task_file_keeps_lines_spread_through_it_and_a_cut_corpus_its_first_bytes(tmp_path):
    from ds_minimodel.tools.gpu_common import materialise

    grouped = tmp_path / "task.jsonl.xz"  # grouped by label, as lohelp's files are
    grouped.write_bytes(lzma.compress("".join(f"{label} {i}\n" for label in "abcd" for i in range(25)).encode()))
    kept = Path(materialise(tmp_path / "work", grouped, lines=8)).read_text().splitlines()
    assert kept == ["a 0", "a 12", "b 0", "b 12", "c 0", "c 12", "d 0", "d 12"]
    assert Path(materialise(tmp_path / "w2", grouped, lines=1000)).read_text().count("\n") == 100
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("ab\ncd\nef\n")
    assert Path(materialise(tmp_path / "w3", corpus, max_bytes=7)).read_text() == "ab\ncd\n"

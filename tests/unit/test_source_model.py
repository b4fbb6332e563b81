"""A pipeline that starts from an existing English model (``source.model``, ``pipeline.source_model``): what the config
may say, what is refused before any work (one sentence each, naming the file), the plan it gives, and the record
that ties a folder's finished steps to the model.

Tiny random BERT folders (3 layers of width 32) with a WordPiece tokenizer trained here: nothing is downloaded.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ds_minimodel.data.tokenizer import Tokenizer, train_sentencepiece
from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.settings import PipelineConfig
from tests.unit.test_hf import SHAPE, _bert_tokenizer, _perturbed, transformers

ROOT = Path(__file__).resolve().parents[2]
DEMO = json.loads((ROOT / "configs/demo.json").read_text())
STAGE = {"ds_config": "ds_configs/cpu_fp32.json", "steps": 4, "save_every": 4}


def tiny_bert(folder: Path, *, head: bool, seed: int = 0) -> Path:
    """A 3-layer BERT folder: BertForMaskedLM (``head``) or a bare BertModel, with a lower-casing WordPiece."""
    import torch

    vocab = _bert_tokenizer(folder)
    config = transformers.BertConfig(vocab_size=vocab, max_position_embeddings=128, pad_token_id=0,
                                     **{**SHAPE, "num_hidden_layers": 3})
    torch.manual_seed(seed)
    model = transformers.BertForMaskedLM(config) if head else transformers.BertModel(config)
    _perturbed(model).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"bare": tiny_bert(root / "bare", head=False), "mlm": tiny_bert(root / "mlm", head=True),
            "bare-2": tiny_bert(root / "bare-2", head=False, seed=1)}


def config(tmp_path: Path, model: Path | str | None, **changes) -> Path:
    """configs/demo.json over ``model``: BL_BASE and MiniPost, no step1, a head section for a bare encoder."""
    cfg = {**DEMO, "out": str(tmp_path / "out"), "systems": ["bl_base", "minipost"],
           "source": {**DEMO["source"], "model": None if model is None else str(model)}, "head": STAGE}
    del cfg["step1"]
    if "source" in changes and model is not None:  # a changed source section keeps the model unless it names one
        changes["source"] = {"model": str(model), **changes["source"]}
    cfg.update(changes)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(cfg))
    return path


def pipeline(path: Path):
    from ds_minimodel.pipeline.plan import Pipeline

    return Pipeline(PipelineConfig.load(path), str(path))


def test_a_given_model_is_bl_base_primary_and_step1_trains_only_its_head(models, tmp_path):
    run = pipeline(config(tmp_path, models["bare"]))
    assert [j.name for j in run.jobs()] == ["prepare", "step1-base", "step1b-minipost", "step2-bl_base",
                                            "step2-minipost", "step3-base", "step4"]
    given = run.given
    assert given.path == str(models["bare"].resolve()) and given.kind == "hf-import" and given.needs_head
    assert (given.num_layers, given.hidden_size) == (3, 32) and given.lowercases  # the WordPiece lower-cases
    assert given.to_record()["weights_sha256"] == given.weights_sha256 and len(given.weights_sha256) == 64
    # keep_layers and new_layers are checked against the model's 3 layers, not the demo preset's 6
    with pytest.raises(InputError, match=r"keep_layers must be between 1 and 2 for the source.model's 3 layers"):
        pipeline(config(tmp_path, models["bare"], keep_layers=3))
    # a model with its MLM head: no head section, and nothing to train in Step 1
    assert not pipeline(config(tmp_path, models["mlm"], head=None)).given.needs_head


def test_the_step1_job_records_the_model_and_trains_a_bare_encoders_head_with_the_head_settings(models, tmp_path,
                                                                                                 monkeypatch):
    from ds_minimodel.pipeline import plan

    launched = []
    monkeypatch.setattr(plan, "train_step", lambda spec, *a, **k: launched.append(spec))
    monkeypatch.setattr(plan.Pipeline, "_data", lambda self, lang, needed_by: self.data_dir(lang))  # not prepared
    run = pipeline(config(tmp_path, models["bare"]))
    run.run("step1-base")
    spec, = launched
    assert spec.out == run.step1_dir("base") and spec.ENTRY == "run_head.py"
    assert spec.from_ == models["bare"].resolve() and spec.steps == 4
    assert spec.train_body is False  # the head alone, by default
    launched.clear()
    whole = pipeline(config(tmp_path / "w", models["bare"], head={**STAGE, "train_body": True}))
    whole.run("step1-base")
    assert launched[0].train_body is True
    from ds_minimodel.pipeline.analysis import table2
    from ds_minimodel.pipeline.source_model import trained_here

    record = {**whole.given.to_record(), **trained_here(whole.cfg.head)}
    assert "(continued here with MLM, body and head" in table2({}, {}, None, record)
    assert trained_here(run.cfg.head) == {}  # results.json of a head-only run: unchanged
    recorded = json.loads(run.source_model_record().read_text())
    assert recorded == run.given.to_record() and recorded["path"] == str(models["bare"].resolve())
    # with its head already trained, the job trains nothing: later steps use the folder itself
    launched.clear()
    with_head = pipeline(config(tmp_path / "h", models["mlm"], head=None))
    with_head.run("step1-base")
    assert launched == [] and with_head._primary("base", "test") == models["mlm"].resolve()


@pytest.mark.parametrize("case, changes, message", [
    ("missing", {"source": {**DEMO["source"], "model": "/nonexistent/model"}},
     r"/nonexistent/model: not a folder \(.*source.model must be a Hugging Face model folder"),
    ("empty", "EMPTY", r": not a model: neither config.json .* nor meta.json"),
    ("architecture", "GPT2", r"config.json: model_type 'gpt2' is not supported"),
    ("embeddings", "EMBEDDINGS", r"trained embeddings \(Step 2\), not a model"),
    ("no head section", {"head": None}, r"a bare encoder \(no MLM head\); .* needs a head section"),
    ("scratch system", {"systems": ["bl_base", "bl_small"]},
     r"bl_small needs a primary pretrained from scratch, but source.model gives only BL_BASE's primary; add a step1"),
    ("pretrain seeds", {"pretrain_seeds": [2]}, r"pretrain_seeds repeats Step 1 .* source.model is a given model"),
    ("target model", {"targets": [{**DEMO["targets"][0], "model": "x"}]}, r"targets\[\].model: a pretrained model"),
    ("lowercase", {"source": {**DEMO["source"], "lowercase": True}}, r"en: lowercase is for a tokenizer trained here"),
    ("tokenizer", "SPM", r"spm.model: not the tokenizer of source.model"),
])
def test_what_cannot_start_from_a_given_model_is_refused_in_one_sentence_before_any_work(case, changes, message,
                                                                                         models, tmp_path):
    model = models["bare"]
    if changes == "EMPTY":
        model, changes = tmp_path / "empty", {}
        model.mkdir()
    elif changes == "GPT2":
        model, changes = shutil.copytree(models["bare"], tmp_path / "gpt2"), {}
        (model / "config.json").write_text(json.dumps({**json.loads((model / "config.json").read_text()),
                                                       "model_type": "gpt2"}))
    elif changes == "EMBEDDINGS":
        model, changes = tmp_path / "embeddings", {}
        model.mkdir()
        (model / "meta.json").write_text(json.dumps({"kind": "embeddings", "weights_sha256": "0" * 64}))
    elif changes == "SPM":
        spm = train_sentencepiece(ROOT / "demo_data/corpus/en.txt", tmp_path / "spm", vocab_size=300, num_threads=1)
        Tokenizer.load(spm)
        changes = {"source": {**DEMO["source"], "model": str(model), "tokenizer": str(spm)}}
    path = config(tmp_path, model, **changes)
    with pytest.raises(InputError, match=message) as refused:
        pipeline(path)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()  # refused before any work


def test_settings_that_need_a_given_model_are_refused_without_one(tmp_path):
    with pytest.raises(InputError, match=r"the head section trains the MLM head of source.model, which is not set"):
        PipelineConfig.load(config(tmp_path, None, step1=DEMO["step1"]))
    with pytest.raises(InputError, match=r"step1 is missing: it pretrains the primaries \(or give source.model"):
        PipelineConfig.load(config(tmp_path, None, head=None))


def test_a_model_with_its_head_refuses_a_head_section(models, tmp_path):
    with pytest.raises(InputError, match=r"has a trained MLM head already; .* leave the head section out"):
        pipeline(config(tmp_path, models["mlm"]))


def test_other_primaries_are_pretrained_beside_the_given_one_when_step1_asks(models, tmp_path):
    run = pipeline(config(tmp_path, models["bare"], systems=["bl_base", "bl_small"], step1=DEMO["step1"],
                          small_layers=2))
    assert run.cfg.trained_primaries() == ["small"]
    assert [j.name for j in run.jobs() if j.name.startswith("step1")] == ["step1-base", "step1-small"]


def test_a_folder_trained_from_one_model_refuses_another_or_none(models, tmp_path, monkeypatch):
    from ds_minimodel.pipeline import plan

    monkeypatch.setattr(plan, "train_step", lambda *a, **k: None)
    monkeypatch.setattr(plan.Pipeline, "_data", lambda self, lang, needed_by: self.data_dir(lang))  # not prepared
    pipeline(config(tmp_path, models["bare"])).run("step1-base")
    with pytest.raises(InputError, match=r"source_model.json: this folder's steps were trained from another source "
                                         r"model .*weights_sha256 '[0-9a-f]{64}' there, '[0-9a-f]{64}' now"):
        pipeline(config(tmp_path, models["bare-2"]))
    moved = shutil.copytree(models["bare"], tmp_path / "moved")  # the same model elsewhere: its content decides
    assert pipeline(config(tmp_path, moved)).given.path == str(moved.resolve())
    with pytest.raises(InputError, match=r"trained from the given model .*bare, but .* gives no source.model now"):
        pipeline(config(tmp_path, None, head=None, step1=DEMO["step1"]))
    # a folder whose BL_BASE primary was pretrained here is not taken over by a given model
    other = tmp_path / "other"
    (other / "out" / "step1" / "base").mkdir(parents=True)
    (other / "out" / "step1" / "base" / "run.json").write_text("{}")
    with pytest.raises(InputError, match=r"step1/base: holds a primary pretrained here, which source.model"):
        pipeline(config(other, models["bare"]))


def test_table2_says_the_primary_was_given_and_charged_nothing():
    from ds_minimodel.pipeline.analysis import Point, table2

    curves = {("lohelp", "de", "bl_base"): [Point(0, 0.0, 0.0, 40.0, 1.0), Point(10, 1e18, 0.4, 50.0, 1.0)]}
    given = {"path": "/models/minilm", "weights_sha256": "ab" * 32, "mlm_head": "initialised"}
    text = table2(curves, {"lohelp": "accuracy"}, source_model=given)
    assert text.startswith("Step 1 of BL_BASE's primary: given, not trained here (no FLOPs charged): /models/minilm, "
                           "weights abababababab (its MLM head trained here")
    assert "given" not in table2(curves, {"lohelp": "accuracy"})


def test_a_lowercasing_tokenizer_folds_case_in_training_and_encoding(tmp_path):
    from ds_minimodel.data.tokenizer import read_training_record

    cased = Tokenizer.load(train_sentencepiece(ROOT / "demo_data/corpus/de.txt", tmp_path / "cased", vocab_size=500,
                                               num_threads=1))
    folded_path = train_sentencepiece(ROOT / "demo_data/corpus/de.txt", tmp_path / "folded", vocab_size=500,
                                      num_threads=1, lowercase=True)
    folded = Tokenizer.load(folded_path)
    assert folded.encode("Das Haus IST Groß") == folded.encode("das haus ist groß")
    assert cased.encode("Das Haus") != cased.encode("das haus")
    assert not any(p != p.lower() for p in folded.pieces()[5:])
    assert read_training_record(folded_path)["arguments"]["lowercase"] is True
    assert "lowercase" not in read_training_record(tmp_path / "cased.model")["arguments"]  # older records still match

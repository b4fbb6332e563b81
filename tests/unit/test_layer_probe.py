"""scripts/experiments/layer_probe.py (each layer's vectors in the files' order, the probe, the tagging baseline) and
cut_layers.py (a model's bottom layers as a model folder)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from ds_minimodel.config import ModelConfig
from ds_minimodel.data.tokenizer import BOS_ID, EOS_ID, IGNORE_INDEX, PAD_ID
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.tasks.readers import TokenExample
from ds_minimodel.train.checkpoint import save_model_folder

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("layer_probe", REPO / "scripts/experiments/layer_probe.py")
layer_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layer_probe)

MICRO = ModelConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, ffn_size=32, max_positions=12)


def _inputs(lengths: list[int], width: int = 12) -> dict[str, np.ndarray]:
    """Rows of <s> ids </s> then padding, with labels per position: the first piece of each 'word' (odd positions)
    tagged, the rest IGNORE_INDEX, and one label per row for the sequence view."""
    generator = np.random.default_rng(0)
    ids = np.full((len(lengths), width), PAD_ID, dtype=np.int64)
    tags = np.full((len(lengths), width), IGNORE_INDEX, dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, :n + 2] = [BOS_ID, *generator.integers(5, 50, n), EOS_ID]
        tags[row, 1:n + 1:2] = generator.integers(0, 3, len(range(1, n + 1, 2)))
    return {"input_ids": ids, "attention_mask": ids != PAD_ID, "tags": tags,
            "labels": np.arange(len(lengths), dtype=np.int64) % 3}


def test_sequence_and_token_vectors_come_back_in_the_files_order_and_equal_one_input_at_a_time():
    torch.manual_seed(0)
    model = MaskedLM(MICRO).eval()
    lengths = [3, 9, 1, 6, 10, 2, 7]  # batches of 3 put the longest first and cut each to its longest input
    arrays = _inputs(lengths)
    pooled, labels = layer_probe.layer_features(model, {k: arrays[k] for k in ("input_ids", "attention_mask",
                                                                              "labels")}, "sequence", batch_size=3)
    assert len(pooled) == MICRO.num_layers + 1 and all(p.shape == (len(lengths), 16) for p in pooled)
    assert labels.tolist() == arrays["labels"].tolist()
    token_arrays = {"input_ids": arrays["input_ids"], "attention_mask": arrays["attention_mask"],
                    "labels": arrays["tags"]}
    words, tags = layer_probe.layer_features(model, token_arrays, "token", batch_size=3)
    tagged = arrays["tags"] != IGNORE_INDEX
    assert tags.tolist() == arrays["tags"][tagged].tolist()  # row by row, left to right
    with torch.no_grad():
        expected_words = [[] for _ in pooled]
        for row, n in enumerate(lengths):
            ids = torch.from_numpy(arrays["input_ids"][row:row + 1, :n + 2])  # alone, unpadded
            outputs = [model.embeddings(ids), *model.hidden_states(ids, None)]
            for layer, x in enumerate(outputs):
                np.testing.assert_allclose(pooled[layer][row], x[0].mean(0).numpy(), rtol=1e-4, atol=1e-5)
                expected_words[layer].append(x[0][torch.from_numpy(tagged[row, :n + 2])].numpy())
    for layer, x in enumerate(words):
        np.testing.assert_allclose(x, np.concatenate(expected_words[layer]), rtol=1e-4, atol=1e-5)


def test_the_probe_reads_a_label_that_one_direction_carries_and_not_one_that_none_does():
    generator = np.random.default_rng(1)
    x = generator.standard_normal((600, 8)).astype(np.float32)
    y = (x[:, 2] > 0).astype(np.int64) + 2 * (x[:, 5] > 0).astype(np.int64)  # four classes, two directions
    w, b = layer_probe.fit_probe(x[:400], y[:400], 4, 1e-4)
    assert layer_probe.scores(w, b, x[400:], y[400:], 4)["accuracy"] > 95
    noise = generator.standard_normal((600, 8)).astype(np.float32)  # the same labels, features that carry none
    w, b = layer_probe.fit_probe(noise[:400], y[:400], 4, 1e-4)
    assert layer_probe.scores(w, b, noise[400:], y[400:], 4)["accuracy"] < 40
    again = layer_probe.fit_probe(x[:400], y[:400], 4, 1e-4)
    assert torch.equal(again[0], layer_probe.fit_probe(x[:400], y[:400], 4, 1e-4)[0])  # deterministic


def test_the_tagging_baseline_gives_each_word_its_commonest_training_tag_case_folded():
    train = [TokenExample("a", ["The", "run", "ends"], ["DET", "NOUN", "VERB"]),
             TokenExample("b", ["they", "run", "the", "run"], ["PRON", "VERB", "DET", "VERB"])]
    test = [TokenExample("c", ["THE", "run", "unseen"], ["DET", "VERB", "NOUN"])]
    # the: DET; run: VERB (2 of 3); unseen: the commonest tag overall, VERB (4 of 7): 2 of 3 right
    assert abs(layer_probe.word_tag_accuracy(train, test) - 200 / 3) < 1e-9


cut_spec = importlib.util.spec_from_file_location("cut_layers", REPO / "scripts/experiments/cut_layers.py")
cut_layers = importlib.util.module_from_spec(cut_spec)
cut_spec.loader.exec_module(cut_layers)


def test_a_cut_keeps_the_bottom_layers_so_its_layers_read_as_the_whole_models_do(tmp_path, monkeypatch):
    torch.manual_seed(0)
    whole = MaskedLM(MICRO.replace(num_layers=3)).eval()
    save_model_folder(tmp_path / "whole", whole.state_dict(), {"model_config": whole.cfg.to_dict()})
    monkeypatch.setattr("sys.argv", ["cut_layers.py", "--from", str(tmp_path / "whole"), "--layers", "2",
                                     "--out", str(tmp_path / "cut")])
    assert cut_layers.main() == 0
    cut, meta = load_mlm(tmp_path / "cut")
    assert cut.cfg.num_layers == 2 and meta.details["cut_to_layers"] == 2
    assert meta.lineage == load_mlm(tmp_path / "whole")[1].weights_sha256 != meta.weights_sha256  # a descendant
    ids = torch.from_numpy(_inputs([5, 8])["input_ids"])
    mask = ids != PAD_ID
    with torch.no_grad():
        pairs = zip(cut.eval().hidden_states(ids, mask), whole.hidden_states(ids, mask))
        assert [torch.equal(a, b) for a, b in pairs] == [True, True]
        assert torch.equal(cut.heads["main"].bias, whole.heads["main"].bias)
    monkeypatch.setattr("sys.argv", ["cut_layers.py", "--from", str(tmp_path / "whole"), "--layers", "4",
                                     "--out", str(tmp_path / "none")])
    with pytest.raises(InputError, match="between 1 and the model's 3, got 4"):
        cut_layers.main()
    assert not (tmp_path / "none").exists()

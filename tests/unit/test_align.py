"""The label-free alignment probe (tools.align): mean-pooled states, top-1 retrieval, parallel pairs by id."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ds_minimodel.config import get_preset
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.tools.align import pooled_states, read_pairs, retrieval_top1


def test_the_probe_finds_each_sentences_pair_through_aligned_embeddings_and_not_through_scrambled_ones():
    torch.manual_seed(0)
    model = MaskedLM(get_preset("tiny").replace(vocab_size=60)).eval()
    rng = np.random.default_rng(0)
    english = [[1, *rng.integers(5, 60, size=rng.integers(5, 20)).tolist(), 2] for _ in range(40)]
    # The "target language": the same sentences in another vocabulary (id -> id + 60), its embedding rows copies of
    # the English ones (the perfectly aligned case) or a random permutation of them (misaligned).
    source_states = pooled_states(model, english, batch_size=7)
    assert len(source_states) == model.cfg.num_layers + 1 and source_states[0].shape == (40, 64)
    target = [[t if t < 5 else t + 55 for t in seq] for seq in english]
    rows = model.embeddings.tokens.weight.detach()
    aligned = torch.cat([rows, rows[5:]])
    scrambled = torch.cat([rows, rows[5:][torch.randperm(55)]])
    for table, expected in ((aligned, 1.0), (scrambled, None)):
        with torch.no_grad():
            model.embeddings.tokens.weight = torch.nn.Parameter(table.clone())
        states = pooled_states(model, target)
        scores = [retrieval_top1(t, e) for t, e in zip(states, source_states)]
        if expected:
            assert scores == [1.0] * len(scores)
        else:
            assert max(scores) < 0.5
        with torch.no_grad():
            model.embeddings.tokens.weight = torch.nn.Parameter(rows.clone())


def test_retrieval_counts_only_each_rows_own_pair():
    keys = np.eye(4)
    assert retrieval_top1(keys, keys) == 1.0
    assert retrieval_top1(keys[[1, 0, 2, 3]], keys) == 0.5


def test_pairs_are_read_by_id_and_bad_lines_named(tmp_path):
    en, de = tmp_path / "en.jsonl", tmp_path / "de.jsonl"
    en.write_text("\n".join(json.dumps({"id": i, "text": f"en {i}"}) for i in ("a", "b", "c")) + "\n")
    de.write_text("\n".join(json.dumps({"id": i, "text": f"de {i}"}) for i in ("c", "a", "x")) + "\n")
    assert read_pairs(en, de, 10) == (["en a", "en c"], ["de a", "de c"])
    de.write_text('{"id": "a", "text": "de a"}\nnot json\n')
    with pytest.raises(InputError, match=rf"{de}:2: not a JSON object"):
        read_pairs(en, de, 10)

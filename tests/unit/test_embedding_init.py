"""The Step-2 initialisers' mechanisms (model.embedding_init): sparsemax, FOCUS's mixtures, rows drawn at the
source's scale, anchored rows. Constructed vocabularies and vectors; the static vectors' training and the whole
Step 2 with these options run in tests/integration/test_adapt.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ds_minimodel.config import get_preset
from ds_minimodel.data.tokenizer import NUM_SPECIAL, SPECIAL_PIECES
from ds_minimodel.model.embedding_init import (
    anchor_copied_rows,
    draw_rows,
    focus_weights,
    initial_rows,
    shared_source_ids,
    sparsemax,
)
from ds_minimodel.model.encoder import MaskedLM

SPECIALS = [SPECIAL_PIECES[i] for i in range(NUM_SPECIAL)]


def test_sparsemax_projects_onto_the_simplex():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(50, 30))
    weights = sparsemax(scores)
    assert np.allclose(weights.sum(1), 1) and (weights >= 0).all()
    assert (weights == 0).any(1).all()  # sparse: every row drops some entries at this spread
    # The projection: no other point of the simplex is closer (checked against random simplex points).
    others = rng.dirichlet(np.ones(30), size=200)
    for row, w in zip(scores[:5], weights[:5]):
        assert np.linalg.norm(row - w) <= np.linalg.norm(row - others, axis=1).min() + 1e-12
    # Known values: one clear winner takes everything; ties share; a shift changes nothing.
    assert np.allclose(sparsemax(np.array([[3.0, 1.0, 0.0]])), [[1, 0, 0]])
    assert np.allclose(sparsemax(np.array([[0.5, 0.5, -2.0]])), [[0.5, 0.5, 0]])
    assert np.allclose(sparsemax(scores + 7.0), weights)


def vocabularies():
    source = SPECIALS + ["▁a", "▁b", "▁c", "▁d"]
    target = SPECIALS + ["▁b", "▁x", "▁d", "▁y", "▁z", "▁a"]
    return source, target


def test_focus_mixes_only_shared_pieces_source_rows_and_weights_sum_to_one():
    source, target = vocabularies()
    src_emb, src_bias = torch.randn(len(source), 8), torch.randn(len(source))
    ids = shared_source_ids(source, target)
    assert ids.tolist() == [0, 1, 2, 3, 4, 6, -1, 8, -1, -1, 5]
    # Static vectors: ▁x points exactly where ▁d does, ▁y between ▁b and ▁a, ▁z has no vector (too rare).
    basis = np.eye(4, dtype=np.float32)
    vectors = np.zeros((len(target), 4), dtype=np.float32)
    vectors[5], vectors[7], vectors[10] = basis[0], basis[1], basis[2]  # ▁b, ▁d, ▁a
    vectors[6] = basis[1]
    vectors[8] = (basis[0] + basis[2]) / 2
    known = np.ones(len(target), dtype=bool)
    known[9] = False
    known[:NUM_SPECIAL] = False
    targets, candidates, weights = focus_weights(vectors, known, ids)
    assert targets.tolist() == [6, 8] and candidates.tolist() == [5, 7, 10]
    assert np.allclose(weights.sum(1), 1) and (weights >= 0).all()
    assert np.allclose(weights[0], [0, 1, 0]) and np.allclose(weights[1], [0.5, 0, 0.5])

    rows = initial_rows("focus", source, src_emb, src_bias, target, std=0.02,
                        generator=torch.Generator().manual_seed(0), static=(vectors, known, {"kind": "test"}))
    assert torch.allclose(rows.embeddings[6], src_emb[8]) and torch.allclose(rows.bias[6], src_bias[8])  # ▁x = ▁d
    assert torch.allclose(rows.embeddings[8], (src_emb[6] + src_emb[5]) / 2)  # ▁y = (▁b + ▁a) / 2
    assert rows.copied.tolist() == [True] * 6 + [False, True, False, False, True]
    overlap = initial_rows("overlap", source, src_emb, src_bias, target, std=0.02,
                           generator=torch.Generator().manual_seed(0))
    # Rows that no mixture replaces (▁z) are overlap's own draws; copied rows are the source rows.
    assert torch.equal(rows.embeddings[9], overlap.embeddings[9]) and rows.bias[9] == 0
    assert torch.equal(rows.embeddings[rows.copied], overlap.embeddings[overlap.copied])
    assert rows.record == {"init": "focus", "new_rows": "normal", "copied": 8, "mixed": 2, "candidates": 3,
                           "sources_per_row": 1.5, "static_vectors": {"kind": "test"}, "drawn": 1}
    with pytest.raises(ValueError, match="static vectors"):
        initial_rows("focus", source, src_emb, src_bias, target, std=0.02, generator=torch.Generator())


def test_new_rows_from_the_source_rows_statistics():
    source = torch.randn(4000, 16) * torch.linspace(0.1, 2.0, 16) + torch.linspace(-1, 1, 16)
    drawn = draw_rows(20000, source, std=0.02, generator=torch.Generator().manual_seed(0), new_rows="source")
    assert torch.allclose(drawn.mean(0), source[NUM_SPECIAL:].mean(0), atol=0.05)
    assert torch.allclose(drawn.std(0), source[NUM_SPECIAL:].std(0), rtol=0.05)
    normal = draw_rows(20000, source, std=0.02, generator=torch.Generator().manual_seed(0))
    assert abs(normal.std().item() - 0.02) < 0.001 and abs(normal.mean().item()) < 0.001
    with pytest.raises(ValueError, match="new_rows"):
        draw_rows(1, source, std=0.02, generator=torch.Generator(), new_rows="uniform")


def test_anchored_rows_get_no_gradient_and_adam_leaves_them_bit_identical():
    model = MaskedLM(get_preset("tiny").replace(vocab_size=40))
    for name, p in model.named_parameters():
        p.requires_grad_(name in ("embeddings.tokens.weight", "heads.main.bias"))
    copied = torch.zeros(40, dtype=torch.bool)
    copied[:12] = True
    anchor_copied_rows(model, copied)
    weight, bias = model.embeddings.tokens.weight, model.heads["main"].bias
    before = weight.detach().clone(), bias.detach().clone()
    optimizer = torch.optim.AdamW([weight, bias], lr=0.1, weight_decay=0.0)
    for _ in range(3):
        ids = torch.randint(0, 40, (4, 10))
        model(ids, torch.ones_like(ids, dtype=torch.bool))["main"].logsumexp(-1).mean().backward()
        assert not weight.grad[:12].any() and not bias.grad[:12].any() and weight.grad[12:].any()
        optimizer.step()
        optimizer.zero_grad()
    assert torch.equal(weight[:12], before[0][:12]) and torch.equal(bias[:12], before[1][:12])
    assert not torch.equal(weight[12:], before[0][12:])


def test_the_anchored_relearn_control_copies_only_what_another_vocabulary_shares():
    source, target = vocabularies()
    src_emb, src_bias = torch.randn(len(source), 8), torch.randn(len(source))
    ids = shared_source_ids(source, target, shared_with={"▁b", "▁q"})
    assert ids.tolist() == [0, 1, 2, 3, 4, 6, -1, -1, -1, -1, -1]  # the specials, and ▁b
    rows = initial_rows("overlap", source, src_emb, src_bias, target, std=0.02,
                        generator=torch.Generator().manual_seed(0), shared_with={"▁b", "▁q"})
    assert rows.copied.sum() == 6 and rows.record["drawn"] == 5
    assert torch.equal(rows.embeddings[5], src_emb[6]) and not torch.equal(rows.embeddings[10], src_emb[5])

"""The Step-2 initialisers' mechanisms (model.embedding_init): sparsemax, FOCUS's and WECHSEL's mixtures, rows
drawn at the source's scale, anchored rows. Constructed vocabularies and vectors; the static vectors' training and
the whole Step 2 with these options run in tests/integration/test_adapt.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ds_minimodel.config import get_preset
from ds_minimodel.data.tokenizer import NUM_SPECIAL, SPECIAL_PIECES
from ds_minimodel.model.embedding_init import (
    AlignedVectors,
    anchor_copied_rows,
    draw_rows,
    focus_weights,
    initial_rows,
    shared_source_ids,
    sparsemax,
    wechsel_weights,
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


def test_wechsel_mixes_the_k_nearest_source_rows_after_the_map_with_softmax_weights():
    """Target vectors are the source ones turned by a known rotation: mapped back, each target piece's nearest source
    piece is its translation, and the weights are the softmax of the top-k cosines at temperature 0.1."""
    rng = np.random.default_rng(0)
    source = SPECIALS + [f"▁s{i}" for i in range(12)]
    target = SPECIALS + [f"▁t{i}" for i in range(12)] + ["▁rare"]
    src_emb, src_bias = torch.randn(len(source), 8, dtype=torch.float64), torch.randn(len(source), dtype=torch.float64)
    src_vec = rng.normal(size=(len(source), 6))
    rotation, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    tgt_vec = np.zeros((len(target), 6))
    tgt_vec[NUM_SPECIAL:NUM_SPECIAL + 12] = src_vec[NUM_SPECIAL:] @ rotation.T  # ▁ti is ▁si, rotated
    tgt_known = np.ones(len(target), dtype=bool)
    tgt_known[-1] = False  # ▁rare: no vector, drawn
    src_known = np.ones(len(source), dtype=bool)
    src_known[NUM_SPECIAL + 11] = False  # ▁s11 has no vector: never a neighbour
    # In the common space: the target's vectors turned back by the map (data.bilingual.Alignment.target).
    aligned = AlignedVectors(tgt_vec @ rotation, tgt_known, src_vec, src_known, {"kind": "test"}, neighbours=3)
    candidates = np.flatnonzero(src_known & (np.arange(len(source)) >= NUM_SPECIAL))
    targets, neighbours, weights = wechsel_weights(aligned, candidates)
    assert targets.tolist() == list(range(NUM_SPECIAL, NUM_SPECIAL + 12))
    assert neighbours.shape == weights.shape == (12, 3)
    assert np.allclose(weights.sum(1), 1) and (weights > 0).all() and set(neighbours.ravel()) <= set(candidates)
    unit_src = src_vec / np.linalg.norm(src_vec, axis=1, keepdims=True)
    for row, (nb, w) in enumerate(zip(neighbours, weights)):
        cos = unit_src[candidates] @ unit_src[NUM_SPECIAL + row] if row < 11 else None
        if cos is not None:
            assert nb[np.argmax(w)] == NUM_SPECIAL + row  # its own translation is the heaviest neighbour
            top = np.sort(cos)[-3:]
            assert np.allclose(np.sort(w), np.sort(np.exp(top / 0.1) / np.exp(top / 0.1).sum()))

    rows = initial_rows("wechsel", source, src_emb, src_bias, target, std=0.02,
                        generator=torch.Generator().manual_seed(0), aligned=aligned)
    for i, t in enumerate(targets):
        expected = (torch.from_numpy(weights[i])[:, None] * src_emb[torch.from_numpy(neighbours[i])]).sum(0)
        assert torch.allclose(rows.embeddings[t], expected)
        assert torch.allclose(rows.bias[t], (torch.from_numpy(weights[i]) * src_bias[neighbours[i]]).sum())
    assert rows.copied.tolist() == [True] * NUM_SPECIAL + [False] * 13  # only the special pieces are copies
    overlap = initial_rows("overlap", source, src_emb, src_bias, target, std=0.02,
                           generator=torch.Generator().manual_seed(0))
    assert torch.equal(rows.embeddings[-1], overlap.embeddings[-1]) and rows.bias[-1] == 0
    assert rows.record["mixed"] == 12 and rows.record["drawn"] == 1 and rows.record["candidates"] == 11
    with pytest.raises(ValueError, match="alignment"):
        initial_rows("wechsel", source, src_emb, src_bias, target, std=0.02, generator=torch.Generator())
    # Word anchors: ▁t2 (and ▁rare, which has no vector) copy the rows they are anchored to; the other mixtures stay.
    anchored = initial_rows("wechsel", source, src_emb, src_bias, target, std=0.02,
                            generator=torch.Generator().manual_seed(0), aligned=aligned,
                            anchors={NUM_SPECIAL + 2: NUM_SPECIAL + 7, NUM_SPECIAL + 12: NUM_SPECIAL + 1})
    assert torch.equal(anchored.embeddings[NUM_SPECIAL + 2], src_emb[NUM_SPECIAL + 7])
    assert torch.equal(anchored.bias[-1], src_bias[NUM_SPECIAL + 1])
    others = [t for t in targets if t != NUM_SPECIAL + 2]
    assert torch.equal(anchored.embeddings[others], rows.embeddings[others])
    assert (anchored.record["word_anchored"], anchored.record["mixed"], anchored.record["drawn"]) == (2, 11, 0)


def test_transliteration_anchors_a_piece_in_another_script_to_the_source_piece_it_spells():
    """Names and loanwords in another script copy the row of their romanisation (as it is, else lower-cased); a
    romanisation of fewer than 3 letters anchors nothing; an exact shared piece stays what it was."""
    source = [*SPECIALS, "▁Moskva", "▁lodz", "▁no", "ing", "▁file"]
    target = [*SPECIALS, "▁Москва", "▁Łódź", "▁の", "ing", "▁ファイル", "▁Берлин"]
    plain = shared_source_ids(source, target)
    anchored = shared_source_ids(source, target, transliterate=True)
    assert plain.tolist() == [0, 1, 2, 3, 4, -1, -1, -1, 8, -1, -1]
    assert anchored.tolist() == [0, 1, 2, 3, 4, 5, 6, -1, 8, -1, -1]  # ファイル is "fuairu", not "file"
    embeddings = torch.randn(len(source), 8)
    bias = torch.randn(len(source))
    rows = initial_rows("overlap", source, embeddings, bias, target, std=0.02,
                        generator=torch.Generator().manual_seed(0), transliterate=True)
    assert torch.equal(rows.embeddings[5], embeddings[5]) and torch.equal(rows.bias[6], bias[6])
    assert rows.record["transliterated"] == 2 and rows.record["copied"] == 8
    with pytest.raises(ValueError, match="transliterate extends the copied rows of overlap, focus; wechsel copies"):
        initial_rows("wechsel", source, embeddings, bias, target, std=0.02, generator=torch.Generator(),
                     transliterate=True)


def test_word_anchors_copy_the_row_of_a_listed_words_translation():
    """A target piece that is a listed word, as it stands in running text (here inside unspaced text: no word-start
    mark), copies the row of the source piece its first one-piece translation is; a word of two pieces, a translation
    of two, a word already spelled as a source piece and an unknown word anchor nothing, and FOCUS mixes from the
    anchored rows as from shared ones."""
    from ds_minimodel.data.bilingual import WordList, piece_anchors, word_encoder

    source = [*SPECIALS, "▁file", "▁open", "▁the", "▁document", "▁new", "▁save", "▁as"]
    target = [*SPECIALS, "▁", "ファイル", "開く", "▁file", "ドキュ", "メント", "保存"]
    pairs = [("ファイル", "file"), ("ファイル", "open"), ("開く", "open"), ("ドキュメント", "document"),
             ("保存", "save as"), ("file", "open"), ("未知", "new")]

    # What SentencePiece gives each word alone: inside unspaced text a word starts with the bare mark (id 5).
    target_ids = {"ファイル": [5, 6], "開く": [5, 7], "ドキュメント": [5, 9, 10], "保存": [5, 11], "file": [8],
                  "未知": [5, 1]}
    source_ids = {"file": [5], "open": [6], "document": [8], "save as": [10, 11], "new": [9]}
    words = WordList(Path("x.tsv"), pairs, "0")
    anchors = piece_anchors(words, word_encoder(target_ids.get, target), word_encoder(source_ids.get, source),
                            NUM_SPECIAL)
    assert anchors == {6: 5, 7: 6, 8: 6}  # ファイル→file (the first listed), 開く→open, ▁file→open (see below)
    ids = shared_source_ids(source, target, anchors=anchors)
    assert ids.tolist() == [0, 1, 2, 3, 4, -1, 5, 6, 5, -1, -1, -1]  # ▁file is spelled as a source piece: kept
    embeddings, bias = torch.randn(len(source), 8), torch.randn(len(source))
    vectors = np.random.default_rng(0).normal(size=(len(target), 4))
    rows = initial_rows("focus", source, embeddings, bias, target, std=0.02, generator=torch.Generator(),
                        static=(vectors, np.ones(len(target), dtype=bool), {}), anchors=anchors)
    assert torch.equal(rows.embeddings[6], embeddings[5]) and torch.equal(rows.bias[7], bias[6])
    assert rows.record["word_anchored"] == 2 and rows.record["copied"] == 8 and rows.record["candidates"] == 3
    with pytest.raises(ValueError, match="anchors pair a target piece with a source piece"):
        shared_source_ids(source, target, anchors={6: 99})
    with pytest.raises(ValueError, match="word anchors are for init overlap, focus, wechsel, not specials"):
        initial_rows("specials", source, embeddings, bias, target, std=0.02, generator=torch.Generator(), anchors={})



def test_a_registered_initialiser_is_an_option_of_step_2_and_of_the_pipeline(tmp_path):
    """Issue 50: a new initialiser is one register call. Here one that copies the shared pieces and puts every other
    row at the mean of the source rows: initial_rows builds its rows, Step 2's option accepts it, and the pipeline's
    step2.init offers it, with no edit elsewhere."""
    import json

    from ds_minimodel.errors import InputError
    from ds_minimodel.model.embedding_init import INITIALISERS, Initialiser, register
    from ds_minimodel.pipeline.plan import Pipeline
    from ds_minimodel.pipeline.settings import PipelineConfig
    from ds_minimodel.stages.adapt import CHECKS
    from ds_minimodel.stages.specs import AdaptSpec, check_fields
    from tests.unit.test_hardening import pipeline_config

    def mean_rows(inp):
        new = inp.src_ids < 0
        inp.embeddings[new] = inp.source_embeddings[NUM_SPECIAL:].mean(0).to(inp.embeddings.dtype)
        return {"mixed": int(new.sum())}

    register(Initialiser("mean", copies="shared", mix=mean_rows))
    try:
        source = SPECIALS + ["\u2581the", "\u2581a", "x"]
        target = SPECIALS + ["\u2581a", "\u2581der", "y"]
        emb, bias = torch.randn(len(source), 8), torch.randn(len(source))
        rows = initial_rows("mean", source, emb, bias, target, std=0.02, generator=torch.Generator().manual_seed(0))
        assert torch.equal(rows.embeddings[NUM_SPECIAL], emb[NUM_SPECIAL + 1])  # "\u2581a" copied
        assert torch.allclose(rows.embeddings[-1], emb[NUM_SPECIAL:].mean(0))
        assert rows.record["mixed"] == 2 and rows.record["drawn"] == 0 and rows.record["init"] == "mean"
        # Step 2's option reads the registry: this name passes, an unknown one is refused with the choices.
        spec = {"system": "bl_base", "body": "b", "data": "d", "out": "o", "ds_config": "c.json"}
        check_fields(AdaptSpec(**spec, init="mean"), {"init": CHECKS["init"]})
        with pytest.raises(InputError, match="must be one of overlap, specials, focus, wechsel, mean, got 'zeros'"):
            check_fields(AdaptSpec(**spec, init="zeros"), {"init": CHECKS["init"]})
        # The pipeline's step2.init offers it (it needs no input, so nothing more is asked of the config).
        step2 = json.loads(pipeline_config(tmp_path).read_text())["step2"]
        path = pipeline_config(tmp_path, step2={**step2, "init": "mean"})
        Pipeline(PipelineConfig.load(path), str(path))
    finally:
        INITIALISERS.pop("mean", None)
    with pytest.raises(ValueError, match="copies shared or specials"):
        register(Initialiser("odd", copies="everything"))

"""Unit tests of model.surgery: mini-model extraction (MiniJoint, MiniPost), freezing, overlap init, swap, plug.

CPU only, the `tiny` preset with a small vocabulary. Models are perturbed away from their init (zero biases and
identity LayerNorms would hide a wrongly copied bias or norm). Two small SentencePiece models (English-ish and
German-ish pseudo-words, a few shared words) give vocabularies that partly overlap.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import torch

from ds_minimodel.config import get_preset
from ds_minimodel.data.tokenizer import IGNORE_INDEX, NUM_SPECIAL, SPECIAL_PIECES, Tokenizer, train_sentencepiece
from ds_minimodel.errors import InputError
from ds_minimodel.model import embedding_init, surgery, transforms
from ds_minimodel.model.encoder import AUX_HEAD, MAIN_HEAD, MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.losses import mlm_losses
from ds_minimodel.train.checkpoint import Kind, Record, save_model_folder

SRC_VOCAB, TRG_VOCAB = 300, 340
TINY = get_preset("tiny").replace(vocab_size=SRC_VOCAB)
TINY_JOINT = TINY.replace(aux_head_layer=4)


def _perturbed(cfg) -> MaskedLM:
    model = MaskedLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _batch(vocab: int, batch: int = 3, seq_len: int = 12) -> dict[str, torch.Tensor]:
    ids = torch.randint(NUM_SPECIAL, vocab, (batch, seq_len))
    mask = torch.ones(batch, seq_len, dtype=torch.bool)
    mask[0, -4:] = False  # one padded row, so the attention mask path is exercised
    masked = torch.rand(batch, seq_len) < 0.3
    masked[:, 1] = True
    return {"input_ids": ids, "attention_mask": mask, "masked_positions": masked & mask}


# --- tokenizers (module scope: trained once, ~0.3 s) -----------------------------------------------------------------

_EN_SYLLABLES = "th er in an re on at en nd ti es or te of ed is it al ar st to nt ng ha".split()
_DE_SYLLABLES = "sch ei ch en er ie un de ge st ein ich be au ung te nd zu ver ü ö ä ß".split()
_SHARED_WORDS = "hotel radio computer berlin london taxi internet pizza museum film".split()


def _corpus(path: Path, syllables: list[str], seed: int) -> Path:
    rng = random.Random(seed)
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)] + _SHARED_WORDS
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) for _ in range(2000))
                    + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokenizer, Tokenizer]:
    root = tmp_path_factory.mktemp("spm")
    en = train_sentencepiece(_corpus(root / "en.txt", _EN_SYLLABLES, 1), root / "en", vocab_size=SRC_VOCAB,
                             num_threads=1)
    de = train_sentencepiece(_corpus(root / "de.txt", _DE_SYLLABLES, 2), root / "de", vocab_size=TRG_VOCAB,
                             num_threads=1)
    return Tokenizer.load(en), Tokenizer.load(de)


# --- MiniJoint -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [TINY_JOINT, TINY_JOINT.replace(pre_norm=True)], ids=["post-LN", "pre-LN"])
def test_extract_minijoint_is_bottom_layers_plus_aux_head_bit_identical(cfg) -> None:
    primary = _perturbed(cfg)
    mini = transforms.extract_minijoint(primary)
    assert mini.cfg == cfg.replace(num_layers=4, aux_head_layer=None)
    assert len(mini.layers) == 4 and set(mini.heads) == {MAIN_HEAD}
    assert transforms.copied_prefix_identical(mini, primary, 4, head=AUX_HEAD)
    assert not transforms.copied_prefix_identical(mini, primary, 4, head=MAIN_HEAD)  # the helper can say no
    assert not mini.training  # mode follows the primary

    batch = _batch(SRC_VOCAB)
    with torch.no_grad():
        for kwargs in ({"attention_mask": batch["attention_mask"]}, batch):
            kwargs = {k: v for k, v in kwargs.items() if k != "input_ids"}
            want = primary(batch["input_ids"], **kwargs)[AUX_HEAD]
            got = mini(batch["input_ids"], **kwargs)
            assert set(got) == {MAIN_HEAD} and torch.equal(got[MAIN_HEAD], want)

    # Clones, not views: training the mini-model must not move the primary.
    with torch.no_grad():
        mini.layers[0].ffn_in.weight.add_(1.0)
        mini.embeddings.tokens.weight.add_(1.0)
    assert not torch.equal(mini.layers[0].ffn_in.weight, primary.layers[0].ffn_in.weight)
    assert not torch.equal(mini.embeddings.tokens.weight, primary.embeddings.tokens.weight)


def test_both_heads_on_the_top_layer_the_depth_studys_n_equal_to_the_depth() -> None:
    """Section 5.2's N=12: both heads read the last layer; each gives its own logits, and the extracted mini-model is
    the whole body under the second head."""
    cfg = TINY_JOINT.replace(aux_head_layer=TINY.num_layers)
    primary = _perturbed(cfg)
    batch = _batch(SRC_VOCAB)
    with torch.no_grad():
        both = primary(**batch)
        mini = transforms.extract_minijoint(primary)
        assert set(both) == {MAIN_HEAD, AUX_HEAD} and not torch.equal(both[MAIN_HEAD], both[AUX_HEAD])
        assert mini.cfg.num_layers == TINY.num_layers and torch.equal(mini(**batch)[MAIN_HEAD], both[AUX_HEAD])


def test_a_minijoint_primary_without_its_second_head_is_its_whole_body_under_the_top_head(tmp_path: Path) -> None:
    """drop_aux_head: all layers and the main head, bit-identical logits, clones; the "primary" body (BL_BASE's kind
    of Step 2) takes a MiniJoint checkpoint that way, so a system can adapt a MiniJoint model over all its layers."""
    from ds_minimodel.model.bodies import BODY
    from ds_minimodel.systems import get_system

    primary = _perturbed(TINY_JOINT)
    whole = transforms.drop_aux_head(primary)
    assert whole.cfg == TINY_JOINT.replace(aux_head_layer=None) and set(whole.heads) == {MAIN_HEAD}
    batch = _batch(SRC_VOCAB)
    with torch.no_grad():
        assert torch.equal(whole(**batch)[MAIN_HEAD], primary(**batch)[MAIN_HEAD])
        whole.layers[-1].ffn_in.weight.add_(1.0)
    assert not torch.equal(whole.layers[-1].ffn_in.weight, primary.layers[-1].ffn_in.weight)
    one_head = MaskedLM(TINY)
    assert transforms.drop_aux_head(one_head) is one_head

    taken = BODY["primary"].take(primary, Kind.PRETRAINED, tmp_path, get_system("bl_base"))
    assert taken.cfg.aux_head_layer is None and len(taken.layers) == TINY_JOINT.num_layers
    with pytest.raises(InputError, match="trains over a pretrained model's body"):
        BODY["primary"].take(transforms.extract_minijoint(primary), Kind.MINIJOINT_MINI, tmp_path,
                             get_system("bl_base"))


def test_step2_says_which_of_a_minijoint_primarys_two_models_it_trains_through(tmp_path: Path) -> None:
    """taken_from: the line Step 2 prints for a MiniJoint primary, per body; none for a one-head model. Step 1b's
    body refuses a MiniJoint model naming both kinds of system that take one."""
    from ds_minimodel.model.bodies import BODY, taken_from
    from ds_minimodel.systems import get_system

    primary = _perturbed(TINY_JOINT)
    aux, total = TINY_JOINT.aux_head_layer, TINY_JOINT.num_layers
    whole = BODY["primary"].take(primary, Kind.PRETRAINED, tmp_path, get_system("bl_base"))
    mini = BODY["mini"].take(primary, Kind.PRETRAINED, tmp_path, get_system("minijoint"))
    assert taken_from(primary, whole) == (f"a MiniJoint primary: Step 2 trains through all {total} layers and the "
                                          f"top head (the second head, after layer {aux}, is dropped)")
    assert taken_from(primary, mini) == (f"a MiniJoint primary: Step 2 trains through its mini-model (layers "
                                         f"1-{aux} and the second head)")
    one_head = MaskedLM(TINY)
    assert taken_from(one_head, BODY["primary"].take(one_head, Kind.PRETRAINED, tmp_path, get_system("bl_base"))) \
        is None
    # other tests' registered systems may be listed too (the registry is the process's)
    with pytest.raises(InputError, match=r"mini-model with --system minijoint.*, or all its layers with --system bl_b"):
        BODY["step1b"].take(primary, Kind.PRETRAINED, tmp_path, get_system("minipost"))


def test_extract_minijoint_refuses_a_one_head_model() -> None:
    with pytest.raises(InputError, match="aux"):
        transforms.extract_minijoint(MaskedLM(TINY))


# --- MiniPost --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [TINY, TINY_JOINT, TINY.replace(pre_norm=True)],
                         ids=["one-head", "joint-primary", "pre-LN"])
def test_build_minipost_copies_bottom_layers_and_head_and_trains_only_new_layers(cfg) -> None:
    primary = _perturbed(cfg)
    rng_before = torch.get_rng_state()
    mini = transforms.build_minipost(primary, keep_layers=4, new_layers=2, seed=7)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is not disturbed

    assert mini.cfg == cfg.replace(num_layers=6, aux_head_layer=None)
    assert set(mini.heads) == {MAIN_HEAD}  # a MiniJoint primary's aux head is dropped
    assert transforms.copied_prefix_identical(mini, primary, 4, head=MAIN_HEAD)
    for j in (4, 5):  # fresh layers, not the primary's layers 5-6
        assert not torch.equal(mini.layers[j].ffn_in.weight, primary.layers[j].ffn_in.weight)
        assert not torch.equal(mini.layers[j].attention.qkv.weight, primary.layers[j].attention.qkv.weight)

    trainable = {n for n, p in mini.named_parameters() if p.requires_grad}
    assert trainable == {n for n, _ in mini.named_parameters() if n.startswith(("layers.4.", "layers.5."))}

    # The model's own init on the new layers: N(0, 0.02) weights, zero biases, identity LayerNorms.
    new = mini.layers[4]
    assert abs(new.ffn_in.weight.std().item() - 0.02) < 0.002
    assert torch.equal(new.ffn_in.bias, torch.zeros_like(new.ffn_in.bias))
    assert torch.equal(new.ffn_norm.weight, torch.ones_like(new.ffn_norm.weight))

    # Seeded: the same seed rebuilds the same layers, another seed others.
    again = transforms.build_minipost(primary, keep_layers=4, new_layers=2, seed=7)
    other = transforms.build_minipost(primary, keep_layers=4, new_layers=2, seed=8)
    assert torch.equal(again.layers[5].ffn_out.weight, mini.layers[5].ffn_out.weight)
    assert not torch.equal(other.layers[5].ffn_out.weight, mini.layers[5].ffn_out.weight)

    # A forward/backward reaches only the new layers.
    batch = _batch(SRC_VOCAB)
    labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
    labels[batch["masked_positions"]] = batch["input_ids"][batch["masked_positions"]]
    mlm_losses(mini(**batch), labels)["loss"].backward()
    assert all((p.grad is not None) == (n in trainable) for n, p in mini.named_parameters())


@pytest.mark.parametrize("keep", [0, 13, 2.5])
def test_build_minipost_validates_keep_layers(keep) -> None:
    with pytest.raises(InputError, match="keep_layers"):
        transforms.build_minipost(MaskedLM(TINY), keep_layers=keep)


def test_build_minipost_keeps_dtype() -> None:
    primary = MaskedLM(TINY).to(torch.bfloat16)
    mini = transforms.build_minipost(primary, keep_layers=2, new_layers=1)
    assert {p.dtype for p in mini.parameters()} == {torch.bfloat16}
    assert transforms.copied_prefix_identical(mini, primary, 2, head=MAIN_HEAD)


# --- freezing --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [TINY, TINY_JOINT], ids=["one-head", "joint"])
def test_freeze_for_adaptation_trains_only_embeddings_and_main_bias(cfg) -> None:
    model = _perturbed(cfg)
    names = transforms.freeze_for_adaptation(model)
    assert names == ["embeddings.tokens.weight", "heads.main.bias"]
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(names)

    batch = _batch(SRC_VOCAB)
    labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
    labels[batch["masked_positions"]] = batch["input_ids"][batch["masked_positions"]]
    mlm_losses(model(**batch), labels)["loss"].backward()
    for name, param in model.named_parameters():
        if name in names:
            assert param.grad is not None and param.grad.abs().sum() > 0, name
        else:
            assert param.grad is None, name


def test_freeze_for_adaptation_options() -> None:
    model = MaskedLM(TINY_JOINT)
    names = transforms.freeze_for_adaptation(model, train_positions=True, train_embedding_norm=True)
    assert set(names) == {"embeddings.tokens.weight", "embeddings.positions.weight", "embeddings.norm.weight",
                          "embeddings.norm.bias", "heads.main.bias"}
    # Re-freezing without the options turns them off again (no leftovers from an earlier call).
    assert transforms.freeze_for_adaptation(model) == ["embeddings.tokens.weight", "heads.main.bias"]
    assert not model.embeddings.positions.weight.requires_grad


# --- overlap init (paper footnote 1) ----------------------------------------------------------------------------------


def test_overlap_init_copies_exactly_the_shared_pieces(tokenizers) -> None:
    en, de = tokenizers
    src_pieces, trg_pieces = en.pieces(), de.pieces()
    src_emb, src_bias = torch.randn(len(src_pieces), 64), torch.randn(len(src_pieces))
    emb, bias, stats = embedding_init.overlap_init(src_pieces, src_emb, src_bias, trg_pieces,
                                            generator=torch.Generator().manual_seed(0))
    assert emb.shape == (TRG_VOCAB, 64) and bias.shape == (TRG_VOCAB,)
    src_index = {p: i for i, p in enumerate(src_pieces)}
    shared = [i for i, p in enumerate(trg_pieces) if p in src_index]
    new = [i for i, p in enumerate(trg_pieces) if p not in src_index]
    assert NUM_SPECIAL < len(shared) < TRG_VOCAB - 100  # the fixture gives a partial overlap
    assert shared[:NUM_SPECIAL] == list(range(NUM_SPECIAL))  # specials shared by construction
    for i in shared:
        j = src_index[trg_pieces[i]]
        assert torch.equal(emb[i], src_emb[j]) and bias[i] == src_bias[j]
    new_rows = emb[new]
    # No new row is a source row; new rows are N(0, 0.02) with zero bias.
    assert not (new_rows[:, None, :] == src_emb[None, :, :]).all(-1).any()
    assert abs(new_rows.std().item() - 0.02) < 0.001 and abs(new_rows.mean().item()) < 0.001
    assert torch.equal(bias[new], torch.zeros(len(new)))
    assert stats == {"overlap": len(shared), "target_vocab": TRG_VOCAB, "ratio": len(shared) / TRG_VOCAB,
                     "special": NUM_SPECIAL}

    # Same generator state, same init; the global RNG is untouched (it has its own generator).
    rng_before = torch.get_rng_state()
    emb2, _, _ = embedding_init.overlap_init(src_pieces, src_emb, src_bias, trg_pieces,
                                      generator=torch.Generator().manual_seed(0))
    assert torch.equal(emb, emb2) and torch.equal(torch.get_rng_state(), rng_before)


def test_specials_only_init_relearns_everything_but_the_special_rows(tokenizers) -> None:
    """The source-relearn control: the source vocabulary against itself, only the 5 special rows copied."""
    en, _ = tokenizers
    pieces = en.pieces()
    src_emb, src_bias = torch.randn(len(pieces), 64), torch.randn(len(pieces))
    emb, bias, stats = embedding_init.overlap_init(pieces, src_emb, src_bias, pieces, specials_only=True,
                                            generator=torch.Generator().manual_seed(0))
    assert stats["overlap"] == NUM_SPECIAL
    assert torch.equal(emb[:NUM_SPECIAL], src_emb[:NUM_SPECIAL]) and torch.equal(bias[:NUM_SPECIAL],
                                                                                  src_bias[:NUM_SPECIAL])
    assert abs(emb[NUM_SPECIAL:].std().item() - 0.02) < 0.002 and not bias[NUM_SPECIAL:].any()
    full, _, _ = embedding_init.overlap_init(pieces, src_emb, src_bias, pieces,
                                             generator=torch.Generator().manual_seed(0))
    assert torch.equal(full, src_emb)  # without the flag every row is shared


def test_overlap_init_refuses_vocabularies_without_the_special_pieces() -> None:
    specials = [SPECIAL_PIECES[i] for i in range(NUM_SPECIAL)]
    with pytest.raises(ValueError, match="special"):
        embedding_init.overlap_init(specials + ["a"], torch.zeros(6, 4), torch.zeros(6),
                                    ["<pad>", "<s>"] + specials[2:],
                                    generator=torch.Generator())
    with pytest.raises(ValueError, match="disagree"):
        embedding_init.overlap_init(specials + ["a"], torch.zeros(7, 4), torch.zeros(6), specials,
                                    generator=torch.Generator())


def test_overlap_init_is_fast_on_a_50k_vocabulary() -> None:
    specials = [SPECIAL_PIECES[i] for i in range(NUM_SPECIAL)]
    src = specials + [f"▁s{i}" for i in range(50_000 - NUM_SPECIAL)]
    trg = specials + [f"▁s{i}" if i % 2 else f"▁t{i}" for i in range(50_000 - NUM_SPECIAL)]
    start = time.perf_counter()
    _, _, stats = embedding_init.overlap_init(src, torch.randn(50_000, 64), torch.randn(50_000), trg,
                                       generator=torch.Generator().manual_seed(0))
    assert time.perf_counter() - start < 1.0
    assert stats["overlap"] == NUM_SPECIAL + (50_000 - NUM_SPECIAL) // 2


# --- swap ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [TINY, TINY_JOINT], ids=["one-head", "joint"])
def test_swapping_own_embeddings_back_reproduces_outputs(cfg) -> None:
    model = _perturbed(cfg)
    if AUX_HEAD in model.heads:  # the swap gives the aux head the main bias (documented): make them equal here
        with torch.no_grad():
            model.heads[AUX_HEAD].bias.copy_(model.heads[MAIN_HEAD].bias)
    batch = _batch(SRC_VOCAB)
    with torch.no_grad():
        before = model(**batch)
    emb, bias = transforms.extract_embeddings(model)
    foreign = MaskedLM(cfg)
    transforms.swap_embeddings(model, *transforms.extract_embeddings(foreign))
    with torch.no_grad():
        assert not torch.equal(model(**batch)[MAIN_HEAD], before[MAIN_HEAD])
    assert transforms.swap_embeddings(model, emb, bias) is model  # in place
    with torch.no_grad():
        after = model(**batch)
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)


def test_swap_to_another_vocabulary_size() -> None:
    model = _perturbed(TINY_JOINT)
    transforms.freeze_for_adaptation(model)
    emb, bias = torch.randn(TRG_VOCAB, TINY.hidden_size), torch.randn(TRG_VOCAB)
    transforms.swap_embeddings(model, emb, bias)
    assert model.cfg.vocab_size == TRG_VOCAB and model.embeddings.tokens.num_embeddings == TRG_VOCAB
    assert torch.equal(model.embeddings.tokens.weight, emb) and torch.equal(model.heads[MAIN_HEAD].bias, bias)
    assert torch.equal(model.heads[AUX_HEAD].bias, bias)
    assert model.embeddings.tokens.weight.data_ptr() != emb.data_ptr()  # a copy: the caller's tensor stays its own
    # requires_grad flags survive the swap.
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["embeddings.tokens.weight",
                                                                          "heads.main.bias"]
    ids = torch.full((2, 8), TRG_VOCAB - 1)
    with torch.no_grad():
        logits = model(ids)
    assert logits[MAIN_HEAD].shape == (2, 8, TRG_VOCAB) and logits[AUX_HEAD].shape == (2, 8, TRG_VOCAB)
    with pytest.raises(ValueError, match="hidden size"):
        transforms.swap_embeddings(model, torch.randn(10, 32), torch.randn(10))
    with pytest.raises(ValueError, match="bias"):
        transforms.swap_embeddings(model, torch.randn(10, TINY.hidden_size), torch.randn(11))


# --- plug with provenance --------------------------------------------------------------------------------------------


@pytest.fixture
def primary_folder(tmp_path: Path, tokenizers) -> tuple[Path, Record]:
    en, _ = tokenizers
    primary = _perturbed(TINY_JOINT)
    meta = save_model_folder(tmp_path / "primary", primary.state_dict(), {
        "variant": "minijoint", "model_config": TINY_JOINT.to_dict(), "step": 10,
        "tokenizer": {"path": str(en.path), "sha256": en.sha256}})
    return tmp_path / "primary", meta


def _target_embeddings(tokenizers, source: MaskedLM) -> tuple[torch.Tensor, torch.Tensor]:
    en, de = tokenizers
    emb, bias = transforms.extract_embeddings(source)
    emb, bias, _ = embedding_init.overlap_init(en.pieces(), emb, bias, de.pieces(),
                                               generator=torch.Generator().manual_seed(1))
    return emb + 0.01, bias + 0.01  # "trained" in Step 2


def test_extract_mini_then_plug_round_trips(tmp_path: Path, tokenizers, primary_folder, capsys) -> None:
    _, de = tokenizers
    folder, primary_meta = primary_folder
    assert surgery.main(["extract-mini", "--from", str(folder), "--out", str(tmp_path / "mini")]) == 0
    mini, mini_meta = load_mlm(tmp_path / "mini")
    assert mini_meta.kind == Kind.MINIJOINT_MINI and mini_meta.details["cut_from"] == str(folder)
    assert mini_meta.lineage == primary_meta.weights_sha256
    assert mini_meta.tokenizer == primary_meta.tokenizer
    assert mini.cfg.num_layers == 4 and mini.cfg.aux_head_layer is None

    emb, bias = _target_embeddings(tokenizers, mini)
    surgery.save_embeddings(tmp_path / "emb", emb, bias, {
        "primary_sha256": mini_meta.lineage, "tokenizer": {"path": str(de.path), "sha256": de.sha256}})
    capsys.readouterr()
    assert surgery.main(["plug", "--model", str(folder), "--embeddings", str(tmp_path / "emb"),
                         "--out", str(tmp_path / "plugged")]) == 0
    assert "plugged" in capsys.readouterr().out

    plugged, meta = load_mlm(tmp_path / "plugged")
    emb_meta = surgery.load_embeddings(tmp_path / "emb")[2]
    assert plugged.cfg == TINY_JOINT.replace(vocab_size=TRG_VOCAB)
    assert meta.tokenizer_dict == {"path": str(de.path), "sha256": de.sha256}
    assert meta.primary_sha256 == primary_meta.weights_sha256
    assert meta.details["embeddings_from"] == {"path": str(tmp_path / "emb"), "weights_sha256": emb_meta.weights_sha256}
    assert meta.step is None  # the body's training state is not carried over
    assert torch.equal(plugged.embeddings.tokens.weight, emb)

    # Aligned: the plugged primary's aux head reproduces the mini-model with the same embeddings exactly.
    plugged.eval()
    transforms.swap_embeddings(mini.eval(), emb, bias)
    batch = _batch(TRG_VOCAB)
    with torch.no_grad():
        assert torch.equal(plugged(**batch)[AUX_HEAD], mini(**batch)[MAIN_HEAD])

    # The in-memory API gives the same model and meta as the saved folder.
    model2, meta2 = surgery.plug_embeddings(folder, tmp_path / "emb")
    assert meta2 == meta.with_values(files={})  # but for the sizes and checksums of the saved files
    assert torch.equal(model2.embeddings.tokens.weight, emb)


def test_plug_refuses_embeddings_of_another_lineage(tmp_path: Path, tokenizers, primary_folder, capsys) -> None:
    _, de = tokenizers
    folder, _ = primary_folder
    emb, bias = _target_embeddings(tokenizers, MaskedLM(TINY))
    surgery.save_embeddings(tmp_path / "emb", emb, bias, {
        "primary_sha256": "0" * 64, "tokenizer": {"path": str(de.path), "sha256": de.sha256}})
    with pytest.raises(InputError, match="another lineage") as err:
        surgery.plug_embeddings(folder, tmp_path / "emb")
    assert str(folder) in str(err.value) and str(tmp_path / "emb") in str(err.value)
    assert surgery.main(["plug", "--model", str(folder), "--embeddings", str(tmp_path / "emb"),
                         "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not (tmp_path / "out").exists()


def test_plug_refuses_another_hidden_size(tmp_path: Path, tokenizers, primary_folder) -> None:
    _, de = tokenizers
    folder, primary_meta = primary_folder
    surgery.save_embeddings(tmp_path / "emb", torch.randn(TRG_VOCAB, 32), torch.zeros(TRG_VOCAB), {
        "primary_sha256": primary_meta.lineage, "tokenizer": {"path": str(de.path), "sha256": de.sha256}})
    with pytest.raises(InputError, match="hidden size") as err:
        surgery.plug_embeddings(folder, tmp_path / "emb")
    assert str(folder) in str(err.value) and str(tmp_path / "emb") in str(err.value)


def test_plug_carries_positions_and_embedding_norm_that_step2_trained(tmp_path: Path, tokenizers,
                                                                      primary_folder) -> None:
    """A Step-2 run with --train-positions --train-embedding-norm saves those tensors beside the rows; plugging and
    swapping carry every one of them, and a checkpoint missing one Step 2 trained is refused."""
    _, de = tokenizers
    folder, primary_meta = primary_folder
    primary, _ = load_mlm(folder)
    state = {transforms.TOKENS_KEY: torch.randn(TRG_VOCAB, 64), transforms.BIAS_KEY: torch.randn(TRG_VOCAB),
             "embeddings.positions.weight": torch.randn_like(primary.embeddings.positions.weight),
             "embeddings.norm.weight": torch.rand(64) + 0.5, "embeddings.norm.bias": torch.randn(64)}
    meta = {"kind": "embeddings", "primary_sha256": primary_meta.lineage, "vocab_size": TRG_VOCAB,
            "hidden_size": 64, "tokenizer": {"path": str(de.path), "sha256": de.sha256}, "trainable": sorted(state)}
    save_model_folder(tmp_path / "step2", state, meta)
    plugged, _ = surgery.plug_embeddings(folder, tmp_path / "step2")
    for key, tensor in state.items():
        assert torch.equal(plugged.state_dict()[key], tensor), key
    partial = {k: v for k, v in state.items() if k != "embeddings.norm.bias"}
    save_model_folder(tmp_path / "partial", partial, meta)
    with pytest.raises(InputError, match="but Step 2 trained"):
        surgery.plug_embeddings(folder, tmp_path / "partial")


def test_corrupted_embeddings_folders_are_refused(tmp_path: Path, tokenizers, primary_folder) -> None:
    _, de = tokenizers
    _, primary_meta = primary_folder
    meta = {"primary_sha256": primary_meta.lineage, "tokenizer": {"path": str(de.path), "sha256": de.sha256}}
    folder = tmp_path / "emb"
    emb, bias = torch.randn(TRG_VOCAB, 64), torch.randn(TRG_VOCAB)
    surgery.save_embeddings(folder, emb, bias, meta)
    weights = folder / "model.pt"

    torch.save({transforms.TOKENS_KEY: emb, transforms.BIAS_KEY: bias + 1}, weights)  # replaced after it was written
    with pytest.raises(InputError, match="does not match the size and checksum recorded in meta.json"):
        surgery.load_embeddings(folder)
    # Without the recorded checksums (folders written before they existed) the contents are still checked:
    meta_file = folder / "meta.json"
    meta_file.write_text(json.dumps({k: v for k, v in json.loads(meta_file.read_text()).items() if k != "files"}))

    torch.save({transforms.TOKENS_KEY: emb, transforms.BIAS_KEY: bias[:-1]}, weights)  # shapes disagree
    with pytest.raises(InputError, match="vocabulary sizes disagree") as err:
        surgery.load_embeddings(folder)
    assert str(weights) in str(err.value)

    torch.save({transforms.TOKENS_KEY: emb}, weights)  # a tensor missing
    with pytest.raises(InputError, match="expected the tensors"):
        surgery.load_embeddings(folder)

    torch.save({transforms.TOKENS_KEY: emb, transforms.BIAS_KEY: bias + 1}, weights)  # same shapes, other contents
    with pytest.raises(InputError, match="weights_sha256"):
        surgery.load_embeddings(folder)

    surgery.save_embeddings(folder, emb, bias, meta)
    assert surgery.load_embeddings(folder)[2].details["vocab_size"] == TRG_VOCAB
    with pytest.raises(ValueError, match="vocab_size"):  # meta that contradicts the tensors is not written
        surgery.save_embeddings(folder, emb, bias, {**meta, "vocab_size": 7})
    with pytest.raises(InputError, match="not trained embeddings"):
        surgery.load_embeddings(primary_folder[0])


def test_extract_mini_cli_refuses_a_one_head_checkpoint(tmp_path: Path, capsys) -> None:
    save_model_folder(tmp_path / "base", MaskedLM(TINY).state_dict(), {"model_config": TINY.to_dict()})
    assert surgery.main(["extract-mini", "--from", str(tmp_path / "base"), "--out", str(tmp_path / "mini")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "base") in err


def test_every_systems_step2_body_is_cut_to_the_depth_its_flop_count_uses():
    """model.bodies has one entry per body kind of the registry, and for every registered system the body it cuts from
    a model of the primary's shape has the depth that the system's FLOP count (step2_layers) assumes."""
    from ds_minimodel import systems
    from ds_minimodel.model.bodies import BODY, body_of

    assert tuple(BODY) == systems.BODIES
    depths = systems.Depths(layers=6, small=2, aux=2, keep=2, new=1)
    for name in systems.system_names():  # minijoint@N registered by other tests: those that fit 6 layers
        if (systems.depth_of(name) or 0) > depths.layers:
            continue
        entry = systems.get_system(name)
        primary = systems.get_primary(entry.primary)
        model = MaskedLM(TINY.replace(num_layers=primary.num_layers(depths),
                                      aux_head_layer=primary.aux_head_layer(depths)))
        body = body_of(entry).cut(model, depths)
        assert body.cfg.num_layers == entry.step2_layers(depths), name
        assert body.cfg.aux_head_layer is None, name  # Step 2 reads one head


def test_a_step1b_system_of_its_own_depth_runs_beside_minipost(tmp_path, monkeypatch) -> None:
    """Issue 50: a system carries its own Step-1b shape (systems.System.depths_of). A MiniPost that keeps 3 layers
    beside the config's MiniPost (2 kept in the demo config): its Step-1b job asks for 3 + 2 layers, its fresh
    models and FLOP count follow, and the config's own MiniPost is unchanged."""
    import dataclasses
    import json

    from ds_minimodel import flops
    from ds_minimodel.config import get_preset
    from ds_minimodel.pipeline import plan
    from ds_minimodel.pipeline.plan import Pipeline
    from ds_minimodel.pipeline.settings import PipelineConfig
    from ds_minimodel.stages import steps
    from ds_minimodel.systems import SYSTEMS, Depths, Step, System, register
    from tests.unit.test_hardening import pipeline_config

    register(System("minipost_deep", "MiniPost (N=3)", "base", "step1b", step2_layers=lambda d: d.keep + d.new,
                    depths_of=lambda d: dataclasses.replace(d, keep=3)))
    try:
        systems = json.loads(pipeline_config(tmp_path).read_text())["systems"] + ["minipost_deep"]
        path = pipeline_config(tmp_path, systems=systems)
        pipeline = Pipeline(PipelineConfig.load(path), str(path))
        asked = {}
        monkeypatch.setattr(Pipeline, "_primary", lambda self, variant, needed_by: tmp_path / "primary")
        monkeypatch.setattr(Pipeline, "_data", lambda self, lang, needed_by: tmp_path / "data")
        monkeypatch.setattr(plan, "train_step", lambda spec, spec_file, *a, **k: asked.update({spec_file.stem: spec}))
        pipeline._step1b("minipost")
        pipeline._step1b("minipost_deep")
        assert (asked["step1b-minipost"].keep_layers, asked["step1b-minipost"].new_layers) == (2, 2)
        assert (asked["step1b-minipost_deep"].keep_layers, asked["step1b-minipost_deep"].new_layers) == (3, 2)
        cfg, depths = get_preset("tiny"), Depths(layers=6, keep=2, new=2)
        model = steps.fresh(Step.MINIPOST, cfg, depths, system="minipost_deep").model
        assert model.cfg.num_layers == 5
        body = steps.fresh(Step.ADAPT, cfg.replace(num_layers=6), depths, system="minipost_deep").model
        assert body.cfg.num_layers == 5
        costs = flops.system_costs(h=64, V=300, s=32, p=0.15, B=8, U=10, layers=6, mini_layers=2, new_layers=2)
        assert costs["minipost_deep"]["step2"] > costs["minipost"]["step2"] > 0
        assert costs["minipost_deep"]["step1b"] > costs["minipost"]["step1b"] > 0
    finally:
        SYSTEMS.pop("minipost_deep", None)

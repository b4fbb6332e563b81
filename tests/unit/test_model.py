"""Unit tests of model.encoder: tied head, masked-only head, padding, MiniJoint's dual head, HF parity, presets.

CPU only. Most tests use a micro config (hidden 32, 3 layers) whose weights are perturbed away from the init (biases
are zero and LayerNorms identity at init, which would hide a wrongly mapped bias or norm). The `base` preset is built
once for one training step at seq_len 16; parameter counts are taken on the meta device (no memory, no init cost).
"""
from __future__ import annotations

import time

import pytest
import torch

from ds_minimodel.config import ModelConfig, get_preset
from ds_minimodel.data.tokenizer import IGNORE_INDEX
from ds_minimodel.model.encoder import AUX_HEAD, MAIN_HEAD, MASKED_ROWS_MULTIPLE, MaskedLM
from ds_minimodel.model.hf import state_dict_from_hf
from ds_minimodel.model.losses import mlm_losses

MICRO = ModelConfig(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, ffn_size=64, max_positions=16)
MICRO_JOINT = MICRO.replace(aux_head_layer=2)


def _perturbed(cfg: ModelConfig) -> MaskedLM:
    """A model in eval mode whose every parameter (biases and LayerNorms included) is away from its init value."""
    model = MaskedLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _random_ids(cfg: ModelConfig, batch: int, seq_len: int, low: int = 0, high: int | None = None) -> torch.Tensor:
    return torch.randint(low, cfg.vocab_size if high is None else high, (batch, seq_len))


# --- 1. tied output projection ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [MICRO, MICRO_JOINT], ids=["one-head", "joint"])
def test_every_head_projects_with_the_token_embedding_matrix(cfg: ModelConfig) -> None:
    model = _perturbed(cfg)
    # No second (V, h) matrix anywhere: the projection has no parameter of its own.
    vocab_by_hidden = [n for n, p in model.named_parameters() if p.shape == (cfg.vocab_size, cfg.hidden_size)]
    assert vocab_by_hidden == ["embeddings.tokens.weight"]

    # Inputs use only the lower half of the vocabulary, so row `r` of the embedding reaches the logits only through
    # the output projection.
    ids = _random_ids(cfg, 2, 8, high=cfg.vocab_size // 2)
    r = cfg.vocab_size - 1
    heads = list(model.head_layers())
    assert heads == ([MAIN_HEAD, AUX_HEAD] if cfg.aux_head_layer else [MAIN_HEAD])
    for head in heads:
        model.zero_grad(set_to_none=True)
        model(ids)[head][..., r].sum().backward()
        grad = model.embeddings.tokens.weight.grad
        assert grad[r].abs().sum() > 0, f"{head} head's logits do not reach embedding row {r}"
        assert torch.all(grad[cfg.vocab_size // 2:r] == 0)  # rows neither in the input nor differentiated

    with torch.no_grad():
        before = model(ids)
        model.embeddings.tokens.weight[r] += 1.0  # same storage the heads read
        after = model(ids)
    for head in heads:
        assert not torch.allclose(before[head][..., r], after[head][..., r])
        torch.testing.assert_close(before[head][..., :r], after[head][..., :r], rtol=0, atol=0)


# --- 2. masked-only head ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [MICRO, MICRO_JOINT], ids=["one-head", "joint"])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_masked_only_logits_equal_full_logits_at_masked_positions(cfg: ModelConfig, padded: bool) -> None:
    model = _perturbed(cfg)
    ids = _random_ids(cfg, 2, 12)
    attention_mask = torch.ones(2, 12, dtype=torch.bool)
    if padded:
        attention_mask[0, 9:] = False
    masked = (torch.rand(2, 12) < 0.3) & attention_mask
    masked[1, 0] = True  # at least one
    with torch.no_grad():
        full = model(ids, attention_mask)
        only = model(ids, attention_mask, masked_positions=masked)
    assert set(only) == set(full) == set(model.head_layers())
    for head in full:
        assert full[head].shape == (2, 12, cfg.vocab_size)
        assert only[head].shape == (int(masked.sum()), cfg.vocab_size)
        # Row-major order, the order labels[labels != IGNORE_INDEX] yields.
        torch.testing.assert_close(only[head], full[head][masked], rtol=1e-5, atol=1e-6)


def test_an_mlm_batch_marked_unpadded_goes_in_without_its_mask_and_trains_the_same() -> None:
    """mlm_step leaves the attention mask out when the batch says no block is padded (known on the host: no wait on
    the device, and a compiled model can use SDPA's unmasked kernels); in eager mode the model would drop an all-True
    mask itself, so the losses and gradients are the same, bitwise. A batch marked padded keeps its mask."""
    from ds_minimodel.data.streams import PADDED
    from ds_minimodel.model.losses import mlm_step

    cfg = ModelConfig(vocab_size=60, hidden_size=16, num_layers=2, num_heads=2, ffn_size=32, max_positions=12)
    model = _perturbed(cfg)
    ids = _random_ids(cfg, 3, 12)
    labels = torch.where(torch.rand(3, 12) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 1] = ids[0, 1]
    batch = {"input_ids": ids, "attention_mask": torch.ones(3, 12, dtype=torch.bool), "labels": labels}
    seen = []
    hook = model.register_forward_pre_hook(lambda _, args: seen.append(args[1]))
    grads = []
    for flag in (True, False):
        model.zero_grad()
        loss = mlm_step(model, {**batch, PADDED: flag})["loss"]
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    hook.remove()
    assert seen[0] is batch["attention_mask"] and seen[1] is None
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))


def test_the_masked_rows_reach_the_vocabulary_in_a_few_shapes_and_train_as_without_them() -> None:
    """The masked count changes every update; a shape per count made oneDNN keep a bf16 copy of the projection per
    shape on AMX CPUs (a rank grew 50 MB an update). The heads see multiples of MASKED_ROWS_MULTIPLE rows, and the
    loss and every gradient are those of the masked rows alone."""
    model = _perturbed(MICRO_JOINT)
    seen: list[int] = []
    rows = set()
    for head in model.heads.values():
        head.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    for count in (1, 5, 17):
        ids = _random_ids(MICRO_JOINT, 8, 12)
        masked = torch.zeros(8, 12, dtype=torch.bool)
        masked.view(-1)[torch.randperm(96)[:count]] = True
        labels = torch.where(masked, ids, IGNORE_INDEX)
        model.zero_grad()
        seen.clear()
        mlm_losses(model(ids, masked_positions=masked), labels)["loss"].backward()
        rows.update(seen)
        bucketed = {name: p.grad.clone() for name, p in model.named_parameters()}
        model.zero_grad()  # the same loss by hand, each head over exactly the masked rows
        states = dict(enumerate(model.hidden_states(ids, None), start=1))
        by_hand = {name: model.heads[name](states[layer][masked], model.embeddings.tokens.weight)
                   for name, layer in model.head_layers().items()}
        mlm_losses(by_hand, labels)["loss"].backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(bucketed[name], p.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert rows == {MASKED_ROWS_MULTIPLE} and seen == [MASKED_ROWS_MULTIPLE] * 2 + [17, 17]  # bucketed, by hand


# --- 3. padding -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [MICRO_JOINT, MICRO_JOINT.replace(attention_bias="alibi")], ids=["none", "alibi"])
def test_real_tokens_do_not_depend_on_padded_positions(cfg: ModelConfig) -> None:
    model = _perturbed(cfg)
    lengths = [9, 12, 5]
    seq_len = 12
    attention_mask = torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]  # right padding
    ids = _random_ids(cfg, 3, seq_len)
    other = torch.where(attention_mask, ids, _random_ids(cfg, 3, seq_len))  # different junk in the padding
    assert not torch.equal(ids, other)
    with torch.no_grad():
        a = model(ids, attention_mask)
        b = model(other, attention_mask)
        alone = [model(ids[i:i + 1, :n]) for i, n in enumerate(lengths)]  # each sequence unpadded, on its own
    for head in a:
        torch.testing.assert_close(a[head][attention_mask], b[head][attention_mask], rtol=0, atol=0)
        for i, n in enumerate(lengths):
            torch.testing.assert_close(a[head][i, :n], alone[i][head][0], rtol=1e-5, atol=1e-5)


# --- 4. MiniJoint's dual head ----------------------------------------------------------------------------------------


def test_aux_logits_equal_first_n_layers_and_aux_head_run_by_hand() -> None:
    model = _perturbed(MICRO_JOINT)
    n = MICRO_JOINT.aux_head_layer
    assert model.head_layers() == {MAIN_HEAD: MICRO.num_layers, AUX_HEAD: n}
    ids = _random_ids(MICRO, 2, 10)
    masked = torch.rand(2, 10) < 0.4
    masked[0, 3] = True
    with torch.no_grad():
        x = model.embeddings(ids)
        for layer in model.layers[:n]:
            x = layer(x, None)
        by_hand = model.heads[AUX_HEAD](x, model.embeddings.tokens.weight)
        out = model(ids)
        out_masked = model(ids, masked_positions=masked)
    torch.testing.assert_close(out[AUX_HEAD], by_hand, rtol=0, atol=0)
    torch.testing.assert_close(out_masked[AUX_HEAD], by_hand[masked], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(out[AUX_HEAD], out[MAIN_HEAD])  # really a different layer / head


def test_main_logits_do_not_change_when_an_aux_head_is_added() -> None:
    joint = _perturbed(MICRO_JOINT)
    plain = MaskedLM(MICRO).eval()
    shared = {k: v for k, v in joint.state_dict().items() if not k.startswith(f"heads.{AUX_HEAD}.")}
    plain.load_state_dict(shared, strict=True)  # strict: the aux head is the ONLY extra part
    ids = _random_ids(MICRO, 2, 10)
    attention_mask = torch.ones(2, 10, dtype=torch.bool)
    attention_mask[1, 6:] = False
    with torch.no_grad():
        a = joint(ids, attention_mask)
        b = plain(ids, attention_mask)
    assert set(b) == {MAIN_HEAD}
    torch.testing.assert_close(a[MAIN_HEAD], b[MAIN_HEAD], rtol=0, atol=0)


# --- 5. parity with Hugging Face RobertaForMaskedLM -------------------------------------------------------------------

HF_PAD = 1  # RoBERTa's <pad>; HF position ids of real tokens start at HF_PAD + 1 = 2
PARITY = ModelConfig(vocab_size=300, hidden_size=64, num_layers=3, num_heads=4, ffn_size=128, max_positions=32,
                     dropout=0.0, attention_dropout=0.0)


def _hf_roberta(attn_implementation: str):
    transformers = pytest.importorskip("transformers", reason="transformers (a test-only dependency) not installed")
    hf_cfg = transformers.RobertaConfig(
        vocab_size=PARITY.vocab_size, hidden_size=PARITY.hidden_size, num_hidden_layers=PARITY.num_layers,
        num_attention_heads=PARITY.num_heads, intermediate_size=PARITY.ffn_size,
        max_position_embeddings=PARITY.max_positions + 2,  # two leading rows: <pad>'s and an unused one
        pad_token_id=HF_PAD, bos_token_id=0, eos_token_id=2,
        layer_norm_eps=PARITY.layer_norm_eps,  # RobertaConfig's default is BERT's 1e-12, not RoBERTa's 1e-5
        hidden_act="gelu", type_vocab_size=1,  # RobertaConfig's default is BERT's 2
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attn_implementation=attn_implementation)
    hf = transformers.RobertaForMaskedLM(hf_cfg).eval()
    assert hf.config._attn_implementation == attn_implementation  # the choice took effect
    # The mapping below relies on HF tying the decoder to the word embeddings and its bias to lm_head.bias.
    assert hf.lm_head.decoder.weight is hf.roberta.embeddings.word_embeddings.weight
    assert hf.lm_head.decoder.bias is hf.lm_head.bias
    with torch.no_grad():  # HF inits biases to 0 and LayerNorms to identity: randomise so every mapping is tested
        for name, p in hf.named_parameters():
            if "LayerNorm.weight" in name or "layer_norm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return hf


def _state_dict_from_hf(hf) -> dict[str, torch.Tensor]:
    """Our MaskedLM's state dict from a RobertaForMaskedLM's weights, through the package's one owner of the HF
    names (ds_minimodel.model.hf); the logits comparison below is what checks that mapping against transformers."""
    state, _, notes = state_dict_from_hf(hf.state_dict(), model_type="roberta", num_layers=PARITY.num_layers,
                                         position_offset=HF_PAD + 1)
    assert not notes  # nothing dropped: every HF tensor of a RoBERTa MLM has its place here
    return {k: v.detach().clone() for k, v in state.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_logits_match_hf_roberta_for_masked_lm(attn_implementation: str, dtype: torch.dtype) -> None:
    hf = _hf_roberta(attn_implementation).to(dtype)
    ours = MaskedLM(PARITY).to(dtype).eval()  # cast first: load_state_dict copies into the existing dtype
    ours.load_state_dict(_state_dict_from_hf(hf), strict=True)  # strict: every one of our tensors is mapped
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)

    # Real tokens never use the pad id: HF would give them pad's position row.
    seq_len = PARITY.max_positions  # every position row is used
    ids = _random_ids(PARITY, 2, seq_len, low=HF_PAD + 1)
    with torch.no_grad():
        expected = hf(input_ids=ids).logits
        got = ours(ids)[MAIN_HEAD]
    assert expected.dtype == got.dtype == dtype
    torch.testing.assert_close(got, expected, **tol)

    # Right padding: compare real positions (HF's padded ones use pad's position row; ours do not matter).
    lengths = torch.tensor([seq_len, 20, 7])
    attention_mask = torch.arange(seq_len)[None, :] < lengths[:, None]
    ids = torch.where(attention_mask, _random_ids(PARITY, 3, seq_len, low=HF_PAD + 1), HF_PAD)
    masked = (torch.rand(3, seq_len) < 0.3) & attention_mask
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=attention_mask.long()).logits
        got = ours(ids, attention_mask)[MAIN_HEAD]
        got_masked = ours(ids, attention_mask, masked_positions=masked)[MAIN_HEAD]
    torch.testing.assert_close(got[attention_mask], expected[attention_mask], **tol)
    torch.testing.assert_close(got_masked, expected[masked], **tol)


# --- 6. presets ------------------------------------------------------------------------------------------------------


def test_base_preset_parameter_count() -> None:
    # RoBERTa-base with a 50,000-token vocabulary (paper section 3), h = 768, l = 12, FFN 3072, 512 positions:
    #   embeddings: tokens 50,000 x 768 = 38,400,000; positions 512 x 768 = 393,216; LayerNorm 2 x 768 = 1,536
    #               -> 38,794,752
    #   one layer:  qkv 768 x 2,304 + 2,304 = 1,771,776; out 768 x 768 + 768 = 590,592;
    #               ffn_in 768 x 3,072 + 3,072 = 2,362,368; ffn_out 3,072 x 768 + 768 = 2,360,064;
    #               two LayerNorms 2 x 1,536 = 3,072                                   -> 7,087,872
    #   12 layers:  12 x 7,087,872                                                      -> 85,054,464
    #   MLM head:   dense 768 x 768 + 768 = 590,592; LayerNorm 1,536; output bias 50,000 (projection tied: 0)
    #               -> 642,128
    #   total:      38,794,752 + 85,054,464 + 642,128 = 124,491,344
    # (HF's roberta-base reports ~124.6M with its 50,265-token vocabulary, 514 positions and token-type row.)
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = MaskedLM(get_preset("base"))
    count = model.num_parameters()
    print(f"base preset: {count:,} parameters")
    assert count == 124_491_344
    assert count == sum(p.numel() for p in model.parameters())


def test_small_preset_has_four_layers() -> None:
    with torch.device("meta"):
        model = MaskedLM(get_preset("small"))
    assert len(model.layers) == 4
    assert model.num_parameters() == 124_491_344 - 8 * 7_087_872  # base minus eight layers


def _one_training_step(model: MaskedLM, batch: int, seq_len: int) -> dict[str, torch.Tensor]:
    """Forward on the masked positions, mlm_losses, backward, one AdamW step (what the engine does, minus DeepSpeed)."""
    cfg = model.cfg
    ids = _random_ids(cfg, batch, seq_len)
    masked = torch.rand(batch, seq_len) < 0.15
    masked[:, 1] = True
    labels = torch.where(masked, ids, IGNORE_INDEX)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # fused: a faster first step on CPU
    losses = mlm_losses(model(ids, masked_positions=masked), labels)
    losses["loss"].backward()
    optimizer.step()
    return losses


def test_base_preset_trains_one_step() -> None:
    model = MaskedLM(get_preset("base"))
    watched = {  # a few tensors, not the whole 0.5 GB model
        "embeddings.tokens.weight": model.embeddings.tokens.weight,
        "layers.0.attention.qkv.weight": model.layers[0].attention.qkv.weight,
        "layers.11.ffn_out.bias": model.layers[11].ffn_out.bias,
        "heads.main.bias": model.heads[MAIN_HEAD].bias,
    }
    before = {name: p.detach().clone() for name, p in watched.items()}
    losses = _one_training_step(model, batch=2, seq_len=16)
    assert torch.isfinite(losses["loss"])
    # Near-uniform predictions at init: logits have std ~ 0.02 * sqrt(768) = 0.55, so the cross-entropy is a little
    # above ln(50,000) = 10.82 (about ln V + std^2 / 2 for Gaussian logits); far from it means a broken head or loss.
    assert 10.3 < losses["loss"].item() < 12.0
    for name, p in watched.items():
        assert torch.isfinite(p.grad).all(), name
        assert not torch.equal(p.detach(), before[name]), f"{name} did not change"


@pytest.mark.parametrize("aux_head_layer", [None, 4])
def test_tiny_preset_runs_a_full_step(aux_head_layer: int | None) -> None:
    # STYLE habit 3: tiny is the preset tests and the demo use; it must run a full step on CPU (no timing asserted).
    model = MaskedLM(get_preset("tiny").replace(aux_head_layer=aux_head_layer))
    start = time.perf_counter()
    losses = _one_training_step(model, batch=2, seq_len=32)
    print(f"tiny preset (aux_head_layer={aux_head_layer}): one step in {time.perf_counter() - start:.3f} s")
    assert set(losses) == {"loss", *(f"loss_{h}" for h in model.head_layers())}
    assert all(torch.isfinite(v) for v in losses.values())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# --- 7. errors -------------------------------------------------------------------------------------------------------


def test_sequence_longer_than_max_positions_raises() -> None:
    model = MaskedLM(MICRO).eval()
    with torch.no_grad():
        model(_random_ids(MICRO, 1, MICRO.max_positions))  # exactly max_positions is fine
        with pytest.raises(ValueError, match="max_positions"):
            model(_random_ids(MICRO, 1, MICRO.max_positions + 1))


@pytest.mark.parametrize("frozen_body", [False, True])
def test_activation_checkpointing_changes_nothing_but_memory(frozen_body):
    """Same losses and gradients, bitwise in fp32, with dropout on (the recomputation replays the RNG), for full
    training and for Step 2's frozen body (only the embeddings get gradients)."""
    from ds_minimodel.model.transforms import freeze_for_adaptation

    cfg = get_preset("tiny").replace(aux_head_layer=4, dropout=0.1, attention_dropout=0.1)
    torch.manual_seed(0)
    ids = torch.randint(5, cfg.vocab_size, (2, 24))
    labels = torch.where(torch.rand(2, 24) < 0.3, ids, torch.full_like(ids, IGNORE_INDEX))
    results = []
    for checkpointed in (False, True):
        torch.manual_seed(1)
        model = MaskedLM(cfg).train()
        if frozen_body:
            freeze_for_adaptation(model)
        model.activation_checkpointing = checkpointed
        calls, layer_forward = [], model.layers[0].forward
        model.layers[0].forward = lambda *a: calls.append(1) or layer_forward(*a)  # (hooks skip recomputation)
        torch.manual_seed(2)  # the same dropout masks for both runs
        loss = mlm_losses(model(ids, None, labels != IGNORE_INDEX), labels)["loss"]
        loss.backward()
        assert len(calls) == (2 if checkpointed else 1)  # recomputed in the backward pass, or kept
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (plain_loss, plain_grads), (ckpt_loss, ckpt_grads) = results
    assert torch.equal(plain_loss, ckpt_loss) and plain_grads.keys() == ckpt_grads.keys()
    assert ("layers.0.ffn_in.weight" in plain_grads) != frozen_body
    for name in plain_grads:
        assert torch.equal(plain_grads[name], ckpt_grads[name]), name


@pytest.mark.parametrize("structure", ["post-LN, learned positions", "pre-LN, ALiBi"])
def test_qkv_views_change_nothing_but_the_copies_in_the_backward(structure):
    """``qkv_views``: the same losses and gradients, bitwise in fp32, with padding and dropout, and fewer copies in the
    backward (the permuted layout's gradient is made contiguous once more per layer)."""
    cfg = get_preset("tiny").replace(num_layers=3, aux_head_layer=2, dropout=0.1, attention_dropout=0.1)
    if structure == "pre-LN, ALiBi":
        cfg = cfg.replace(pre_norm=True, attention_bias="alibi")
    torch.manual_seed(0)
    ids = torch.randint(5, cfg.vocab_size, (3, 24))
    padding = torch.arange(24) < torch.tensor([[24], [17], [9]])
    labels = torch.where((torch.rand(3, 24) < 0.3) & padding, ids, torch.full_like(ids, IGNORE_INDEX))
    results = []
    for views in (False, True):
        torch.manual_seed(1)
        model = MaskedLM(cfg).train()
        model.qkv_views = views
        assert model.qkv_views == views and all(layer.attention.qkv_views == views for layer in model.layers)
        torch.manual_seed(2)  # the same dropout masks for both runs
        loss = mlm_losses(model(ids, padding, labels != IGNORE_INDEX), labels)["loss"]
        with torch.profiler.profile() as profile:
            loss.backward()
        copies = sum(e.count for e in profile.key_averages() if e.key in ("aten::clone", "aten::contiguous"))
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}, copies))
    (plain_loss, plain_grads, plain_copies), (views_loss, views_grads, views_copies) = results
    assert torch.equal(plain_loss, views_loss) and plain_grads.keys() == views_grads.keys()
    for name in plain_grads:
        assert torch.equal(plain_grads[name], views_grads[name]), name
    assert plain_copies - views_copies == cfg.num_layers, (views_copies, plain_copies)  # one fewer per layer


# --- pre-LN and the task head's pooling ------------------------------------------------------------------------------


def test_pre_norm_block_normalises_the_sublayer_inputs_and_every_head_has_its_own_norm() -> None:
    cfg = MICRO_JOINT.replace(pre_norm=True, dropout=0.0, attention_dropout=0.0)
    model = _perturbed(cfg)
    assert all(hasattr(model.heads[name], "input_norm") for name in (MAIN_HEAD, AUX_HEAD))
    assert not hasattr(MaskedLM(MICRO).heads[MAIN_HEAD], "input_norm")  # post-LN state dicts are unchanged
    ids = _random_ids(cfg, 2, 8)
    with torch.no_grad():
        x = model.embeddings(ids)
        for layer in model.layers:  # x + Attn(LN(x)); x + FFN(LN(x)), by hand
            x = x + layer.attention(layer.attention_norm(x), None)
            x = x + layer.ffn_out(torch.nn.functional.gelu(layer.ffn_in(layer.ffn_norm(x))))
        head = model.heads[MAIN_HEAD]
        want = torch.nn.functional.linear(
            head.norm(torch.nn.functional.gelu(head.dense(head.input_norm(x)))), model.embeddings.tokens.weight,
            head.bias)
        assert torch.allclose(model(ids)[MAIN_HEAD], want, atol=1e-5)


def test_mean_pooling_reads_only_real_tokens() -> None:
    from ds_minimodel.model.encoder import TaskModel

    torch.manual_seed(0)
    model = TaskModel(MICRO.replace(pre_norm=True), "sequence", 3, pooling="mean").eval()
    ids = _random_ids(MICRO, 1, 6, low=5)
    short = model(ids[:, :4], torch.ones(1, 4, dtype=torch.bool))
    padded_ids = torch.cat([ids[:, :4], torch.ones(1, 2, dtype=torch.long)], dim=1)
    mask = torch.tensor([[True] * 4 + [False] * 2])
    assert torch.allclose(model(padded_ids, mask), short, atol=1e-5)
    cls = TaskModel(MICRO.replace(pre_norm=True), "sequence", 3, pooling="cls").eval()
    cls.load_state_dict(model.state_dict())
    assert not torch.allclose(cls(padded_ids, mask), short, atol=1e-3)  # the pooling is what differs
    with pytest.raises(ValueError, match="pooling"):
        TaskModel(MICRO, "sequence", 3, pooling="max")


def test_sinusoidal_position_init_is_scaled_and_ordered() -> None:
    cfg = MICRO.replace(position_init="sinusoidal", max_positions=64, hidden_size=32)
    table = MaskedLM(cfg).embeddings.positions.weight.detach()
    assert abs(table.std().item() - cfg.init_std) < 1e-6
    cosine = torch.nn.functional.cosine_similarity
    assert cosine(table[10], table[11], dim=0) > cosine(table[10], table[40], dim=0)  # neighbours start alike
    assert not torch.equal(MaskedLM(MICRO).embeddings.positions.weight[10], table[10])
    with pytest.raises(Exception, match="position_init"):
        MICRO.replace(position_init="rope")


def test_word_order_probe_tells_a_model_that_reads_order_from_one_that_does_not() -> None:
    """A micro model trained on sequences where each token is the previous one plus one reads order: shuffling the
    unmasked context costs it nats. Untrained, it does not."""
    from ds_minimodel.model.losses import mlm_losses
    from ds_minimodel.tools.probe import word_order_losses

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=69, hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_positions=32,
                      dropout=0.0, attention_dropout=0.0, pre_norm=True)
    model = MaskedLM(cfg)

    def blocks(n: int) -> torch.Tensor:
        ids = 5 + (torch.randint(0, 64, (n, 1)) + torch.arange(24)) % 64
        ids[:, 0] = 0
        return ids

    before = word_order_losses(model, blocks(64).numpy())
    assert abs(before["shuffled"] - before["as_written"]) < 0.1
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        ids = blocks(32)
        chosen = torch.rand(ids.shape) < 0.15
        chosen[:, 0] = False
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
        loss = mlm_losses(model(torch.where(chosen, torch.full_like(ids, 4), ids), None, chosen), labels)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = word_order_losses(model, blocks(64).numpy())
    assert after["shuffled"] - after["as_written"] > 1.0 and after["random"] > after["shuffled"]


def test_alibi_adds_a_symmetric_distance_penalty_per_head_and_masks_padding() -> None:
    model = MaskedLM(MICRO.replace(attention_bias="alibi"))
    padding = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]  # (B, 1, 1, S)
    bias = model._alibi(5, padding, torch.zeros(0))
    assert bias.shape == (2, 4, 5, 5)
    for head, slope in enumerate([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]):  # m_h = 2^(-8h/H), H = 4
        assert bias[0, head, 1, 4].item() == bias[0, head, 4, 1].item() == -3 * slope
    assert (bias[0].diagonal(dim1=1, dim2=2) == 0).all()
    assert torch.isinf(bias[1, :, :, 3:]).all() and torch.isfinite(bias[1, :, :, :3]).all()
    # The same weights without the bias give other outputs: the bias is applied.
    plain = MaskedLM(MICRO)
    plain.load_state_dict(model.state_dict())
    ids = torch.randint(5, MICRO.vocab_size, (1, 12))
    with torch.no_grad():
        assert not torch.allclose(model(ids)[MAIN_HEAD], plain(ids)[MAIN_HEAD], atol=1e-4)
    with pytest.raises(Exception, match="attention_bias"):
        MICRO.replace(attention_bias="t5")

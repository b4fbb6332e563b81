"""Unit tests of ds_minimodel.model.losses.mlm_losses: per-head cross-entropy, MiniJoint's average, edge cases."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ds_minimodel.config import ModelConfig
from ds_minimodel.data.tokenizer import IGNORE_INDEX
from ds_minimodel.model.encoder import AUX_HEAD, MAIN_HEAD, MaskedLM
from ds_minimodel.model.losses import mlm_losses

VOCAB = 50


def _labels(batch: int = 3, seq_len: int = 10, p: float = 0.3) -> torch.Tensor:
    """(B, S) targets with IGNORE_INDEX at unmasked positions, at least one masked position."""
    masked = torch.rand(batch, seq_len) < p
    masked[0, 0] = True
    return torch.where(masked, torch.randint(0, VOCAB, (batch, seq_len)), IGNORE_INDEX)


def _head_logits(labels: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    n = int((labels != IGNORE_INDEX).sum())
    return (3.0 * torch.randn(n, VOCAB)).to(dtype).requires_grad_()


def test_per_head_losses_are_cross_entropy_over_the_masked_targets() -> None:
    labels = _labels()
    logits = {MAIN_HEAD: _head_logits(labels), AUX_HEAD: _head_logits(labels)}
    losses = mlm_losses(logits, labels)
    assert set(losses) == {"loss", f"loss_{MAIN_HEAD}", f"loss_{AUX_HEAD}"}
    targets = labels[labels != IGNORE_INDEX]
    for head, head_logits in logits.items():
        torch.testing.assert_close(losses[f"loss_{head}"], F.cross_entropy(head_logits, targets))
        # Same as HF-style full-sequence logits with ignore_index, when the masked rows are scattered back in
        # row-major order (the order the model's x[masked_positions] produces).
        full = torch.zeros(*labels.shape, VOCAB)
        full[labels != IGNORE_INDEX] = head_logits.detach()
        torch.testing.assert_close(
            losses[f"loss_{head}"].detach(),
            F.cross_entropy(full.view(-1, VOCAB), labels.view(-1), ignore_index=IGNORE_INDEX))


def test_loss_is_exactly_the_mean_of_the_two_heads() -> None:
    labels = _labels()
    losses = mlm_losses({MAIN_HEAD: _head_logits(labels), AUX_HEAD: _head_logits(labels)}, labels)
    assert losses[f"loss_{MAIN_HEAD}"] != losses[f"loss_{AUX_HEAD}"]
    assert torch.equal(losses["loss"], (losses[f"loss_{MAIN_HEAD}"] + losses[f"loss_{AUX_HEAD}"]) / 2)


def test_one_head_loss_is_that_heads_loss() -> None:
    labels = _labels()
    losses = mlm_losses({MAIN_HEAD: _head_logits(labels)}, labels)
    assert set(losses) == {"loss", f"loss_{MAIN_HEAD}"}
    assert torch.equal(losses["loss"], losses[f"loss_{MAIN_HEAD}"])


def test_gradient_of_the_average_splits_evenly_between_heads() -> None:
    # MiniJoint backpropagates the mean once (paper section 2.2): each head gets half of its own loss's gradient.
    labels = _labels()
    main, aux = _head_logits(labels), _head_logits(labels)
    mlm_losses({MAIN_HEAD: main, AUX_HEAD: aux}, labels)["loss"].backward()
    alone = main.detach().clone().requires_grad_()
    mlm_losses({MAIN_HEAD: alone}, labels)["loss"].backward()
    torch.testing.assert_close(main.grad, alone.grad / 2)


@pytest.mark.parametrize("aux_weight", [0.25, 0.8])
def test_a_weight_gives_the_second_head_its_share_of_the_loss_and_of_the_gradient(aux_weight: float) -> None:
    # The lever issue 46 measures for MiniJoint: the two heads weighed unevenly in Step 1.
    labels = _labels()
    main, aux = _head_logits(labels), _head_logits(labels)
    losses = mlm_losses({MAIN_HEAD: main, AUX_HEAD: aux}, labels, aux_weight=aux_weight)
    torch.testing.assert_close(losses["loss"], (1 - aux_weight) * losses[f"loss_{MAIN_HEAD}"]
                               + aux_weight * losses[f"loss_{AUX_HEAD}"])
    losses["loss"].backward()
    for logits, share in ((main, 1 - aux_weight), (aux, aux_weight)):
        alone = logits.detach().clone().requires_grad_()
        mlm_losses({MAIN_HEAD: alone}, labels)["loss"].backward()
        torch.testing.assert_close(logits.grad, alone.grad * share)
    one_head = _head_logits(labels)  # with one head the weight has nothing to weigh
    assert torch.equal(mlm_losses({MAIN_HEAD: one_head}, labels, aux_weight=aux_weight)["loss"],
                       mlm_losses({MAIN_HEAD: one_head}, labels)["loss"])


def test_nothing_masked_gives_zero_loss_and_finite_gradients() -> None:
    labels = torch.full((2, 8), IGNORE_INDEX)
    logits = {MAIN_HEAD: _head_logits(labels), AUX_HEAD: _head_logits(labels)}  # (0, V) each
    losses = mlm_losses(logits, labels)
    for value in losses.values():
        assert value.item() == 0.0
    losses["loss"].backward()
    for head_logits in logits.values():
        assert head_logits.grad is not None and torch.isfinite(head_logits.grad).all()


def test_nothing_masked_through_the_model_gives_finite_parameter_gradients() -> None:
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=16, num_layers=2, num_heads=2, ffn_size=32, max_positions=8,
                      aux_head_layer=1)
    model = MaskedLM(cfg)
    ids = torch.randint(0, VOCAB, (2, 8))
    labels = torch.full((2, 8), IGNORE_INDEX)
    loss = mlm_losses(model(ids, masked_positions=labels != IGNORE_INDEX), labels)["loss"]
    assert loss.item() == 0.0
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_get_an_fp32_loss(dtype: torch.dtype) -> None:
    labels = _labels()
    logits = {MAIN_HEAD: _head_logits(labels, dtype), AUX_HEAD: _head_logits(labels, dtype)}
    losses = mlm_losses(logits, labels)
    targets = labels[labels != IGNORE_INDEX]
    for head, head_logits in logits.items():
        assert losses[f"loss_{head}"].dtype == torch.float32
        torch.testing.assert_close(losses[f"loss_{head}"], F.cross_entropy(head_logits.float(), targets))
    losses["loss"].backward()
    for head_logits in logits.values():
        assert head_logits.grad.dtype == dtype and torch.isfinite(head_logits.grad).all()

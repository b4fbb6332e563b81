"""Model surgery on tensors: building mini-models, freezing for a stage, taking and swapping embeddings (paper
section 2). No file is read or written here; ``model.surgery`` does that, and is the command.

* MiniJoint (section 2.2): the mini-model is the bottom N layers, the secondary head and the shared embeddings of
  the dual-head primary model (``extract_minijoint``); the whole primary under its top head alone is
  ``drop_aux_head``.
* MiniPost (section 2.2, Step 1b): the bottom N layers, the embeddings and the MLM head of a one-head primary with
  2 fresh layers between them; only the fresh layers train (``build_minipost``).
* Any model's bottom N layers under its top head, the same pretraining with less depth (``bottom_layers``).
* Step 2 trains only the token embeddings (tied with the output projection) and the per-token output bias over a
  frozen body (``freeze_for_adaptation``), starting from rows ``model.embedding_init`` builds (the paper's: the
  source rows of the pieces the two vocabularies share, footnote 1).
* Steps 3-4 swap embeddings in and out of a body (``swap_embeddings``).

Copies are built on the meta device and filled with cloned tensors (``load_state_dict(assign=True)``): no wasted
random init, the global RNG is not touched, and the copied weights are bit-identical to the source.
"""
from __future__ import annotations

import torch
from torch import nn

from ds_minimodel.config import ModelConfig
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import AUX_HEAD, MAIN_HEAD, EncoderLayer, MaskedLM
from ds_minimodel.systems import Depths

TOKENS_KEY = "embeddings.tokens.weight"
BIAS_KEY = f"heads.{MAIN_HEAD}.bias"
# What Step 2 may train beside the token rows and the output bias (``freeze_for_adaptation``'s options): the
# position table and the embedding LayerNorm. A plug carries them too.
POSITIONS_KEY = "embeddings.positions.weight"
NORM_KEYS = ("embeddings.norm.weight", "embeddings.norm.bias")
EXTRA_KEYS = (POSITIONS_KEY, *NORM_KEYS)


# ------------------------------------------------------------------------------------------------ building models

def _reference(model: nn.Module) -> torch.Tensor:
    """The tensor whose dtype and device a copy of ``model`` takes: the token embedding matrix."""
    return model.embeddings.tokens.weight


def _assemble(cfg: ModelConfig, state: dict[str, torch.Tensor], training: bool) -> MaskedLM:
    """A MaskedLM of shape ``cfg`` holding exactly the tensors in ``state`` (no random init runs)."""
    with torch.device("meta"):
        model = MaskedLM(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    return model.train(training)


def _cloned(model: nn.Module, prefix: str, rename: str | None = None) -> dict[str, torch.Tensor]:
    """Detached clones of ``model``'s state entries under ``prefix``, optionally re-rooted at ``rename``."""
    out = {}
    for name, tensor in model.state_dict().items():
        if name.startswith(prefix):
            new_name = name if rename is None else rename + name[len(prefix):]
            out[new_name] = tensor.detach().clone()
    return out


def _bottom(model: MaskedLM, n: int, head: str) -> dict[str, torch.Tensor]:
    """Clones of the embeddings, layers 0..n-1 and ``head`` (stored as the "main" head): what every cut-down model
    here starts from."""
    state = _cloned(model, "embeddings.")
    for i in range(n):
        state.update(_cloned(model, f"layers.{i}."))
    state.update(_cloned(model, f"heads.{head}.", rename=f"heads.{MAIN_HEAD}."))
    return state


def extract_minijoint(model: MaskedLM) -> MaskedLM:
    """MiniJoint's mini-model: the bottom N layers, the secondary head (as "main") and the shared embeddings.

    A new model with ``cfg.replace(num_layers=N, aux_head_layer=None)`` holding clones of the primary's tensors,
    so its logits equal the primary's aux-head logits exactly. The primary is not modified.
    """
    n = model.cfg.aux_head_layer
    if n is None or AUX_HEAD not in model.heads:
        raise InputError("model has no secondary (aux) MLM head: not a MiniJoint model (pretrain with "
                         "--variant minijoint), so there is no mini-model to extract")
    return _assemble(model.cfg.replace(num_layers=n, aux_head_layer=None), _bottom(model, n, AUX_HEAD), model.training)


def bottom_layers(model: MaskedLM, n: int) -> MaskedLM:
    """The embeddings, the bottom ``n`` layers and the top ("main") head, cloned, as a model of its own (a second
    head, if any, dropped): the same pretraining, less depth. ``n`` equal to the model's depth gives the whole model
    under its top head (``drop_aux_head``)."""
    total = model.cfg.num_layers
    if not isinstance(n, int) or not 1 <= n <= total:
        raise InputError(f"the layers to keep must be between 1 and the model's {total}, got {n!r}")
    return _assemble(model.cfg.replace(num_layers=n, aux_head_layer=None), _bottom(model, n, MAIN_HEAD),
                     model.training)


def drop_aux_head(model: MaskedLM) -> MaskedLM:
    """A dual-head primary without its second head: every layer, the embeddings and the top ("main") head, cloned,
    so its logits equal the primary's main-head logits exactly. Step 2 over it is the standard adaptation of a
    MiniJoint-pretrained model (all its layers, the top head), beside the one over its mini-model. A one-head model
    comes back as it is."""
    if model.cfg.aux_head_layer is None:
        return model
    state = {name: tensor for name, tensor in _cloned(model, "").items() if not name.startswith(f"heads.{AUX_HEAD}.")}
    return _assemble(model.cfg.replace(aux_head_layer=None), state, model.training)


def build_minipost(primary: MaskedLM, *, keep_layers: int = Depths.keep, new_layers: int = Depths.new,
                   seed: int = 0) -> MaskedLM:
    """MiniPost's mini-model before Step 1b: bottom ``keep_layers`` layers + ``new_layers`` fresh ones + MLM head.

    Embeddings, the kept layers and the "main" head are clones of the primary's (an aux head, if any, is dropped);
    the new layers sit between layer N and the head and get the model's own init (N(0, init_std) weights, zero
    biases, identity LayerNorms) drawn from a generator seeded with ``seed`` (the global RNG is left as it was).
    Everything but the new layers has requires_grad=False (paper: "train them ... while keeping the rest of the
    parameters frozen").
    """
    total = primary.cfg.num_layers
    if not isinstance(keep_layers, int) or not 1 <= keep_layers <= total:
        raise InputError(f"keep_layers must be between 1 and the primary's {total} layers, got {keep_layers!r}")
    if not isinstance(new_layers, int) or new_layers < 1:
        raise InputError(f"new_layers must be a positive integer (the layers Step 1b trains), got {new_layers!r}")
    cfg = primary.cfg.replace(num_layers=keep_layers + new_layers, aux_head_layer=None)
    state = _bottom(primary, keep_layers, MAIN_HEAD)

    ref = _reference(primary)
    with torch.device("meta"):
        init = MaskedLM(cfg)._init_weights  # the model's own init, bound to the new config (init_std)
    # Drawn on CPU in fp32 whatever the primary's device, so one seed gives the same layers on CPU and GPU.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for j in range(new_layers):
            layer = EncoderLayer(cfg)
            layer.apply(init)
            for name, tensor in layer.state_dict().items():
                state[f"layers.{keep_layers + j}.{name}"] = tensor.to(device=ref.device, dtype=ref.dtype)
    mini = _assemble(cfg, state, primary.training)
    for name, param in mini.named_parameters():
        index = _layer_index(name)
        param.requires_grad_(index is not None and index >= keep_layers)
    return mini


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "layers" else None


def copied_prefix_identical(mini: MaskedLM, primary: MaskedLM, n_layers: int, *, head: str | None = None) -> bool:
    """True when ``mini``'s embeddings and bottom ``n_layers`` layers (and, with ``head``, its "main" head vs the
    primary's ``head``) are bit-identical to ``primary``'s (torch.equal: same shape, dtype-compatible, same bits)."""
    ours, theirs = mini.state_dict(), primary.state_dict()
    pairs = [(k, k) for k in theirs if k.startswith("embeddings.")]
    pairs += [(k, k) for k in theirs if (i := _layer_index(k)) is not None and i < n_layers]
    if head is not None:
        pairs += [(f"heads.{MAIN_HEAD}." + k.split(".", 2)[2], k) for k in theirs if k.startswith(f"heads.{head}.")]
    return all(a in ours and ours[a].dtype == theirs[b].dtype and torch.equal(ours[a], theirs[b]) for a, b in pairs)


# ----------------------------------------------------------------------------------------------------- freezing

def freeze_for_adaptation(model: MaskedLM, *, train_positions: bool = False,
                          train_embedding_norm: bool = False) -> list[str]:
    """Step 2 (section 2.1): freeze the body; train the token embeddings (tied with the output projection of every
    head) and the main head's per-token bias. Optionally also the position table and the embedding LayerNorm.

    Everything else, an aux head included, gets requires_grad=False. Returns the trainable parameters' names.
    A Step-2 checkpoint holds every tensor trained here, and ``swap_checked``/``plug_embeddings`` carry all of them
    (``save_embeddings`` writes only the token matrix and the main bias).
    """
    trainable = {TOKENS_KEY, BIAS_KEY}
    if train_positions:
        trainable.add(POSITIONS_KEY)
    if train_embedding_norm:
        trainable.update(NORM_KEYS)
    names = []
    for name, param in model.named_parameters():
        param.requires_grad_(name in trainable)
        if name in trainable:
            names.append(name)
    return names


def freeze_for_finetuning(model: torch.nn.Module) -> None:
    """Step 3 (section 2.1): the token embeddings stay as Step 1 left them, so that Step 4 can swap a target
    language's in; the body and the task head train."""
    model.embeddings.tokens.weight.requires_grad_(False)


def freeze_for_head_training(model: MaskedLM) -> list[str]:
    """A pretrained encoder imported without an MLM head (``ds_minimodel.model.hf``): train the new head's dense layer,
    LayerNorm and output bias only. The body and the token embeddings (the head's tied projection) stay frozen, so
    the model stays exactly the pretrained encoder that MiniPost cuts from and that Step 2 aligns new embeddings to.
    Returns the trainable parameters' names."""
    names = []
    for name, param in model.named_parameters():
        param.requires_grad_(name.startswith(f"heads.{MAIN_HEAD}."))
        if param.requires_grad:
            names.append(name)
    return names


# --------------------------------------------------------------------------------------------- embedding swap

def extract_embeddings(model: MaskedLM) -> tuple[torch.Tensor, torch.Tensor]:
    """Detached copies of the model's token embeddings (V, h) and main head bias (V,)."""
    return model.embeddings.tokens.weight.detach().clone(), model.heads[MAIN_HEAD].bias.detach().clone()


def swap_embeddings(model: MaskedLM, embeddings: torch.Tensor, bias: torch.Tensor) -> MaskedLM:
    """Replace the token embeddings (and so every head's tied projection) and the output bias, IN PLACE.

    Returns ``model`` itself. The vocabulary size may change: the Parameters are replaced by new ones (copies of
    the given tensors in the model's dtype and device, keeping the old requires_grad flags) and ``model.cfg``
    gets the new vocab_size. An optimizer built before the swap still holds the old Parameters: swap first.

    Aux head (MiniJoint primary): its bias is set to the same ``bias``. Embeddings plugged into a MiniJoint primary
    were learned over its mini-model, whose "main" head IS the primary's aux head, so ``bias`` is exactly the aux
    head's own trained bias (the plugged primary's aux logits equal the mini-model's). For the main head it is the
    best prior available (a per-token frequency prior learned in L_trg); only the body is used downstream (Steps
    3-4), so neither head's bias affects the paper's results.
    """
    hidden = model.cfg.hidden_size
    if embeddings.dim() != 2 or embeddings.shape[1] != hidden:
        raise ValueError(f"embeddings of shape {tuple(embeddings.shape)} do not fit a model of hidden size {hidden}")
    if bias.shape != (embeddings.shape[0],):
        raise ValueError(f"bias of shape {tuple(bias.shape)} does not match embeddings {tuple(embeddings.shape)}")
    vocab = embeddings.shape[0]
    tokens = model.embeddings.tokens
    old = tokens.weight
    tokens.weight = nn.Parameter(embeddings.detach().to(device=old.device, dtype=old.dtype, copy=True),
                                 requires_grad=old.requires_grad)
    tokens.num_embeddings = vocab
    for head in getattr(model, "heads", {}).values():  # a task model (Steps 3-4) has no MLM head
        old_bias = head.bias
        head.bias = nn.Parameter(bias.detach().to(device=old_bias.device, dtype=old_bias.dtype, copy=True),
                                 requires_grad=old_bias.requires_grad)
    model.cfg = model.cfg.replace(vocab_size=vocab)
    return model

"""RoBERTa masked language model, with MiniJoint's optional second MLM head.

Plain ``nn.Module``s: no DeepSpeed, no ranks, no logging, no losses (STYLE habits 1 and 5). The architecture follows
fairseq/HF RoBERTa (post-LN blocks, GELU feed-forward, learned positions, tied output projection) so that weights map
one to one onto ``transformers.RobertaForMaskedLM`` (tested), except that positions count from 0 here: HF RoBERTa's
table has two extra leading rows (its position ids start at padding_idx + 1 = 2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ds_minimodel.config import ModelConfig

MAIN_HEAD = "main"
AUX_HEAD = "aux"
MASKED_ROWS_MULTIPLE = 64
"""The masked positions go through the vocabulary projection in a multiple of this many rows (zero rows added, their
logits dropped). Their count changes every update, and every new matrix shape costs a kernel plan: on a CPU with AMX,
oneDNN keeps one per shape with its own bf16 copy of the (V, h) projection, and glibc does not give the freed copies
back, so a rank training MiniLM grew by 50 MB an update until the kernel killed it. In multiples of 64 a run meets a
handful of shapes and its memory stays flat (BENCHMARKS.md, "Memory: the masked rows"); the head sees 31.5 more rows
on average, against about 600 masked in 32 x 128 tokens.
A model's ``masked_rows_multiple`` of 1 adds none (the FLOP check counts the paper's formula's compute)."""


class Embeddings(nn.Module):
    """Token + learned position embeddings, LayerNorm, dropout."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.positions = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.positions.num_embeddings:
            raise ValueError(f"sequence of {seq_len} tokens exceeds max_positions={self.positions.num_embeddings}")
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.tokens(input_ids) + self.positions(positions)  # (B, S, h)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    qkv_views = False
    """Q, K and V as views of the projection's output in its own (B, S, 3, heads, head_dim) layout rather than
    permuted head-first (``Body.qkv_views``, a training option): the same values, and in the backward their gradients
    are assembled in the projection's layout with one copy where the permuted layout takes two (the copies were 14% of
    a RoBERTa-base update on an H200, BENCHMARKS.md "Where an update's time goes")."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)  # one GEMM for Q, K and V
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_dropout = cfg.attention_dropout

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        batch, seq_len, hidden = x.shape
        qkv = self.qkv(x).view(batch, seq_len, 3, self.num_heads, hidden // self.num_heads)
        if self.qkv_views:  # three (B, S, heads, head_dim) views, each read as (B, heads, S, head_dim)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        else:  # (B, S, 3h) -> (3, B, heads, S, head_dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.attention_dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(batch, seq_len, hidden)  # (B, heads, S, d) -> (B, S, h)
        return self.out(y)


class EncoderLayer(nn.Module):
    """Post-LN transformer block as in BERT/RoBERTa: x = LN(x + Attn(x)); x = LN(x + FFN(x)).

    With ``cfg.pre_norm``: x = x + Attn(LN(x)); x = x + FFN(LN(x)) (same parameters, other order).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(cfg.hidden_size, cfg.ffn_size)
        self.ffn_out = nn.Linear(cfg.ffn_size, cfg.hidden_size)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.pre_norm = cfg.pre_norm

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.ffn_out(F.gelu(self.ffn_in(x))))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.dropout(self.attention(self.attention_norm(x), attn_mask))
            return x + self.ffn(self.ffn_norm(x))
        x = self.attention_norm(x + self.dropout(self.attention(x, attn_mask)))
        return self.ffn_norm(x + self.ffn(x))


class MLMHead(nn.Module):
    """dense -> GELU -> LayerNorm -> projection onto the vocabulary, with the weight tied to the token embeddings.

    The projection weight is not a parameter of the head: it is passed in (the token embedding matrix), so that both
    of MiniJoint's heads and the input share one matrix, and swapping embeddings swaps all three at once.
    Pre-LN models leave the residual stream unnormalised, so there each head starts with a LayerNorm of its own
    (``input_norm``): a head and the layers below it are then a complete model, as a mini-model must be.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.pre_norm:
            self.input_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # per-token output bias

    def forward(self, hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "input_norm"):
            hidden = self.input_norm(hidden)
        return F.linear(self.norm(F.gelu(self.dense(hidden))), embedding, self.bias)


class Body(nn.Module):
    """Embeddings + transformer layers: what every model here shares. Subclasses add heads.

    Parameter names (``embeddings.*``, ``layers.N.*``) are the same in every subclass, so a pretrained MLM's body
    loads into a task model by name.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.activation_checkpointing = False
        """Recompute each layer in the backward pass instead of keeping its activations (a training option)."""

    @property
    def qkv_views(self) -> bool:
        """Every layer's attention reads Q, K and V as views of its projection (``SelfAttention.qkv_views``)."""
        return all(layer.attention.qkv_views for layer in self.layers)

    @qkv_views.setter
    def qkv_views(self, on: bool) -> None:
        for layer in self.layers:
            layer.attention.qkv_views = on

    def _init_weights(self, module: nn.Module) -> None:
        # BERT/RoBERTa initialisation: N(0, 0.02) weights, zero biases, LayerNorm at identity.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.cfg.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def _init_all(self) -> None:
        """Every module's BERT/RoBERTa initialisation, then the position table's (``cfg.position_init``)."""
        self.apply(self._init_weights)
        if self.cfg.position_init == "sinusoidal":
            self._init_positions()

    def _init_positions(self) -> None:
        """Sinusoidal table: sin/cos of position x frequency, frequencies 1/10000^(2i/h), scaled to the standard
        deviation of a normal initialisation."""
        table = self.embeddings.positions.weight
        positions = torch.arange(table.shape[0], dtype=torch.float32)[:, None]  # (P, 1)
        frequencies = 10000.0 ** (-torch.arange(0, table.shape[1], 2, dtype=torch.float32) / table.shape[1])
        angles = positions * frequencies  # (P, h/2)
        encoding = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :table.shape[1]]  # (P, h)
        with torch.no_grad():
            table.copy_(encoding * (self.cfg.init_std / encoding.std()))

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Iterator[torch.Tensor]:
        """Yields each layer's output (B, S, h), bottom to top. attention_mask: (B, S) bool, True at real tokens."""
        # SDPA's boolean mask is True where attention is allowed: (B, 1, 1, S) broadcasts over heads and queries.
        # No mask at all when nothing is padded lets SDPA pick its fused (flash) kernel on GPU.
        attn_mask = None
        if attention_mask is not None and attention_mask.dtype != torch.bool:
            # A float 0/1 mask (HF style) would be ADDED to the attention scores by SDPA and mask nothing.
            raise TypeError(f"attention_mask must be bool (True at real tokens), got {attention_mask.dtype}")
        # (Under torch.compile the mask is always passed: reading it on the host would break the graph. Callers that
        # know on the host that nothing is padded pass None: the MLM steps do, ``data.streams.PADDED``.)
        if attention_mask is not None and (torch.compiler.is_compiling() or not bool(attention_mask.all())):
            attn_mask = attention_mask[:, None, None, :]
        x = self.embeddings(input_ids)
        if self.cfg.attention_bias == "alibi":
            attn_mask = self._alibi(input_ids.shape[1], attn_mask, x)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            # Non-reentrant checkpointing restores the RNG state for the recomputation, so dropout masks (and the
            # gradients) equal those of a normal pass; it also works when the layer's own weights are frozen.
            x = checkpoint(layer, x, attn_mask, use_reentrant=False) if recompute else layer(x, attn_mask)
            yield x

    def _alibi(self, seq_len: int, padding: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
        """Symmetric ALiBi as an additive SDPA mask in ``like``'s dtype and device: (1, H, S, S), or (B, H, S, S) with
        -inf at padded keys."""
        heads, device = self.cfg.num_heads, like.device
        slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float32, device=device) / heads)  # (H,)
        offsets = torch.arange(seq_len, dtype=torch.float32, device=device)
        distance = (offsets[None, :] - offsets[:, None]).abs()  # (S, S): |i - j|
        bias = -(slopes[:, None, None] * distance)[None]  # (1, H, S, S)
        if padding is not None:  # (B, 1, 1, S) bool, True where attention is allowed
            bias = bias.masked_fill(~padding, float("-inf"))
        return bias.to(like.dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class MaskedLM(Body):
    """RoBERTa MLM; with ``cfg.aux_head_layer = N`` also MiniJoint's second head on layer N's output.

    ``forward`` returns ``{head name: logits}``. Only the positions in ``masked_positions`` are projected onto the
    vocabulary (fairseq's ``masked_tokens``; the paper's FLOP formula A2 counts the head for a fraction p of tokens),
    so each logits tensor is (n_masked, V), computed in ``MASKED_ROWS_MULTIPLE`` buckets. Without
    ``masked_positions`` every position is projected: (B, S, V).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.heads = nn.ModuleDict({MAIN_HEAD: MLMHead(cfg)})
        if cfg.aux_head_layer is not None:
            self.heads[AUX_HEAD] = MLMHead(cfg)
        self.masked_rows_multiple = MASKED_ROWS_MULTIPLE
        self._init_all()

    def head_layers(self) -> dict[str, int]:
        """Which layer's output feeds each head (1-based)."""
        layers = {MAIN_HEAD: self.cfg.num_layers}
        if self.cfg.aux_head_layer is not None:
            layers[AUX_HEAD] = self.cfg.aux_head_layer
        return layers

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """input_ids (B, S); attention_mask (B, S) bool, True at real tokens; masked_positions (B, S) bool."""
        wanted: dict[int, list[str]] = {}  # layer -> the heads reading it (both, when N is the top layer)
        for name, layer in self.head_layers().items():
            wanted.setdefault(layer, []).append(name)
        logits = {}
        for depth, x in enumerate(self.hidden_states(input_ids, attention_mask), start=1):
            if depth in wanted:
                selected, rows = x, None
                if masked_positions is not None:
                    selected = x[masked_positions]  # (n_masked, h)
                    rows = selected.shape[0]  # no branch on it: torch.compile makes one graph of any count
                    extra = selected.new_zeros(-rows % self.masked_rows_multiple, x.shape[-1])
                    selected = torch.cat([selected, extra])
                for name in wanted[depth]:
                    out = self.heads[name](selected, self.embeddings.tokens.weight)
                    logits[name] = out if rows is None else out[:rows]
        return logits


@dataclass(frozen=True)
class HeadShape:
    """A task head's shape: what ``TaskModel`` builds for a kind of task (``tasks.formats.KINDS`` holds a kind under
    each name: its labels, features and scores; the model layer does not import the tasks layer)."""

    pooled: bool
    """One vector per input through RoBERTa's classification head (dense, tanh); else every position."""
    labelled: bool
    """One output per label; else start and end logits (extractive QA)."""

    def outputs(self, num_labels: int) -> int:
        return num_labels if self.labelled else 2


HEADS = {"sequence": HeadShape(pooled=True, labelled=True), "token": HeadShape(pooled=False, labelled=True),
         "span": HeadShape(pooled=False, labelled=False)}
TASK_KINDS = tuple(HEADS)
POOLINGS = ("cls", "mean")


class TaskModel(Body):
    """The body with a task head for Step 3 (finetuning) and Step 4 (zero-shot evaluation).

    - ``sequence``: RoBERTa's classification head (dropout, dense, tanh, dropout, projection) on one vector per
      input: the ``<s>`` position (``pooling="cls"``, RoBERTa) or the mean over the real tokens (``"mean"``):
      (B, num_labels) logits, for XNLI, PAWS-X and generic text (pair) classification.
    - ``token``: dropout + projection at every position: (B, S, num_labels), for POS tagging.
    - ``span``: start and end logits at every position: (B, S, 2), for extractive QA (SQuAD, MLQA, XQuAD).

    A pre-LN body ends in ``final_norm``, which finetuning starts from the MLM head's ``input_norm``.
    """

    def __init__(self, cfg: ModelConfig, kind: str, num_labels: int, pooling: str = "cls") -> None:
        super().__init__(cfg)
        if kind not in TASK_KINDS:
            raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; known: {', '.join(POOLINGS)}")
        self.kind, self.num_labels, self.pooling, self.head = kind, num_labels, pooling, HEADS[kind]
        if cfg.pre_norm:
            self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        if self.head.pooled:
            self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, self.head.outputs(num_labels))
        self._init_all()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        *_, x = self.hidden_states(input_ids, attention_mask)  # last layer's output (B, S, h)
        if self.cfg.pre_norm:
            x = self.final_norm(x)
        if self.head.pooled:
            if self.pooling == "mean" and attention_mask is not None:
                weights = attention_mask.to(x.dtype)[..., None]  # (B, S, 1): 1 at real tokens
                pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
            elif self.pooling == "mean":
                pooled = x.mean(1)
            else:
                pooled = x[:, 0]  # the <s> position
            x = torch.tanh(self.dense(self.dropout(pooled)))
        return self.out(self.dropout(x))

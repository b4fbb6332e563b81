"""Step 2's starting point: a target vocabulary's embedding rows and output bias, built from the source model's
(``run_adapt.py --init NAME``, ``"step2": {"init": NAME}`` in the pipeline).

| init       | a target piece that is also a source piece | any other piece                                        |
|------------|--------------------------------------------|--------------------------------------------------------|
| `overlap`  | its source row (the paper, footnote 1)     | drawn                                                  |
| `specials` | only the 5 special pieces: their rows      | drawn (the source-relearn control)                     |
| `focus`    | its source row                             | the sparsemax-weighted mixture of the shared pieces'   |
|            |                                            | source rows, weighted by similarity in static vectors  |
|            |                                            | trained on the target data (Dobler and de Melo, 2023); |
|            |                                            | drawn where the piece is too rare to have a vector     |
| `wechsel`  | only the 5 special pieces: their rows      | the softmax-weighted mixture (temperature 0.1) of the  |
|            |                                            | rows of its 10 nearest source pieces, by cosine of     |
|            |                                            | static vectors of both languages aligned by an         |
|            |                                            | orthogonal map fitted on a bilingual word list         |
|            |                                            | (Minixhofer et al., 2022); drawn where it has no vector|

"Drawn" is N(0, std), the paper's (``new_rows="normal"``), or per dimension N(mean, std) of the source rows
(``new_rows="source"``), which puts a new row at the scale the body has seen rather than far inside it. Every row
takes its output bias the way it takes its embedding (a copy, the same mixture, or zero).

``transliterate`` (``overlap`` and ``focus``) also copies the row of a source piece that a target piece spells in
Latin letters (``latin_spelling``: ICU-like romanisation by ``anyascii``): names, loanwords and product terms in a
script the source does not share ("▁Москва" -> "▁Moskva", "▁Łódź" -> "▁lodz" in an uncased vocabulary); a piece
whose romanisation has fewer than ``MIN_LATIN_LETTERS`` letters is left alone (a kana particle "の" would be "no").

``anchors`` (every initialiser but ``specials``, given a bilingual word list: ``--word-anchors``) also copies, for
a target piece still without a source row that is a listed word on its own, the row of the source piece its listed
translation is (``data.bilingual.piece_anchors``): a dictionary's words, not their spelling, and no static vectors
between. FOCUS then mixes the other rows from these too; WECHSEL's mixtures fill only the rows not copied.

Which rows were copied is returned as a mask: ``--freeze-copied`` keeps exactly those rows (and their biases)
unchanged while the others train (``anchor_copied_rows``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ds_minimodel.data.bilingual import unit_rows
from ds_minimodel.data.hf_tokenizer import WORD_START  # every tokenizer's pieces are spelled in SentencePiece's style
from ds_minimodel.data.tokenizer import NUM_SPECIAL, SPECIAL_PIECES
from ds_minimodel.systems import load_plugins

NEW_ROWS = ("normal", "source")
MIN_LATIN_LETTERS = 3


def latin_spelling(piece: str) -> str:
    """The piece romanised (``anyascii``), its word-start mark kept: what a source piece must be to anchor it."""
    try:
        from anyascii import anyascii
    except ImportError:
        raise ImportError("transliteration anchors need anyascii: pip install anyascii, or the package's [focus] "
                          "extra") from None
    start = piece.startswith(WORD_START)
    return (WORD_START if start else "") + anyascii(piece[1:] if start else piece)


@dataclass(frozen=True)
class AlignedVectors:
    """WECHSEL's inputs: static vectors of the target's and the source's pieces, both already in the common space
    (``data.bilingual.Alignment``: the target's mapped, both centred and unit-length)."""

    target: np.ndarray
    target_known: np.ndarray
    source: np.ndarray
    source_known: np.ndarray
    record: dict[str, Any]
    neighbours: int = 10
    temperature: float = 0.1


@dataclass
class InitialRows:
    embeddings: torch.Tensor
    """(Vt, h), in the source rows' dtype and device."""
    bias: torch.Tensor
    """(Vt,)"""
    copied: torch.Tensor
    """(Vt,) bool: rows that are a source row as is (the special pieces among them)."""
    stats: dict[str, Any] = field(default_factory=dict)
    """The paper's overlap figures: {"overlap", "target_vocab", "ratio", "special"}."""
    record: dict[str, Any] = field(default_factory=dict)
    """What built the rows, for the checkpoint: the initialiser, its options, counts and its inputs' hashes."""


def shared_source_ids(source_pieces: list[str], target_pieces: list[str], *, specials_only: bool = False,
                      shared_with: set[str] | None = None, transliterate: bool = False,
                      anchors: dict[int, int] | None = None) -> torch.Tensor:
    """For each target piece, the id of the same piece in the source vocabulary, or -1 (every id but the special
    ones' when ``specials_only``; every piece not in ``shared_with`` when that is given: the anchored relearn
    control copies only what a real target's vocabulary would). ``transliterate``: a piece with no such source piece
    takes the one its ``latin_spelling`` is (as it is, else lower-cased), where that has ``MIN_LATIN_LETTERS``
    letters or more. ``anchors`` (target id -> source id): a piece still with none takes its anchor's. Both
    vocabularies must start with the special pieces, and the source's pieces must be distinct."""
    expected = [SPECIAL_PIECES[i] for i in range(NUM_SPECIAL)]
    for which, pieces in (("source", source_pieces), ("target", target_pieces)):
        if list(pieces[:NUM_SPECIAL]) != expected:
            raise ValueError(f"{which} vocabulary starts with {list(pieces[:NUM_SPECIAL])}, not the special pieces "
                             f"{expected}: embeddings cannot be swapped between tokenizers that disagree on them")
    source_index = {piece: i for i, piece in enumerate(source_pieces)}
    if len(source_index) != len(source_pieces):
        raise ValueError("source vocabulary has duplicate pieces: the source row of a shared piece is ambiguous")
    def copies(i: int, piece: str) -> bool:
        return i < NUM_SPECIAL or not specials_only and (shared_with is None or piece in shared_with)

    if anchors and not all(NUM_SPECIAL <= t < len(target_pieces) and NUM_SPECIAL <= s < len(source_pieces)
                           for t, s in anchors.items()):
        raise ValueError("anchors pair a target piece with a source piece: ids beyond the special pieces and within "
                         "both vocabularies")

    def spelled(piece: str) -> int:
        if piece in source_index or not transliterate:
            return source_index.get(piece, -1)
        latin = latin_spelling(piece)
        if latin == piece or sum(c.isalpha() for c in latin) < MIN_LATIN_LETTERS:
            return -1
        return source_index.get(latin, source_index.get(latin.lower(), -1))

    def source_id(i: int, piece: str) -> int:  # (anchors hold no special piece: checked above)
        found = spelled(piece) if copies(i, piece) else -1
        return anchors.get(i, -1) if found < 0 and anchors else found

    return torch.tensor([source_id(i, piece) for i, piece in enumerate(target_pieces)], dtype=torch.long)


def draw_rows(count: int, source_embeddings: torch.Tensor, *, std: float, generator: torch.Generator,
              new_rows: str = "normal") -> torch.Tensor:
    """``count`` fresh rows, drawn in fp32 on the generator's device (the same generator state gives the same rows
    on CPU and GPU): N(0, std), or N(mean, std) of the source's non-special rows per dimension."""
    if new_rows not in NEW_ROWS:
        raise ValueError(f"new_rows {new_rows!r}: one of {', '.join(NEW_ROWS)}")
    fresh = torch.empty(count, source_embeddings.shape[1], device=generator.device)
    if new_rows == "normal":
        return fresh.normal_(0.0, std, generator=generator)
    rows = source_embeddings.detach()[NUM_SPECIAL:].float().to(generator.device)
    return fresh.normal_(0.0, 1.0, generator=generator) * rows.std(0) + rows.mean(0)


def overlap_init(source_pieces: list[str], source_embeddings: torch.Tensor, source_bias: torch.Tensor,
                 target_pieces: list[str], *, std: float = 0.02, generator: torch.Generator,
                 specials_only: bool = False, new_rows: str = "normal", shared_with: set[str] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Initial target embeddings and output bias (paper footnote 1, after Pfeiffer et al. 2021).

    A target piece whose string is also a source piece starts from that source row (embedding and bias); every
    other piece gets a drawn embedding (``draw_rows``) and a zero bias. The special pieces (ids 0-4, identical in
    every tokenizer) are shared by construction. Returns (embeddings (Vt, h), bias (Vt,), stats) in the source
    tensors' dtype and device; stats = {"overlap": shared pieces (specials included), "target_vocab": Vt,
    "ratio": overlap / Vt, "special": 5}. One dict lookup per piece then two index copies: milliseconds at 50k.

    ``specials_only`` copies the special pieces alone and draws every other row: the "source relearn" control,
    which relearns the source language's own embeddings from scratch to measure what Step 2 loses without any
    language gap (issue 16).
    """
    src_ids = source_ids_checked(source_pieces, source_embeddings, source_bias, target_pieces,
                                 specials_only=specials_only, shared_with=shared_with)
    return copy_or_draw(src_ids, source_embeddings, source_bias, std=std, generator=generator, new_rows=new_rows)


def source_ids_checked(source_pieces: list[str], source_embeddings: torch.Tensor, source_bias: torch.Tensor,
                       target_pieces: list[str], **options: Any) -> torch.Tensor:
    """``shared_source_ids``, after checking that the source pieces, rows and biases agree in number."""
    vs = source_embeddings.shape[0]
    if len(source_pieces) != vs or source_bias.shape != (vs,):
        raise ValueError(f"source vocabulary of {len(source_pieces)} pieces, embeddings "
                         f"{tuple(source_embeddings.shape)} and bias {tuple(source_bias.shape)} disagree")
    return shared_source_ids(source_pieces, target_pieces, **options)


def copy_or_draw(src_ids: torch.Tensor, source_embeddings: torch.Tensor, source_bias: torch.Tensor, *, std: float,
                 generator: torch.Generator, new_rows: str) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """``overlap_init``'s rows given each target piece's source id (``source_ids_checked``)."""
    hidden = source_embeddings.shape[1]
    shared = src_ids >= 0
    tgt_shared = shared.nonzero().squeeze(1)
    tgt_new = (~shared).nonzero().squeeze(1)
    vt = len(src_ids)

    device, dtype = source_embeddings.device, source_embeddings.dtype
    embeddings = torch.empty(vt, hidden, dtype=dtype, device=device)
    fresh = draw_rows(len(tgt_new), source_embeddings, std=std, generator=generator, new_rows=new_rows)
    embeddings.index_copy_(0, tgt_new.to(device), fresh.to(device=device, dtype=dtype))
    embeddings.index_copy_(0, tgt_shared.to(device),
                           source_embeddings.detach().index_select(0, src_ids[shared].to(device)))
    # Bias of a new piece: 0. The source bias of a shared piece carries that piece's frequency prior (the MLM
    # head learns roughly log p(piece) there); a piece the source never had has no prior to carry, and zero is
    # what HF/fairseq initialise every output bias to.
    bias = torch.zeros(vt, dtype=source_bias.dtype, device=source_bias.device)
    bias.index_copy_(0, tgt_shared.to(bias.device),
                     source_bias.detach().index_select(0, src_ids[shared].to(source_bias.device)))
    overlap = int(shared.sum())
    stats = {"overlap": overlap, "target_vocab": vt, "ratio": overlap / vt if vt else 0.0, "special": NUM_SPECIAL}
    return embeddings, bias, stats


def sparsemax(scores: np.ndarray) -> np.ndarray:
    """Sparsemax of each row (Martins and Astudillo, 2016): the Euclidean projection onto the probability simplex,
    so a row's weights are non-negative, sum to 1, and are exactly 0 below a threshold."""
    z = np.asarray(scores, dtype=np.float64)
    ordered = -np.sort(-z, axis=-1)
    ks = np.arange(1, z.shape[-1] + 1)
    cumulative = np.cumsum(ordered, axis=-1)
    support = 1 + ks * ordered > cumulative
    k = support.sum(axis=-1, keepdims=True)
    tau = (np.take_along_axis(cumulative, k - 1, axis=-1) - 1) / k
    return np.maximum(z - tau, 0.0)


def focus_weights(vectors: np.ndarray, known: np.ndarray, src_ids: torch.Tensor
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FOCUS's mixture weights: (targets, candidates, weights (len(targets), len(candidates))). Targets are the new
    pieces (no source row) with a static vector; candidates the shared pieces with one (special pieces excluded:
    they never occur in text); each row is the sparsemax of the target's cosine similarity to every candidate."""
    ids = src_ids.numpy()
    is_special = np.arange(len(ids)) < NUM_SPECIAL
    targets = np.flatnonzero((ids < 0) & known)
    candidates = np.flatnonzero((ids >= 0) & known & ~is_special)
    if not len(targets) or not len(candidates):
        return targets, candidates, np.zeros((len(targets), len(candidates)))
    unit = unit_rows(vectors)
    weights = np.concatenate([sparsemax(unit[chunk] @ unit[candidates].T)
                              for chunk in np.array_split(targets, max(1, len(targets) // 1024))])
    return targets, candidates, weights


def wechsel_weights(aligned: AlignedVectors, candidates: np.ndarray, copied: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """WECHSEL's mixtures: (targets, neighbours (len(targets), k) source ids, weights (len(targets), k)). Targets
    are the non-special target pieces with a static vector (and not ``copied``, a mask: word anchors); each row's
    weights are the softmax, at the aligned vectors' temperature, of its cosine to its k most similar ``candidates``
    (source ids) in the common space."""
    skip = np.arange(len(aligned.target)) < NUM_SPECIAL
    if copied is not None:
        skip |= copied
    targets = np.flatnonzero(aligned.target_known & ~skip)
    k = min(aligned.neighbours, len(candidates))
    if not len(targets) or not k:
        return targets, np.zeros((len(targets), 0), dtype=np.int64), np.zeros((len(targets), 0))
    mapped = unit_rows(aligned.target[targets].astype(np.float64))
    pool = unit_rows(aligned.source[candidates].astype(np.float64))
    neighbours, weights = [], []
    for chunk in np.array_split(np.arange(len(targets)), max(1, len(targets) // 1024)):
        cosine = mapped[chunk] @ pool.T
        top = np.argpartition(-cosine, k - 1, axis=1)[:, :k]
        scores = np.take_along_axis(cosine, top, axis=1) / aligned.temperature
        scores = np.exp(scores - scores.max(1, keepdims=True))
        neighbours.append(candidates[top])
        weights.append(scores / scores.sum(1, keepdims=True))
    return targets, np.concatenate(neighbours), np.concatenate(weights)


def mix_rows(embeddings: torch.Tensor, bias: torch.Tensor, at: np.ndarray, sources: np.ndarray, weights: np.ndarray,
             source_embeddings: torch.Tensor, source_bias: torch.Tensor) -> None:
    """Row ``at[i]`` of ``embeddings`` (and of ``bias``) becomes ``sum_j weights[i, j] * source row sources[i, j]``,
    computed in fp64."""
    if not len(at) or not sources.size:
        return
    w = torch.from_numpy(weights).to(torch.float64)[:, :, None]
    ids = torch.from_numpy(sources)
    emb = (w * source_embeddings.detach().double().cpu()[ids]).sum(1)
    b = (w[:, :, 0] * source_bias.detach().double().cpu()[ids]).sum(1)
    index = torch.from_numpy(at)
    embeddings[index.to(embeddings.device)] = emb.to(embeddings.device, embeddings.dtype)
    bias[index.to(bias.device)] = b.to(bias.device, bias.dtype)


@dataclass
class RowInputs:
    """What an initialiser's ``mix`` reads and writes: the rows being built (copied and drawn already), which source
    row each target piece copied (-1: none), both vocabularies and the source rows, and the inputs the entry
    ``needs`` (None where it needs none)."""

    embeddings: torch.Tensor
    bias: torch.Tensor
    src_ids: torch.Tensor
    source_pieces: list[str]
    target_pieces: list[str]
    source_embeddings: torch.Tensor
    source_bias: torch.Tensor
    shared_with: set[str] | None
    static: tuple[np.ndarray, np.ndarray, dict[str, Any]] | None
    aligned: AlignedVectors | None


STATIC_VECTORS, WORD_LIST = "static_vectors", "word_list"
"""What an initialiser can need beyond the two vocabularies and the source rows: the target text's static vectors
(``data.static_vectors``; ``rare_vectors`` applies), or a bilingual word list with the source text (both languages'
static vectors aligned by it: ``data.bilingual``)."""


@dataclass(frozen=True)
class Initialiser:
    """One way to build Step 2's starting rows (the module's table): what it copies, what it needs, how it builds
    the rest (``mix``, after the copies and draws), registered by name with ``register``."""

    name: str
    copies: str
    """``shared``: the row of every piece both vocabularies hold; ``specials``: the 5 special pieces' only."""
    needs: frozenset[str] = frozenset()
    """``STATIC_VECTORS`` and/or ``WORD_LIST``: the inputs Step 2 prepares for it (and checks before any work)."""
    mix: Callable[[RowInputs], dict[str, Any]] | None = None
    """Builds rows over the copies and draws in ``RowInputs.embeddings``/``bias``; returns what ``run.json``
    records of it (``mixed``: how many rows it built, at least)."""
    pipeline: bool = True
    """Offered as the pipeline's ``step2.init`` (``specials`` is the source-relearn control's alone)."""

    @property
    def transliterates(self) -> bool:
        """``transliterate`` extends copied rows: only an initialiser that copies shared pieces has them."""
        return self.copies == "shared"

    @property
    def takes_word_anchors(self) -> bool:
        """Word anchors: copied rows from a word list, for an initialiser that copies shared pieces or reads a list
        (not the source-relearn control's ``specials``)."""
        return self.transliterates or WORD_LIST in self.needs

    @property
    def unused_options(self) -> tuple[str, ...]:
        """Step 2's options it does not take (the pipeline passes them only to an initialiser that does)."""
        return (("transliterate",) * (not self.transliterates) + ("word_anchors",) * (not self.takes_word_anchors)
                + ("rare_vectors", "static_vectors") * (STATIC_VECTORS not in self.needs)
                + ("source_static_vectors",) * (not {STATIC_VECTORS, WORD_LIST} <= self.needs))


INITIALISERS: dict[str, Initialiser] = {}


def register(entry: Initialiser) -> Initialiser:
    if entry.copies not in ("shared", "specials") or not entry.needs <= {STATIC_VECTORS, WORD_LIST}:
        raise ValueError(f"initialiser {entry.name!r}: copies shared or specials, needs {STATIC_VECTORS} and/or "
                         f"{WORD_LIST}")
    INITIALISERS[entry.name] = entry
    return entry


def get_initialiser(name: str) -> Initialiser:
    load_plugins()  # a plugin module (DS_MINIMODEL_PLUGINS) may register initialisers as well as systems
    if name not in INITIALISERS:
        raise ValueError(f"init {name!r}: one of {', '.join(INITIALISERS)}")
    return INITIALISERS[name]


def _focus_rows(inp: RowInputs) -> dict[str, Any]:
    if inp.static is None:
        raise ValueError("init 'focus' needs the target data's static vectors")
    vectors, known, static_record = inp.static
    if len(vectors) != len(inp.target_pieces):
        raise ValueError(f"static vectors for {len(vectors)} pieces, the target vocabulary has "
                         f"{len(inp.target_pieces)}")
    targets, candidates, weights = focus_weights(vectors, known, inp.src_ids)
    embeddings, bias = inp.embeddings, inp.bias
    if len(targets) and len(candidates):
        mix = torch.from_numpy(weights).to(torch.float64)
        rows = inp.src_ids[torch.from_numpy(candidates)]
        emb = mix @ inp.source_embeddings.detach().double().cpu().index_select(0, rows)
        b = mix @ inp.source_bias.detach().double().cpu().index_select(0, rows)
        at = torch.from_numpy(targets)
        embeddings[at.to(embeddings.device)] = emb.to(device=embeddings.device, dtype=embeddings.dtype)
        bias[at.to(bias.device)] = b.to(device=bias.device, dtype=bias.dtype)
    nonzero = (weights > 0).sum(1) if len(targets) else np.zeros(0)
    return {"mixed": len(targets) if len(candidates) else 0, "candidates": len(candidates),
            "sources_per_row": float(nonzero.mean()) if len(nonzero) else 0.0, "static_vectors": static_record}


def _wechsel_rows(inp: RowInputs) -> dict[str, Any]:
    aligned = inp.aligned
    if aligned is None:
        raise ValueError("init 'wechsel' needs both languages' static vectors and their alignment")
    if len(aligned.target) != len(inp.target_pieces) or len(aligned.source) != len(inp.source_pieces):
        raise ValueError(f"static vectors for {len(aligned.target)} target and {len(aligned.source)} source "
                         f"pieces; the vocabularies have {len(inp.target_pieces)} and {len(inp.source_pieces)}")
    usable = aligned.source_known & (np.arange(len(inp.source_pieces)) >= NUM_SPECIAL)
    if inp.shared_with is not None:
        usable &= np.array([piece in inp.shared_with for piece in inp.source_pieces])
    targets, neighbours, weights = wechsel_weights(aligned, np.flatnonzero(usable), inp.src_ids.numpy() >= 0)
    mix_rows(inp.embeddings, inp.bias, targets, neighbours, weights, inp.source_embeddings, inp.source_bias)
    return {"mixed": len(targets) if neighbours.size else 0, "candidates": int(usable.sum()),
            "sources_per_row": int(neighbours.shape[1]), "temperature": aligned.temperature,
            "alignment": aligned.record}


register(Initialiser("overlap", copies="shared"))
register(Initialiser("specials", copies="specials", pipeline=False))
register(Initialiser("focus", copies="shared", needs=frozenset({STATIC_VECTORS}), mix=_focus_rows))
register(Initialiser("wechsel", copies="specials", needs=frozenset({STATIC_VECTORS, WORD_LIST}), mix=_wechsel_rows))


def initialisers_that(*, need: str | None = None, transliterate: bool = False, word_anchors: bool = False
                      ) -> tuple[str, ...]:
    """The registered names that need ``need`` / that ``transliterate`` / ``word_anchors`` extend (for messages and
    checks)."""
    load_plugins()
    return tuple(name for name, entry in INITIALISERS.items()
                 if (need is None or need in entry.needs) and (not transliterate or entry.transliterates)
                 and (not word_anchors or entry.takes_word_anchors))


def initial_rows(init: str, source_pieces: list[str], source_embeddings: torch.Tensor, source_bias: torch.Tensor,
                 target_pieces: list[str], *, std: float, generator: torch.Generator, new_rows: str = "normal",
                 static: tuple[np.ndarray, np.ndarray, dict[str, Any]] | None = None,
                 aligned: AlignedVectors | None = None, shared_with: set[str] | None = None,
                 transliterate: bool = False, anchors: dict[int, int] | None = None) -> InitialRows:
    """The rows ``init`` builds (see the module's table). ``static`` = (vectors, known, record) from
    ``data.static_vectors.train_static_vectors`` on the target data, for ``focus``; ``aligned`` both languages'
    vectors and their map, for ``wechsel``. ``shared_with``: copy (and mix from) only the pieces of this vocabulary
    too (``shared_source_ids``; ``transliterate`` and ``anchors`` there as well). Every initialiser draws its new
    rows from ``generator`` first, in the same order, so the rows no mixture replaces equal ``overlap``'s."""
    entry = get_initialiser(init)
    if transliterate and not entry.transliterates:
        raise ValueError(f"transliterate extends the copied rows of {', '.join(initialisers_that(transliterate=True))}"
                         f"; {init} copies only the special pieces")
    if anchors is not None and not entry.takes_word_anchors:
        raise ValueError(f"word anchors are for init {', '.join(initialisers_that(word_anchors=True))}, not {init}")
    src_ids = source_ids_checked(source_pieces, source_embeddings, source_bias, target_pieces,
                                 specials_only=entry.copies == "specials", shared_with=shared_with,
                                 transliterate=transliterate, anchors=anchors)
    embeddings, bias, stats = copy_or_draw(src_ids, source_embeddings, source_bias, std=std, generator=generator,
                                           new_rows=new_rows)
    copied = src_ids >= 0
    record: dict[str, Any] = {"init": init, "new_rows": new_rows, "copied": int(copied.sum())}
    if transliterate or anchors is not None:  # what each extension added, in the order applied: spelling first
        spelled = int((source_ids_checked(source_pieces, source_embeddings, source_bias, target_pieces,
                                          specials_only=entry.copies == "specials", shared_with=shared_with,
                                          transliterate=transliterate) >= 0).sum())
        if transliterate:
            exact = source_ids_checked(source_pieces, source_embeddings, source_bias, target_pieces,
                                       shared_with=shared_with)
            record["transliterated"] = spelled - int((exact >= 0).sum())
        if anchors is not None:
            record["word_anchored"] = int(copied.sum()) - spelled
    if entry.mix is not None:
        record.update(entry.mix(RowInputs(embeddings, bias, src_ids, source_pieces, target_pieces, source_embeddings,
                                          source_bias, shared_with, static, aligned)))
    record["drawn"] = len(target_pieces) - record["copied"] - record.get("mixed", 0)
    return InitialRows(embeddings, bias, copied, stats, record)


def anchor_copied_rows(model: nn.Module, copied: torch.Tensor) -> list[Any]:
    """Keep the copied rows of the token embeddings (and so of the tied output projection) and their output biases
    where they start: their gradient is zeroed before it reaches the optimizer. With no weight decay on them (the
    caller's part: ``adapt`` sets it to 0 with ``--freeze-copied``) Adam's update of a row whose gradient was always
    zero is exactly zero, so the rows stay bit-identical. Returns the hook handles."""
    handles = []
    params = [model.embeddings.tokens.weight, *(head.bias for head in model.heads.values())]
    for param in (p for p in params if p.requires_grad):
        # A mask, not a product: DeepSpeed moves and casts the model after this (bf16, a GPU), and the gradient
        # must keep its dtype and device.
        rows = copied[:, None] if param.dim() == 2 else copied
        handles.append(param.register_hook(lambda grad, rows=rows: grad.masked_fill(rows.to(grad.device), 0)))
    return handles

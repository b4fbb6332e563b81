"""Extractive QA (MLQA, XQuAD, SQuAD): answer-span mapping onto SentencePiece tokens, and the official metrics.

Marchisio et al. (2023), Sec. 3 and A.2, finetune on SQuAD v1.1 and report F1 / exact match on MLQA and XQuAD.
The metrics reimplement the rules of MLQA's official `mlqa_evaluation_v1.py` (Lewis et al., 2020), which extends
SQuAD v1.1's `evaluate-v1.1.py` with per-language article lists and character-level Chinese tokens; XQuAD is
scored with SQuAD v1.1's rules (`SQUAD_V1`), as XTREME does, since MLQA's script knows only MLQA's 7 languages.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ds_minimodel.data.hf_tokenizer import HFTokenizer
from ds_minimodel.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, AnyTokenizer
from ds_minimodel.errors import InputError
from ds_minimodel.tasks.readers import QAExample

# --- metrics -------------------------------------------------------------------------------------------------------

SQUAD_V1 = "squad"
"""`lang` value selecting SQuAD v1.1's rules: ASCII punctuation, English articles, whitespace tokens."""

_SQUAD_PUNCT = frozenset(string.punctuation)


def _is_mlqa_punct(char: str) -> bool:
    """MLQA's punctuation: a code point of a Unicode "P*" category (Pc Pd Pe Pf Pi Po Ps) or ASCII
    `string.punctuation`, which adds the symbols $ + < = > ^ ` | ~ (categories Sc/Sm/Sk); symbols outside ASCII (the
    euro sign, the degree sign) are kept. MLQA builds the set of all such code points; testing each character instead
    spares every process that imports the stages (each rank of each launch) the 0.3-0.6 s of CPU that set took."""
    return char in _SQUAD_PUNCT or unicodedata.category(char).startswith("P")


# Articles removed per answer language, as whole words (`\b` is Unicode-aware on str patterns) replaced by a space.
# Hindi and Chinese have none. Vietnamese's list is MLQA's (classifiers, the possessive "của" and the copula "là").
_ARTICLES: dict[str, re.Pattern[str] | None] = {
    "en": re.compile(r"\b(a|an|the)\b"),
    "es": re.compile(r"\b(un|una|unos|unas|el|la|los|las)\b"),
    "de": re.compile(r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b"),
    "vi": re.compile(r"\b(của|là|cái|chiếc|những)\b"),
    # Arabic: MLQA's pattern is `\sال^|ال`. Its first branch can never match (`^` after a consumed character), so
    # the effect is that EVERY occurrence of the two letters alif-lam is replaced by a space, anywhere in a word:
    # "الكتاب" -> " كتاب" (the article, as intended) but also "مال" -> "م " (lam-alif inside the word "money").
    # We reproduce that literally, because published MLQA Arabic scores were computed with it.
    "ar": re.compile("\u0627\u0644"),
    "hi": None,
    "zh": None,
}
# MLQA tokenises all its languages on whitespace except Chinese, which uses "mixed segmentation".
_MIXED_SEGMENTATION = frozenset({"zh"})
MLQA_LANGUAGES: tuple[str, ...] = tuple(_ARTICLES)
# MLQA's CJK test is the range U+4E00..U+9FA5 (the original CJK Unified Ideographs block of Unicode 1.1), not the
# whole block up to U+9FFF nor the extensions; we keep its range so that scores match.
_MLQA_CJK = re.compile("[\u4e00-\u9fa5]")


def _mixed_segmentation(text: str) -> list[str]:
    """MLQA's Chinese tokens: each CJK character (or punctuation mark) is a token of its own; the runs of other
    characters between them are split on whitespace. Punctuation is already gone when MLQA calls this."""
    tokens: list[str] = []
    run: list[str] = []
    for char in text:
        if _MLQA_CJK.match(char) or _is_mlqa_punct(char):
            tokens.extend("".join(run).split())
            run = []
            tokens.append(char)
        else:
            run.append(char)
    tokens.extend("".join(run).split())
    return tokens


def _check_language(lang: str) -> None:
    if lang != SQUAD_V1 and lang not in _ARTICLES:
        raise InputError(
            f"no MLQA answer normalisation for language {lang!r}; MLQA's rules cover {', '.join(MLQA_LANGUAGES)} "
            f"(use {SQUAD_V1!r} for SQuAD v1.1's rules, as for XQuAD)")


def normalize_answer(text: str, lang: str) -> str:
    """An answer as MLQA's script compares it (SQuAD's order: lower-case, strip punctuation, drop articles, then
    re-join the tokens with single spaces). `lang` is the answer (context) language, or `SQUAD_V1`."""
    _check_language(lang)
    text = text.lower()  # str.lower: Unicode-aware, like Python 3's in MLQA's script (so "Ä" -> "ä")
    if lang == SQUAD_V1:
        text = "".join(char for char in text if char not in _SQUAD_PUNCT)
    else:
        text = "".join(char for char in text if not _is_mlqa_punct(char))
    articles = _ARTICLES["en"] if lang == SQUAD_V1 else _ARTICLES[lang]
    if articles is not None:
        text = articles.sub(" ", text)
    tokens = _mixed_segmentation(text) if lang in _MIXED_SEGMENTATION else text.split()
    return " ".join(tokens)


def f1_score(prediction: str, ground_truth: str, lang: str) -> float:
    """Bag-of-tokens F1 between the normalised answers, in [0, 1] (0 when they share no token)."""
    predicted = normalize_answer(prediction, lang).split()
    gold = normalize_answer(ground_truth, lang).split()
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision = same / len(predicted)
    recall = same / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, ground_truth: str, lang: str) -> float:
    """1.0 when the normalised answers are identical, else 0.0."""
    return float(normalize_answer(prediction, lang) == normalize_answer(ground_truth, lang))


def max_over_ground_truths(metric: Callable[[str, str, str], float], prediction: str,
                           ground_truths: Iterable[str], lang: str) -> float:
    """The best score of `prediction` against any of the reference answers (dev/test questions have up to 3)."""
    return max(metric(prediction, truth, lang) for truth in ground_truths)


def evaluate_qa(predictions: Mapping[str, str], examples: Sequence[QAExample], lang: str) -> dict[str, float]:
    """{"f1", "exact_match"} in percent over all `examples`; a question without a prediction scores 0, as in the
    official scripts (they warn; the caller can compare `len(predictions)` with `len(examples)`)."""
    _check_language(lang)
    if not examples:
        raise InputError("no QA examples to evaluate")
    f1 = em = 0.0
    for example in examples:
        if example.id not in predictions:
            continue
        f1 += max_over_ground_truths(f1_score, predictions[example.id], example.answers, lang)
        em += max_over_ground_truths(exact_match, predictions[example.id], example.answers, lang)
    return {"f1": 100.0 * f1 / len(examples), "exact_match": 100.0 * em / len(examples)}


# --- span mapping --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QAWindow:
    """One model input for a question: the question and a window of its context, RoBERTa's pair layout
    `<s> question </s></s> context-window </s>`, padded to `max_len`."""

    example_id: str
    input_ids: list[int]
    attention_mask: list[int]
    start_position: int
    """Index in `input_ids` of the answer's first token, or 0 (`<s>`) when the answer is not in this window."""
    end_position: int
    """Index of the answer's last token (inclusive), or 0."""
    offsets: list[tuple[int, int] | None]
    """Per position: the [begin, end) character span of the context covered by a context token, None elsewhere."""
    context: str


def _piece_offsets(tokenizer: AnyTokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids and the [begin, end) span of `text` each piece came from, in characters (Python str indices).

    SentencePiece reports spans in UTF-8 bytes of the *original* input (before its NFKC normalisation). Recent
    sentencepiece releases (0.2.3 is tested) convert them to characters with `out_type="offset_mapping"`; 0.2.0
    only offers the byte spans (`immutable_proto`, since removed), which we convert ourselves.
    """
    if isinstance(tokenizer, HFTokenizer):  # a Hugging Face tokenizer reports character spans itself
        return tokenizer.encode_with_offsets(text)
    processor = tokenizer._sp  # the Tokenizer wrapper does not expose offsets
    if hasattr(processor, "EncodeAsOffsetMapping"):
        # For str input the spans are in characters (`return_bytes` defaults to the input's type).
        mapping = processor.encode(text, out_type="offset_mapping")
        return list(mapping["ids"]), [tuple(span) for span in mapping["offsets"]]
    proto = processor.encode(text, out_type="immutable_proto")
    ids = [piece.id for piece in proto.pieces]
    return ids, _bytes_to_chars(text, [(piece.begin, piece.end) for piece in proto.pieces])


def _bytes_to_chars(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte spans of `text`'s UTF-8 encoding -> character spans."""
    char_at = np.zeros(len(text.encode("utf-8")) + 1, dtype=np.int64)
    position = 0
    for index, char in enumerate(text):
        width = len(char.encode("utf-8"))
        char_at[position:position + width] = index
        position += width
    char_at[position] = len(text)
    return [(int(char_at[begin]), int(char_at[end])) for begin, end in spans]


def context_token_offsets(tokenizer: AnyTokenizer, context: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Context ids and, per piece, the character span it stands for with the surrounding whitespace trimmed.

    A piece's raw span includes the whitespace that its "▁" replaced ("▁naïve" in "café  naïve" covers
    "  naïve"); trimming makes `context[begin:end]` the visible text. A piece with no visible text (a lone "▁",
    or the first half of an NFKC expansion such as "ﬁ" -> "f", "i") gets the empty span at the end of its raw span,
    so an answer starting on it still begins where the next piece does."""
    ids, spans = _piece_offsets(tokenizer, context)
    trimmed = []
    for begin, end in spans:
        while begin < end and context[begin].isspace():
            begin += 1
        while end > begin and context[end - 1].isspace():
            end -= 1
        trimmed.append((begin, end) if begin < end else (end, end))
    return ids, trimmed


def _answer_tokens(spans: Sequence[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int] | None:
    """First and last context token whose spans overlap the answer's [start_char, end_char), or None."""
    inside = [i for i, (begin, end) in enumerate(spans) if begin < end and begin < end_char and end > start_char]
    return (inside[0], inside[-1]) if inside else None


MAX_QUERY_LEN = 64
"""Questions are cut to this many tokens (HF ``run_qa.py``'s ``max_query_length``)."""
FRAME = 4
"""Tokens of a window that are neither question nor context: ``<s>``, ``</s></s>`` between them, the final ``</s>``."""


def window_room(max_len: int, doc_stride: int, *, max_query_len: int = MAX_QUERY_LEN) -> str | None:
    """Why windows of ``max_len`` tokens overlapping by ``doc_stride`` cannot hold every question (None when they
    can): the context left after the longest question allowed must be more than the overlap. Known from the settings
    alone, so a pipeline checks it before its first update instead of at Step 3."""
    room = max_len - max_query_len - FRAME
    if room > doc_stride:
        return None
    return (f"max_len {max_len} leaves {room} context tokens per window after a question of {max_query_len} tokens "
            f"(the limit questions are cut to), not more than the overlap doc_stride={doc_stride}; raise max_len to "
            f"at least {doc_stride + max_query_len + FRAME + 1} or lower doc_stride")


def qa_features(example: QAExample, tokenizer: AnyTokenizer, *, max_len: int = 384, doc_stride: int = 128,
                max_query_len: int = MAX_QUERY_LEN) -> list[QAWindow]:
    """Windows of `<s> question </s></s> context </s>` covering the whole context, as HF's `run_qa.py` does.

    The question is cut to `max_query_len` tokens; each window holds up to `max_len - len(question) - 4` context
    tokens and consecutive windows overlap by `doc_stride` tokens (`run_qa.py`'s meaning of the option: the
    overlap, not the step). The answer (the first reference answer, at its `answer_start`) is labelled in every
    window that contains it whole; other windows point at `<s>` (0, 0).
    """
    question = tokenizer.encode(example.question)[:max_query_len]
    context_ids, spans = context_token_offsets(tokenizer, example.context)
    room = max_len - len(question) - FRAME  # <s> question </s> </s> ... </s>
    if room <= doc_stride:
        raise InputError(
            f"max_len {max_len} leaves {room} context tokens per window after a {len(question)}-token question, "
            f"not more than the overlap doc_stride={doc_stride}; raise max_len or lower doc_stride/max_query_len")
    answer = None
    if example.answers:
        start_char = example.answer_starts[0]
        answer = _answer_tokens(spans, start_char, start_char + len(example.answers[0]))

    prefix = [BOS_ID, *question, EOS_ID, EOS_ID]
    windows = []
    first = 0
    while True:
        last = min(first + room, len(context_ids))  # this window's context tokens: [first, last)
        ids = prefix + context_ids[first:last] + [EOS_ID]
        offsets: list[tuple[int, int] | None] = [None] * len(prefix) + spans[first:last] + [None]
        start = end = 0
        if answer is not None and first <= answer[0] and answer[1] < last:
            start, end = answer[0] - first + len(prefix), answer[1] - first + len(prefix)
        padding = max_len - len(ids)
        windows.append(QAWindow(
            example_id=example.id, input_ids=ids + [PAD_ID] * padding,
            attention_mask=[1] * len(ids) + [0] * padding, start_position=start, end_position=end,
            offsets=offsets + [None] * padding, context=example.context))
        if last >= len(context_ids):
            return windows
        first = last - doc_stride


def stack_qa_windows(windows: Sequence[QAWindow]) -> dict[str, np.ndarray]:
    """The model's inputs and targets for a list of windows: `input_ids` int64 [N, L], `attention_mask` bool,
    `start_positions` / `end_positions` int64 [N]."""
    return {
        "input_ids": np.array([w.input_ids for w in windows], dtype=np.int64),
        "attention_mask": np.array([w.attention_mask for w in windows], dtype=bool),
        "start_positions": np.array([w.start_position for w in windows], dtype=np.int64),
        "end_positions": np.array([w.end_position for w in windows], dtype=np.int64),
    }


def postprocess_qa(windows: Sequence[QAWindow], start_logits: np.ndarray, end_logits: np.ndarray, *,
                   n_best: int = 20, max_answer_len: int = 30) -> dict[str, str]:
    """The best answer text per example across its windows.

    As in HF's `run_qa.py`: in each window take the `n_best` highest start and end logits, keep pairs that lie in
    the context, run forwards and span at most `max_answer_len` tokens, score them by start + end logit, and
    answer the context's text from the start token's begin to the end token's end. An example with no valid span
    answers "" (scored 0 by the metrics)."""
    start_logits = np.asarray(start_logits, dtype=np.float64)
    end_logits = np.asarray(end_logits, dtype=np.float64)
    if start_logits.shape != end_logits.shape or start_logits.shape[0] != len(windows):
        raise ValueError(f"logits of shapes {start_logits.shape} and {end_logits.shape} for {len(windows)} windows")
    best: dict[str, tuple[float, str]] = {}
    for window, starts, ends in zip(windows, start_logits, end_logits):
        best.setdefault(window.example_id, (-np.inf, ""))
        offsets = window.offsets
        top_starts = np.argsort(starts[:len(offsets)])[::-1][:n_best]
        top_ends = np.argsort(ends[:len(offsets)])[::-1][:n_best]
        for s in top_starts:
            if offsets[s] is None:
                continue
            for e in top_ends:
                if offsets[e] is None or e < s or e - s + 1 > max_answer_len:
                    continue
                score = starts[s] + ends[e]
                text = window.context[offsets[s][0]:offsets[e][1]]
                if text and score > best[window.example_id][0]:
                    best[window.example_id] = (score, text)
    return {example_id: text for example_id, (_, text) in best.items()}

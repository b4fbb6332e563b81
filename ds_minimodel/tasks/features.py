"""Classification and tagging examples -> fixed-length model inputs with RoBERTa's special-token layout.

Padding goes to `max_len` so that every batch has one shape; the attention mask marks real tokens.
(Extractive QA's windows are built in `tasks.qa`, next to the span mapping they depend on.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ds_minimodel.data.tokenizer import BOS_ID, EOS_ID, IGNORE_INDEX, PAD_ID, UNK_ID, AnyTokenizer
from ds_minimodel.errors import InputError
from ds_minimodel.tasks.readers import ClassificationExample, TokenExample

logger = logging.getLogger(__name__)

"""Target of positions that carry no tag (special tokens, padding, non-first pieces): PyTorch's cross-entropy
default `ignore_index`."""


def _truncate_longest_first(a: list[int], b: list[int], room: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer sequence (the second on ties, as HF's "longest_first") until
    len(a) + len(b) <= room."""
    excess = len(a) + len(b) - room
    if excess <= 0:
        return a, b
    # Cut the longer one down to the shorter's length first, then both alternately (b first on ties).
    la, lb = len(a), len(b)
    gap = min(abs(la - lb), excess)
    if la > lb:
        la -= gap
    else:
        lb -= gap
    excess -= gap
    la -= excess // 2
    lb -= excess - excess // 2
    return a[:la], b[:lb]


def classification_features(examples: Sequence[ClassificationExample], tokenizer: AnyTokenizer, *,
                            max_len: int = 128) -> dict[str, np.ndarray]:
    """`input_ids` int64 [N, max_len], `attention_mask` bool, `labels` int64 [N].

    Single texts are `<s> text </s>`, pairs RoBERTa's `<s> a </s></s> b </s>`; too-long inputs are truncated
    longest-first."""
    if max_len < 6:
        raise InputError(f"max_len {max_len} is too short for RoBERTa's pair layout (4 special tokens)")
    input_ids = np.full((len(examples), max_len), PAD_ID, dtype=np.int64)
    labels = np.array([example.label for example in examples], dtype=np.int64)
    truncated = 0
    texts = tokenizer.encode_batch([example.text for example in examples])
    pairs = tokenizer.encode_batch([example.text_pair or "" for example in examples])
    for row, (example, a, b) in enumerate(zip(examples, texts, pairs)):
        if example.text_pair is None:
            ids = [BOS_ID, *a[:max_len - 2], EOS_ID]
            truncated += len(a) > max_len - 2
        else:
            a_cut, b_cut = _truncate_longest_first(a, b, max_len - 4)
            ids = [BOS_ID, *a_cut, EOS_ID, EOS_ID, *b_cut, EOS_ID]
            truncated += len(a_cut) + len(b_cut) < len(a) + len(b)
        input_ids[row, :len(ids)] = ids
    if truncated:
        logger.info("truncated %d of %d examples to %d tokens", truncated, len(examples), max_len)
    return {"input_ids": input_ids, "attention_mask": input_ids != PAD_ID, "labels": labels}


def token_classification_features(examples: Sequence[TokenExample], tokenizer: AnyTokenizer,
                                  tag_list: Sequence[str], *, max_len: int = 128
                                  ) -> tuple[dict[str, np.ndarray], int]:
    """(`input_ids` int64 [N, max_len], `attention_mask` bool, `labels` int64 [N, max_len]; truncated words).

    Each word is encoded on its own, so it starts with SentencePiece's word-start "▁" as in running text. The
    first piece of a word carries the word's tag id, the other pieces and the special tokens `IGNORE_INDEX`
    (the usual first-subword scheme for POS tagging). Words whose first piece does not fit in `max_len - 2` are
    dropped and counted in the second return value, so evaluation can report them as errors."""
    if max_len < 3:
        raise InputError(f"max_len {max_len} leaves no room for a word between <s> and </s>")
    tag_ids = {tag: index for index, tag in enumerate(tag_list)}
    input_ids = np.full((len(examples), max_len), PAD_ID, dtype=np.int64)
    labels = np.full((len(examples), max_len), IGNORE_INDEX, dtype=np.int64)
    truncated_words = 0
    room = max_len - 2
    for row, example in enumerate(examples):
        if len(example.tokens) != len(example.tags):
            raise InputError(
                f"example {example.id}: {len(example.tokens)} words but {len(example.tags)} tags")
        ids, targets = [BOS_ID], [IGNORE_INDEX]
        for position, (word, pieces, tag) in enumerate(
                zip(example.tokens, tokenizer.encode_batch(list(example.tokens)), example.tags)):
            if tag not in tag_ids:
                raise InputError(
                    f"example {example.id}: word {position + 1} {word!r} has tag {tag!r}, not one of "
                    f"{', '.join(tag_list)}")
            if len(ids) - 1 >= room:
                truncated_words += len(example.tokens) - position
                break
            # A word that normalises to nothing (e.g. only a zero-width character) still needs a position to
            # carry its tag: it becomes <unk>.
            pieces = pieces or [UNK_ID]
            pieces = pieces[:room - (len(ids) - 1)]
            ids.extend(pieces)
            targets.extend([tag_ids[tag]] + [IGNORE_INDEX] * (len(pieces) - 1))
        ids.append(EOS_ID)
        targets.append(IGNORE_INDEX)
        input_ids[row, :len(ids)] = ids
        labels[row, :len(targets)] = targets
    if truncated_words:
        logger.info("truncation to %d tokens dropped %d words", max_len, truncated_words)
    return {"input_ids": input_ids, "attention_mask": input_ids != PAD_ID, "labels": labels}, truncated_words

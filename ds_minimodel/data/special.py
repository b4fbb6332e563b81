"""The id layout every vocabulary here shares: fairseq/RoBERTa's special pieces at ids 0..4, in every language and
for tokenizers imported from Hugging Face alike, so that embedding matrices can be swapped (``data.tokenizer``)."""
from __future__ import annotations

BOS_ID = 0
PAD_ID = 1
EOS_ID = 2
UNK_ID = 3
MASK_ID = 4
NUM_SPECIAL = 5
IGNORE_INDEX = -100  # the label of positions a loss skips (torch.nn.CrossEntropyLoss's default ignore_index)
SPECIAL_PIECES: dict[int, str] = {BOS_ID: "<s>", PAD_ID: "<pad>", EOS_ID: "</s>", UNK_ID: "<unk>", MASK_ID: "<mask>"}

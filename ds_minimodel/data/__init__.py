"""Text in: SentencePiece tokenizers, corpus -> token shards, packing, masking and per-rank batch streams."""

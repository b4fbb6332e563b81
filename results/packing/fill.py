"""How full the MLM stages' blocks are under each packing (BENCHMARKS.md, "Packing"): for each prepared folder and
length, the samples, the share of their positions that hold a token, and the share of blocks that are full.

    python results/packing/fill.py DIR [DIR ...]          # folders made by `python -m ds_minimodel prepare`
"""
import sys

import numpy as np

from ds_minimodel.data.streams import PackedDataset, TokenShards

for folder in sys.argv[1:]:
    shards = TokenShards.open(folder)
    for seq_len in (128, 512):
        lines = PackedDataset(shards, seq_len)
        sizes = np.diff(lines.bounds) + 1  # <s> and the block
        blocks = PackedDataset(shards, seq_len, "blocks")
        print(f"{folder}, {shards.num_tokens:,} tokens, seq_len {seq_len}: sentences {len(lines):,} samples, "
              f"{sizes.sum() / (len(lines) * seq_len):.1%} of positions hold a token, {np.mean(sizes == seq_len):.1%} "
              f"of blocks full; blocks {len(blocks):,} samples, all full")

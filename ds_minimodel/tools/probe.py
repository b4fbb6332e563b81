"""Does a pretrained MLM read word order? (``python -m ds_minimodel probe``)

Scores the MLM loss of the same masked positions in three versions of the same text blocks: as written, with the
unmasked tokens of each block shuffled (the same bag of words, the order destroyed), and with every unmasked token
replaced by a random one. A body that reads context in order has a much lower loss as written than shuffled; one whose
two losses are equal predicts from the bag of words alone, like a topic model: it has not yet learned positional
attention, and new embeddings trained over it (Step 2) are not pinned to the geometry a classifier on it uses (issue
16's reference run, RESULTS.md).

    python -m ds_minimodel probe --model runs/reference/step1/base/checkpoints/step_00001041 \\
        --data runs/reference/data/en
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ds_minimodel.data.streams import PackedDataset, TokenShards
from ds_minimodel.data.tokenizer import BOS_ID, MASK_ID, NUM_SPECIAL
from ds_minimodel.errors import InputError, report
from ds_minimodel.model.encoder import MAIN_HEAD, MaskedLM
from ds_minimodel.model.loading import load_mlm


@torch.no_grad()
def word_order_losses(model: MaskedLM, blocks: np.ndarray, *, mask_prob: float = 0.15, seed: int = 0
                      ) -> dict[str, float]:
    """Mean MLM loss (nats) at the same masked positions of ``blocks`` (B, S) as written, shuffled and random.

    Every chosen position is replaced by ``<mask>`` (no 80/10/10: the loss is that of predicting from context
    alone); position 0 and special tokens are never chosen."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.from_numpy(blocks.astype(np.int64))
    chosen = (torch.rand(ids.shape, generator=generator) < mask_prob) & (ids >= NUM_SPECIAL)
    chosen[:, 0] = False
    if not chosen.any():
        raise ValueError("no position chosen: the blocks hold only special tokens")
    shuffled = ids.clone()
    for row in range(len(ids)):
        keep = (~chosen[row]).nonzero().squeeze(1)[1:]  # the unmasked positions after <s>
        shuffled[row, keep] = ids[row, keep[torch.randperm(len(keep), generator=generator)]]
    random = torch.randint(NUM_SPECIAL, model.cfg.vocab_size, ids.shape, generator=generator)
    random[:, 0] = BOS_ID
    was_training = model.training
    model.eval()
    losses = {}
    try:
        for name, version in (("as_written", ids), ("shuffled", shuffled), ("random", random)):
            inputs = torch.where(chosen, torch.full_like(version, MASK_ID), version)
            logits = model(inputs, None, chosen)[MAIN_HEAD].float()
            losses[name] = F.cross_entropy(logits, ids[chosen]).item()
    finally:
        model.train(was_training)
    return losses


def probe(model_folder: Path, data: Path, *, blocks: int = 64, seq_len: int | None = None, seed: int = 0
          ) -> dict[str, Any]:
    model, meta = load_mlm(model_folder)
    shards = TokenShards.open(data)
    if shards.tokenizer_sha256 != (meta.tokenizer_dict or {}).get("sha256"):
        raise InputError(f"{data}: tokenized with another tokenizer than the model in {model_folder}")
    seq_len = seq_len or min(128, model.cfg.max_positions)
    dataset = PackedDataset(shards, seq_len)
    # Packed blocks end at a paragraph boundary, so most are shorter than seq_len: score the first 3/4 of it, from
    # blocks at least that long, in a seeded random order.
    length = seq_len * 3 // 4
    rows = []
    for i in np.random.default_rng(seed).permutation(len(dataset)):
        block = dataset[int(i)]
        if len(block) >= length:
            rows.append(block[:length])
        if len(rows) == blocks:
            break
    if not rows:
        raise InputError(f"{data}: no block of {length} tokens or more")
    losses = word_order_losses(model, np.stack(rows), seed=seed)
    return {"model": str(model_folder), "step": meta.step, "blocks": len(rows), "tokens_per_block": length,
            **losses, "order_gain": losses["shuffled"] - losses["as_written"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ds-minimodel probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, nargs="+", required=True, help="MLM checkpoints or model folders")
    p.add_argument("--data", type=Path, required=True, help="prepared data in the model's tokenizer")
    p.add_argument("--blocks", type=int, default=64, help="text blocks scored (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fixed masks (the same masks for every model)")
    args = p.parse_args(argv)
    try:
        if args.blocks < 1:
            raise InputError(f"--blocks must be at least 1, got {args.blocks}")
        for folder in args.model:
            print(json.dumps(probe(folder, args.data, blocks=args.blocks, seed=args.seed), sort_keys=True),
                  flush=True)
    except InputError as err:
        return report(err)
    return 0

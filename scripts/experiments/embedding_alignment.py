#!/usr/bin/env python
"""How close are Step-2 embeddings to the ones a body was pretrained with? (RESULTS.md, issue 16's row (b))

    python scripts/experiments/embedding_alignment.py --body STEP1_CHECKPOINT --embeddings STEP2_CHECKPOINT [...] --data DATA

For the source-relearn control (English relearned from scratch over the frozen English body) the two matrices index
the same pieces, so a Step 2 that recovers the body's geometry gives rows close to the originals, up to what the body
cannot see. Per band of pieces by frequency in DATA (prepared with the body's tokenizer): the mean cosine of
each row with its original, the mean row norms, and the relative residual ||B M - A|| / ||A|| of the best orthogonal
map M (Procrustes) and of the best linear map (least squares) from the relearned rows B to the original rows A.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ds_minimodel.data.streams import TokenShards  # noqa: E402
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.train import checkpoint  # noqa: E402

BANDS = ((0, 1000), (1000, 4000))


def alignment(original: torch.Tensor, relearned: torch.Tensor, rows: np.ndarray) -> dict[str, float]:
    index = torch.from_numpy(rows)
    a, b = original[index].double(), relearned[index].double()
    u, _, vt = torch.linalg.svd(b.T @ a)
    orthogonal = u @ vt  # argmin over orthogonal M of ||B M - A||
    linear = torch.linalg.lstsq(b, a).solution
    return {"cosine": F.cosine_similarity(a, b, dim=1).mean().item(),
            "norm_original": a.norm(dim=1).mean().item(), "norm_relearned": b.norm(dim=1).mean().item(),
            "procrustes_residual": ((b @ orthogonal - a).norm() / a.norm()).item(),
            "linear_residual": ((b @ linear - a).norm() / a.norm()).item()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--body", type=Path, required=True)
    p.add_argument("--embeddings", type=Path, nargs="+", required=True)
    p.add_argument("--data", type=Path, required=True)
    args = p.parse_args()
    body, _ = load_mlm(args.body)
    original = body.embeddings.tokens.weight.detach()
    shards = TokenShards.open(args.data)
    counts = np.bincount(shards.tokens(0, shards.num_tokens), minlength=original.shape[0])
    by_frequency = np.argsort(-counts, kind="stable")
    for folder in args.embeddings:
        relearned = checkpoint.load_weights(folder)["embeddings.tokens.weight"]
        if relearned.shape != original.shape:
            raise SystemExit(f"{folder}: embeddings of shape {tuple(relearned.shape)}, the body's are "
                             f"{tuple(original.shape)}")
        step = checkpoint.load_meta(folder).step
        for low, high in BANDS:
            record = alignment(original, relearned.float(), by_frequency[low:high])
            print(json.dumps({"embeddings": str(folder), "step": step, "pieces": f"{low}-{high}",
                              **{k: round(v, 4) for k, v in record.items()}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

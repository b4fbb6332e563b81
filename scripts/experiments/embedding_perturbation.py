#!/usr/bin/env python
"""What does a finetuned classifier need from its embeddings? (RESULTS.md, issue 16's row (b))

    python scripts/experiments/embedding_perturbation.py --task-model STEP3_CHECKPOINT --embeddings STEP2_CHECKPOINT \
        --dev DEV_FILE --lang en

Scores the classifier on DEV_FILE with its own embedding rows changed in controlled ways, next to the Step-2 rows of
``--embeddings`` (learned for the same tokenizer: the source-relearn control) as they are and mapped onto the
originals by the best linear map (an oracle: it reads the originals). Isotropic noise of a given share of the rows'
norm tells how much unstructured change the classifier tolerates; the relearned rows' alignment
(scripts/experiments/embedding_alignment.py) says how far from the originals they are. One JSON record per variant.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ds_minimodel.data.tokenizer import load_tokenizer  # noqa: E402
from ds_minimodel.model.surgery import load_embeddings  # noqa: E402
from ds_minimodel.model.transforms import swap_embeddings  # noqa: E402
from ds_minimodel.tasks.formats import (  # noqa: E402
    featurize,
    load_task_model,  # noqa: E402
    predict,
    read_eval_examples,
    score,
)

NOISE = (0.3, 0.5, 0.7, 1.0)


def variants(own: torch.Tensor, relearned: torch.Tensor, seed: int):
    """(name, rows) pairs; ``own`` and ``relearned`` index the same pieces."""
    generator = torch.Generator().manual_seed(seed)
    yield "own", own
    yield "relearned", relearned
    yield "relearned, shifted to the own rows' mean", relearned - relearned.mean(0) + own.mean(0)
    linear = torch.linalg.lstsq(relearned.double(), own.double()).solution.float()
    yield "relearned through the best linear map onto own (oracle)", relearned @ linear
    for share in NOISE:
        noise = torch.randn(own.shape, generator=generator)
        yield f"own + isotropic noise, {share:.0%} of the rows' norm", own + noise * (share * own.norm() / noise.norm())
    yield "own, centred", own - own.mean(0)
    yield "own, rows permuted", own[torch.randperm(own.shape[0], generator=generator)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task-model", type=Path, required=True)
    p.add_argument("--embeddings", type=Path, required=True, help="Step-2 checkpoint with the same tokenizer")
    p.add_argument("--dev", type=Path, required=True)
    p.add_argument("--lang", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    model, spec, meta = load_task_model(args.task_model)
    relearned, bias, emb_meta = load_embeddings(args.embeddings)
    if emb_meta.tokenizer is None or meta.tokenizer is None or emb_meta.tokenizer.sha256 != meta.tokenizer.sha256:
        raise SystemExit(f"{args.embeddings}: another tokenizer than {args.task_model}'s; this compares rows of one")
    own = model.embeddings.tokens.weight.detach().clone()
    examples = read_eval_examples(spec, None, args.dev, args.lang)
    features = featurize(spec, examples, load_tokenizer(meta.tokenizer_dict, args.task_model))
    for name, rows in variants(own, relearned.float(), args.seed):
        swap_embeddings(model, rows, bias.float())
        logits = predict(model, features.arrays)
        print(json.dumps({"variant": name, "task_model": str(args.task_model), "embeddings": str(args.embeddings),
                          "dev": str(args.dev), **{k: round(v, 2) for k, v in
                                                   score(spec, examples, features, logits, args.lang).items()},
                          "classes_predicted": int(len(np.unique(logits.argmax(-1))))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

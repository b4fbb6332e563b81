#!/usr/bin/env python
"""A model's bottom K layers as a model folder: the same pretraining, less depth (RESULTS.md, "Does the task reward
depth").

    python scripts/experiments/cut_layers.py --from MODEL --layers 2 --out runs/depth-cut/cut2

MODEL is a model folder, checkpoint or Hugging Face folder. The embeddings, layers 1..K and the MLM head are kept as
they are (MiniPost's Step 1b before its new layers, without them), so a classifier finetuned over the cut
(``run_finetune.py --model runs/depth-cut/cut2``) against one over the whole model says what the upper layers buy a
task, pretraining held fixed. ``--layers`` equal to the model's depth writes the whole model the same way (a Hugging
Face folder imported, as the pipeline imports ``source.model``). The folder's meta.json records where it was cut
from, and the model's lineage as its own (``primary_sha256``): Step-2 rows trained over the model plug into a classifier
finetuned over the cut, as into one over the model (MiniJoint's primary cut to its whole depth loses its second head,
so without it the cut would be a primary of its own and refuse them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ds_minimodel.errors import InputError
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.transforms import bottom_layers
from ds_minimodel.train.checkpoint import save_model_folder


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", type=Path, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    model, meta = load_mlm(args.source)
    try:
        cut = bottom_layers(model, args.layers)
    except InputError as err:
        raise InputError(f"{args.source}: --layers: {err}") from None
    values = {**meta.to_json(), "model_config": cut.cfg.to_dict(), "cut_from": str(args.source),
              "cut_from_sha256": meta.weights_sha256, "cut_to_layers": args.layers,
              "primary_sha256": meta.lineage}  # a descendant: rows trained over the model plug into the cut's classifier
    values.pop("num_parameters", None)
    record = save_model_folder(args.out, cut.state_dict(), values)
    print(f"{args.out}: layers 1-{args.layers} of {args.source}'s {model.cfg.num_layers}, "
          f"weights {record.weights_sha256[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

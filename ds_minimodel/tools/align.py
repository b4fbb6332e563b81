"""A label-free alignment probe for Step-2 embeddings (``python -m ds_minimodel align``): do target sentences, read
through the body with the new embeddings, land where their English counterparts land with the body's own?

Each target sentence is matched to the English sentence whose mean-pooled hidden state (over its real tokens) is
most similar by cosine, among all English sentences of the pairs; top-1 accuracy is the share matched to its own
translation. Reported after the embedding LayerNorm (layer 0) and after every layer, for every Step-2 checkpoint
given, beside nothing else: no classifier and no label is involved, so it can rank initialisers and checkpoints
before any finetuning. Pairs come from two JSON-lines files that share ``id`` (the lohelp dev and test files are
parallel by id).

    python -m ds_minimodel align --model runs/ref/step1/base/checkpoints/step_00003000 \\
        --source reference_data/tasks/lohelp/dev.en.jsonl --target reference_data/tasks/lohelp/dev.de.jsonl \\
        --embeddings runs/ref/step2/de/bl_base/checkpoints/step_*
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ds_minimodel.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, load_tokenizer
from ds_minimodel.errors import InputError, report, require_file
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.surgery import swap_checked


def read_pairs(source: Path, target: Path, limit: int) -> tuple[list[str], list[str]]:
    """(source texts, target texts) of the ids both files hold, in the source file's order, at most ``limit``."""
    def texts(path: Path) -> dict[str, str]:
        found = {}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    record = json.loads(line)
                    found[str(record["id"])] = str(record["text"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise InputError(f"{path}:{number}: not a JSON object with 'id' and 'text'") from None
        return found

    src, trg = texts(source), texts(target)
    shared = [key for key in src if key in trg][:limit]
    if len(shared) < 2:
        raise InputError(f"{source} and {target} share {len(shared)} id(s); the probe needs parallel files")
    return [src[k] for k in shared], [trg[k] for k in shared]


@torch.no_grad()
def pooled_states(model: MaskedLM, sequences: list[list[int]], *, batch_size: int = 64) -> list[np.ndarray]:
    """Mean over real tokens of the embedding output (after its LayerNorm) and of every layer's output:
    ``num_layers + 1`` arrays of shape (len(sequences), hidden)."""
    model.eval()
    device = next(model.parameters()).device
    layers: list[list[np.ndarray]] = [[] for _ in range(model.cfg.num_layers + 1)]
    for start in range(0, len(sequences), batch_size):
        batch = sequences[start:start + batch_size]
        ids = torch.full((len(batch), max(map(len, batch))), PAD_ID, dtype=torch.long)
        for i, seq in enumerate(batch):
            ids[i, :len(seq)] = torch.tensor(seq)
        ids = ids.to(device)
        mask = ids != PAD_ID
        weights = (mask.float() / mask.sum(1, keepdim=True))[..., None]
        states = [model.embeddings(ids), *model.hidden_states(ids, mask)]
        for depth, x in enumerate(states):
            layers[depth].append((x.float() * weights).sum(1).cpu().numpy())
    return [np.concatenate(chunks) for chunks in layers]


def retrieval_top1(queries: np.ndarray, keys: np.ndarray) -> float:
    """Share of rows i of ``queries`` whose most cosine-similar row of ``keys`` is row i."""
    def unit(a: np.ndarray) -> np.ndarray:
        centred = a - a.mean(0)  # the mean direction every sentence shares says nothing about which one it is
        return centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)

    return float((np.argmax(unit(queries) @ unit(keys).T, axis=1) == np.arange(len(queries))).mean())


DEFAULT_MAX_LEN = 128


def encode(tokenizer: Any, texts: list[str], max_len: int) -> list[list[int]]:
    return [[BOS_ID, *ids[:max_len - 2], EOS_ID] for ids in tokenizer.encode_batch(texts)]


def probe(model_folder: Path, embeddings: list[Path], source: Path, target: Path, *, pairs: int = 1000,
          max_len: int | None = None) -> list[dict[str, Any]]:
    """``max_len``: tokens per sentence, at most the model's positions (None: 128 or the positions, the fewer)."""
    model, meta = load_mlm(model_folder)
    positions = model.cfg.max_positions
    if max_len is None:
        max_len = min(DEFAULT_MAX_LEN, positions)
    elif max_len > positions:
        raise InputError(f"--max-len {max_len} exceeds the {positions} positions of {model_folder}")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # on the GPU where there is one, as Step 4 scores
    src_texts, trg_texts = read_pairs(source, target, pairs)
    source_tokenizer = load_tokenizer(meta.tokenizer_dict, model_folder)
    english = pooled_states(model.to(device), encode(source_tokenizer, src_texts, max_len))
    records = []
    for folder in embeddings:
        emb_meta = swap_checked(model, meta, model_folder, folder)
        tokenizer = load_tokenizer(emb_meta.tokenizer_dict, folder)
        states = pooled_states(model.to(device), encode(tokenizer, trg_texts, max_len))
        records.append({"embeddings": str(folder), "system": emb_meta.details.get("system"),
                        "lang": emb_meta.details.get("lang"), "step2_update": emb_meta.step, "pairs": len(src_texts),
                        "chance": 1 / len(src_texts),
                        "top1": [retrieval_top1(t, e) for t, e in zip(states, english)]})
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the body (Step-1 checkpoint or model folder)")
    p.add_argument("--embeddings", type=Path, nargs="+", required=True, help="Step-2 checkpoints over that body")
    p.add_argument("--source", type=Path, required=True, help="source-language JSON lines with id and text")
    p.add_argument("--target", type=Path, required=True, help="target-language JSON lines with the same ids")
    p.add_argument("--pairs", type=int, default=1000, help="at most this many pairs (the first shared ids)")
    p.add_argument("--max-len", type=int, help=f"tokens per sentence, longer ones cut (default: {DEFAULT_MAX_LEN} "
                   "or the model's positions, the fewer)")
    args = p.parse_args(argv)
    try:
        if args.pairs < 2 or (args.max_len is not None and args.max_len < 3):
            raise InputError(f"--pairs must be at least 2 and --max-len at least 3, got {args.pairs}, {args.max_len}")
        for path, option in ((args.source, "--source"), (args.target, "--target")):
            require_file(path, "file of sentences", option)
        for record in probe(args.model, args.embeddings, args.source, args.target, pairs=args.pairs,
                            max_len=args.max_len):
            print(json.dumps(record, sort_keys=True), flush=True)
    except InputError as err:
        return report(err)
    return 0

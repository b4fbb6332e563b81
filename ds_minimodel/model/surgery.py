"""Model surgery on folders, and its command: embeddings saved, read, checked against a body and plugged into it;
MiniJoint's mini-model cut out as a model folder. The tensor operations are ``model.transforms``.

    python -m ds_minimodel surgery extract-mini --from CKPT --out DIR     MiniJoint's mini-model as a model folder
    python -m ds_minimodel surgery plug --model DIR --embeddings DIR --out DIR   trained embeddings into a body

``plug_embeddings`` refuses embeddings trained over a body of another lineage (``Record.lineage``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ds_minimodel.errors import InputError, report
from ds_minimodel.folders import require_output
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.transforms import (
    BIAS_KEY,
    EXTRA_KEYS,
    TOKENS_KEY,
    extract_embeddings,
    extract_minijoint,
    swap_embeddings,
)
from ds_minimodel.train import checkpoint
from ds_minimodel.train.checkpoint import (
    Kind,
    Record,
    load_meta,
    load_weights,
    save_model_folder,
    weights_sha256,
)

# ----------------------------------------------------------------------------------------- embeddings folders

def save_embeddings(folder: Path, embeddings: torch.Tensor, bias: torch.Tensor, meta: dict[str, Any]) -> Record:
    """Write trained embeddings as a model-folder-like dir (model.pt with the two tensors, meta.json).

    ``meta`` must give ``primary_sha256`` (lineage of the body they were trained over) and ``tokenizer``
    ({"path", "sha256"}); kind, vocab_size and hidden_size are filled in from the tensors (fp32, like every
    checkpoint here). Returns the record written (with ``weights_sha256``).
    """
    if embeddings.dim() != 2 or bias.shape != (embeddings.shape[0],):
        raise ValueError(f"embeddings {tuple(embeddings.shape)} and bias {tuple(bias.shape)}: vocabulary sizes "
                         "disagree")
    for key in ("primary_sha256", "tokenizer"):
        if key not in meta:
            raise ValueError(f"embeddings meta needs {key!r}")
    vocab, hidden = embeddings.shape
    for key, value in (("vocab_size", vocab), ("hidden_size", hidden), ("kind", Kind.EMBEDDINGS.value)):
        if meta.get(key, value) != value:
            raise ValueError(f"embeddings meta says {key}={meta[key]!r} but the tensors give {value!r}")
    meta = {**meta, "kind": Kind.EMBEDDINGS.value, "vocab_size": vocab, "hidden_size": hidden}
    state = {TOKENS_KEY: embeddings.detach().float(), BIAS_KEY: bias.detach().float()}
    return save_model_folder(folder, state, meta)


def load_embeddings(folder: Path) -> tuple[torch.Tensor, torch.Tensor, Record]:
    """(embeddings (V, h), bias (V,), meta) from a folder written by ``save_embeddings`` or a Step-2 checkpoint,
    validated; what else Step 2 trained (``EXTRA_KEYS``) is read by ``load_trained``."""
    state, meta = load_trained(folder)
    return state[TOKENS_KEY], state[BIAS_KEY], meta


def embeddings_meta(folder: Path) -> Record:
    """The record of a Step-2 checkpoint (or ``save_embeddings`` folder), validated, without reading its weights."""
    meta = load_meta(folder)
    meta_path = Path(folder) / checkpoint.META
    if meta.kind != Kind.EMBEDDINGS:
        raise InputError(f"{meta_path}: kind is {meta.kind.value!r}, not {Kind.EMBEDDINGS.value!r}: "
                         "not trained embeddings")
    missing = [k for k, value in (("primary_sha256", meta.primary_sha256), ("tokenizer", meta.tokenizer),
                                  ("vocab_size", meta.details.get("vocab_size")),
                                  ("hidden_size", meta.details.get("hidden_size"))) if value is None]
    if missing:
        raise InputError(f"{meta_path}: missing key(s) {', '.join(missing)}")
    return meta


def load_trained(folder: Path) -> tuple[dict[str, torch.Tensor], Record]:
    """Every tensor a Step-2 checkpoint (or ``save_embeddings`` folder) holds, by name, and its meta: the token
    rows, the output bias and any of ``EXTRA_KEYS`` that Step 2 trained, validated."""
    folder = Path(folder)
    meta = embeddings_meta(folder)
    weights_path = folder / checkpoint.WEIGHTS
    weights = load_weights(folder)
    if not {TOKENS_KEY, BIAS_KEY} <= set(weights) <= {TOKENS_KEY, BIAS_KEY, *EXTRA_KEYS}:
        raise InputError(f"{weights_path}: expected the tensors {TOKENS_KEY} and {BIAS_KEY} (and possibly "
                         f"{', '.join(EXTRA_KEYS)}), found {sorted(weights)}")
    trained = meta.details.get("trainable")
    if trained is not None and set(trained) != set(weights):
        raise InputError(f"{weights_path}: holds {sorted(weights)} but Step 2 trained {sorted(trained)} "
                         f"({checkpoint.META})")
    emb, bias = weights[TOKENS_KEY], weights[BIAS_KEY]
    if emb.dim() != 2 or bias.dim() != 1:
        raise InputError(f"{weights_path}: {TOKENS_KEY} must be (V, h) and {BIAS_KEY} (V,), got "
                         f"{tuple(emb.shape)} and {tuple(bias.shape)}")
    vocab, hidden = meta.details["vocab_size"], meta.details["hidden_size"]
    if not emb.shape[0] == bias.shape[0] == vocab:
        raise InputError(f"{weights_path}: vocabulary sizes disagree: {TOKENS_KEY} has {emb.shape[0]} rows, "
                         f"{BIAS_KEY} {bias.shape[0]}, {checkpoint.META} says vocab_size {vocab}")
    if emb.shape[1] != hidden:
        raise InputError(f"{weights_path}: {TOKENS_KEY} is {emb.shape[1]} wide but {checkpoint.META} says "
                         f"hidden_size {hidden}")
    if weights_sha256(weights) != meta.weights_sha256:
        raise InputError(f"{weights_path}: contents do not match weights_sha256 in {checkpoint.META} "
                         "(modified or corrupted after saving)")
    return weights, meta


def check_fits(model_meta: Record, hidden_size: int, model_folder: Path, embeddings_folder: Path,
               emb_meta: Record | None = None) -> Record:
    """Refuse embeddings of another width (named first: it says what differs) or lineage than the model of
    ``model_folder`` (meta ``model_meta``); returns the embeddings' meta. Reads no weights, so a command given
    several folders can check them all before it scores the first."""
    emb_meta = emb_meta or embeddings_meta(embeddings_folder)
    if emb_meta.details["hidden_size"] != hidden_size:
        raise InputError(f"{embeddings_folder}: embeddings {emb_meta.details['hidden_size']} wide do not fit "
                         f"{model_folder},"
                         f" whose hidden size is {hidden_size}")
    body_lineage = model_meta.lineage
    if emb_meta.primary_sha256 != body_lineage:
        raise InputError(
            f"{embeddings_folder}: embeddings were trained over a body of another lineage than {model_folder} "
            f"(primary_sha256 {emb_meta.primary_sha256[:12]}... vs the model's {body_lineage[:12]}...); "
            "plug them into the primary model (or a descendant) they were trained against")
    return emb_meta


def swap_checked(model: nn.Module, model_meta: Record, model_folder: Path, embeddings_folder: Path) -> Record:
    """Swap the embeddings saved in ``embeddings_folder`` into ``model`` (an MLM or a finetuned task model, whose
    meta is ``model_meta``), after checking they belong to its lineage and width. Returns the embeddings' meta."""
    state, emb_meta = load_trained(embeddings_folder)
    check_fits(model_meta, model.cfg.hidden_size, model_folder, embeddings_folder, emb_meta)
    extras = {k: v for k, v in state.items() if k in EXTRA_KEYS}
    own = model.state_dict()
    for key, tensor in extras.items():
        if key not in own or own[key].shape != tensor.shape:
            raise InputError(f"{embeddings_folder}: {key} is {tuple(tensor.shape)}, but {model_folder} has "
                             f"{tuple(own[key].shape) if key in own else 'no such tensor'}")
    swap_embeddings(model, state[TOKENS_KEY], state[BIAS_KEY])
    with torch.no_grad():
        for key, tensor in extras.items():  # what Step 2 trained beside the rows travels with them
            model.get_parameter(key).copy_(tensor)
    return emb_meta


def plug_embeddings(model_folder: Path, embeddings_folder: Path,
                    out_folder: Path | None = None) -> tuple[MaskedLM, Record]:
    """Load the body in ``model_folder`` and swap in the embeddings from ``embeddings_folder`` (Steps 3-4).

    Refused (InputError naming both folders) when the embeddings were trained over a body of another lineage or
    have another hidden size. A different vocabulary size is the point of the swap, not an error. The new meta
    is written fresh, not copied: the body's training state (step, data position, ...) describes the source
    language run and would mislead; it records the new model_config, the embeddings' tokenizer, the lineage, and
    where body and embeddings came from. With ``out_folder`` the model is saved there as a model folder.
    """
    model_folder, embeddings_folder = Path(model_folder), Path(embeddings_folder)
    model, model_meta = load_mlm(model_folder)
    emb_meta = swap_checked(model, model_meta, model_folder, embeddings_folder)
    meta = {
        "kind": Kind.PLUGGED,
        "model_config": model.cfg.to_dict(),
        "tokenizer": emb_meta.tokenizer,
        "primary_sha256": model_meta.lineage,
        "embeddings_from": {"path": str(embeddings_folder), "weights_sha256": emb_meta.weights_sha256},
        "body_from": {"path": str(model_folder), "weights_sha256": model_meta.weights_sha256},
        "num_parameters": model.num_parameters(),
    }
    if "variant" in model_meta.details:
        meta["variant"] = model_meta.details["variant"]
    if out_folder is not None:
        return model, save_model_folder(out_folder, model.state_dict(), meta)
    return model, Record.of({**meta, "weights_sha256": weights_sha256(model.state_dict())})


# ------------------------------------------------------------------------------------------------------- CLI

def extract_minijoint_folder(source: Path, out: Path) -> Record:
    """``extract-mini``: MiniJoint's mini-model of the checkpoint/model folder ``source`` saved in ``out``."""
    source = Path(source)
    model, meta = load_mlm(source)
    try:
        mini = extract_minijoint(model)
    except InputError as err:
        raise InputError(f"{source}: {err}") from None
    mini_meta = {
        "kind": Kind.MINIJOINT_MINI,
        "model_config": mini.cfg.to_dict(),
        "tokenizer": meta.tokenizer,
        "primary_sha256": meta.lineage,
        "cut_from": str(source),
        "cut_from_sha256": meta.weights_sha256,
        "num_parameters": mini.num_parameters(),
    }
    return save_model_folder(out, mini.state_dict(), mini_meta)


def export_embeddings(model_folder: Path, out: Path) -> Record:
    """``export-embeddings``: a model's own token embeddings and output bias as an embeddings folder."""
    model, meta = load_mlm(model_folder)
    emb, bias = extract_embeddings(model)
    return save_embeddings(out, emb, bias, {"primary_sha256": meta.lineage, "tokenizer": meta.tokenizer,
                                            "exported_from": str(Path(model_folder).resolve())})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ds-minimodel surgery", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract-mini", help="MiniJoint: save the mini-model (bottom N layers + aux head)")
    ex.add_argument("--from", dest="source", type=Path, required=True, help="MiniJoint checkpoint or model folder")
    ex.add_argument("--out", type=Path, required=True, help="model folder to write")
    pl = sub.add_parser("plug", help="swap trained embeddings into a model of the same lineage")
    pl.add_argument("--model", type=Path, required=True, help="model folder (the body)")
    pl.add_argument("--embeddings", type=Path, required=True, help="embeddings folder (save_embeddings)")
    pl.add_argument("--out", type=Path, required=True, help="model folder to write")
    xe = sub.add_parser("export-embeddings", help="save a model's own (source-language) embeddings as an "
                                                  "embeddings folder, to swap back in after finetuning")
    xe.add_argument("--model", type=Path, required=True, help="checkpoint or model folder")
    xe.add_argument("--out", type=Path, required=True, help="embeddings folder to write")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        require_output(args.out, what="a model folder" if args.command != "export-embeddings" else "embeddings")
        if args.command == "extract-mini":
            meta = extract_minijoint_folder(args.source, args.out)
        elif args.command == "export-embeddings":
            meta = export_embeddings(args.model, args.out)
        else:
            _, meta = plug_embeddings(args.model, args.embeddings, args.out)
    except InputError as err:
        return report(err)
    print(json.dumps({"out": str(args.out), "kind": meta.kind.value, "weights_sha256": meta.weights_sha256,
                      "primary_sha256": meta.primary_sha256}, sort_keys=True), flush=True)
    return 0

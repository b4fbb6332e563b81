"""``ds-minimodel hf``: a Hugging Face BERT/DistilBERT/RoBERTa folder imported as one of our model folders
(``model.hf``), or one of ours exported as a Hugging Face RobertaFor* folder (``model.hf_export``)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ds_minimodel.errors import InputError, report
from ds_minimodel.model import hf
from ds_minimodel.model.hf import import_to
from ds_minimodel.model.hf_export import export_folder


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ds-minimodel hf", description=hf.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    im = sub.add_parser("import", help="a Hugging Face BERT/DistilBERT/RoBERTa folder as one of our model folders")
    im.add_argument("--from", dest="source", type=Path, required=True, help="Hugging Face model folder (local)")
    im.add_argument("--out", type=Path, required=True, help="model folder to write (new or empty)")
    ex = sub.add_parser("export", help="a model folder or checkpoint as a Hugging Face RobertaFor* folder")
    ex.add_argument("--model", type=Path, required=True,
                    help="model folder or checkpoint: an MLM (primary, mini-model) or a finetuned task model")
    ex.add_argument("--embeddings", type=Path, help="Step-2 checkpoint whose embeddings and tokenizer to swap in")
    ex.add_argument("--out", type=Path, required=True, help="Hugging Face folder to write (new or empty)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "import":
            meta = import_to(args.source, args.out)
            summary = {"out": str(args.out), "kind": meta.kind.value, "mlm_head": meta.details["mlm_head"],
                       "notes": meta.details["import_notes"], "weights_sha256": meta.weights_sha256,
                       "tokenizer": meta.tokenizer.path, "vocab_size": meta.model_config["vocab_size"]}
        else:
            summary = {"out": str(args.out), **export_folder(args.model, args.out, embeddings=args.embeddings)}
    except InputError as err:
        return report(err)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0

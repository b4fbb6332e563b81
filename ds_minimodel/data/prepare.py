"""Prepare one language's pretraining data: a SentencePiece model and the encoded corpus, in one folder.

    python -m ds_minimodel prepare --corpus cc100/en.txt --out data/en --vocab-size 50000
    python -m ds_minimodel prepare --corpus cc100/de.txt --out data/de --tokenizer other/spm.model
    python -m ds_minimodel prepare --corpus cc100/en.txt --out data/en-bert --tokenizer path/to/hf-model-folder

The folder is self-contained (DIR/spm.model, DIR/meta.json, the token shards), and running the same command
again does nothing; --force redoes both steps. A Hugging Face model or tokenizer folder given as --tokenizer (the
tokenizer of a model imported with ds_minimodel.model.hf) has its tokenizer files copied to DIR/hf_tokenizer/ instead.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ds_minimodel.config import file_sha256
from ds_minimodel.data.hf_tokenizer import HFTokenizer, copy_hf_tokenizer
from ds_minimodel.data.shards import prepare_corpus
from ds_minimodel.data.tokenizer import (
    MODEL_TYPES,
    Tokenizer,
    open_tokenizer,
    read_training_record,
    replaced_tokenizer_path,
    train_sentencepiece,
    training_arguments,
    training_record_path,
)
from ds_minimodel.errors import InputError, report, require_file
from ds_minimodel.folders import require_output

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "spm.model"
HF_TOKENIZER_DIR = "hf_tokenizer"


def tokenizer_path(data_dir: Path) -> Path:
    """Where a prepared folder keeps its tokenizer: DIR/hf_tokenizer/ when it was prepared with a Hugging Face
    tokenizer, else DIR/spm.model."""
    hf = Path(data_dir) / HF_TOKENIZER_DIR
    return hf if hf.is_dir() else Path(data_dir) / TOKENIZER_FILE


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[None]:
    """Around the code that puts a new tokenizer at ``target`` (``--force``): the one there is moved aside under its
    hash first (``replaced_tokenizer_path``), where every checkpoint and model trained with it still finds it; back
    in place if the new one is not installed; dropped if the new one is the same."""
    try:
        old = open_tokenizer(target).sha256 if target.exists() else None
    except InputError:  # not a readable tokenizer: no model can depend on it
        old = None
    kept = None if old is None else replaced_tokenizer_path(target, old)
    if kept is not None:
        _remove(kept)
        os.replace(target, kept)
        if training_record_path(target).exists():
            os.replace(training_record_path(target), training_record_path(kept))
    try:
        yield
    except BaseException:  # whatever the failed attempt left at target (a half-written model) gives way
        if kept is not None:
            _remove(target)
            os.replace(kept, target)
            if training_record_path(kept).exists():
                os.replace(training_record_path(kept), training_record_path(target))
        raise
    if kept is not None:
        if target.exists() and open_tokenizer(target).sha256 == old:
            _remove(kept)
            training_record_path(kept).unlink(missing_ok=True)
        else:
            logger.warning("%s: replaced; the tokenizer it held is kept as %s for the models trained with it",
                           target, kept)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _already_there(target: Path, source: Path, same: Callable[[], bool], *, force: bool) -> bool:
    """Whether ``target`` already holds ``source``'s tokenizer (``same`` asked only if it exists); a different one is
    refused unless ``force``, which replaces it."""
    if not target.exists():
        return False
    if same():
        return True
    if not force:
        raise InputError(f"{target}: the folder already holds a different tokenizer than {source}; "
                         "pass --force to replace it (and re-encode the corpus) or choose another --out")
    return False


def _copy_tokenizer(source: Path, target: Path, *, force: bool) -> None:
    tokenizer = Tokenizer.load(source)  # refuse a model without the reserved ids before touching the folder
    if _already_there(target, source, lambda: target.resolve() == source.resolve()
                      or Tokenizer.load(target).sha256 == tokenizer.sha256, force=force):
        return
    with _replacing(target):
        temporary = target.with_name(target.name + ".tmp")
        shutil.copyfile(source, temporary)
        os.replace(temporary, target)
        # A training record left by an earlier trained tokenizer would now describe the wrong model.
        training_record_path(target).unlink(missing_ok=True)


def _copy_hf_tokenizer(source: Path, target: Path, *, force: bool) -> None:
    tokenizer = HFTokenizer.load(source)  # refuse a folder transformers cannot read before touching the output
    if _already_there(target, source, lambda: HFTokenizer.load(target).sha256 == tokenizer.sha256, force=force):
        return
    with _replacing(target):
        temporary = target.with_name(target.name + ".tmp")
        shutil.rmtree(temporary, ignore_errors=True)
        copy_hf_tokenizer(source, temporary)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(temporary, target)


def _train_or_reuse(corpus: Path, target: Path, *, force: bool, fit_vocab: bool = False, **options) -> None:
    arguments = training_arguments(corpus, **options)
    if target.exists() and not force:
        record = read_training_record(target)
        if record is not None and _same_training(record.get("arguments"), arguments, corpus):
            fitted = record.get("vocab_size_used")
            if fitted and not fit_vocab:
                raise InputError(f"{target}: trained with {fitted:,} pieces, all its corpus allows (fit_vocab), not "
                                 f"the {options['vocab_size']:,} asked now; ask for fit_vocab again, or --force")
            logger.info("%s was trained with the same arguments; reusing it", target)
            return
        how = "with other arguments" if record else "elsewhere"
        raise InputError(f"{target}: the folder already holds a tokenizer trained {how}; pass --force to retrain it, "
                         f"or --tokenizer {target} to keep it")
    with _replacing(target):
        train_sentencepiece(corpus, target.parent / target.stem, fit_vocab=fit_vocab, **options)


def _same_training(recorded: object, arguments: dict, corpus: Path) -> bool:
    """Whether a training record describes this training. The record names the corpus by absolute path and size
    (hashing a CC-100 file costs minutes), so a run read from another checkout, or a moved one, records another path
    for the same text: then, and only then, the two files are hashed, as the encoded shards' check does."""
    if recorded == arguments:
        return True

    def without_path(record: dict) -> dict:
        return {k: v for k, v in record.items() if k != "corpus"}

    if not isinstance(recorded, dict) or without_path(recorded) != without_path(arguments):
        return False
    old = Path(str(recorded.get("corpus", "")))
    if not old.is_file() or old.stat().st_size != arguments["corpus_bytes"]:
        return False
    logger.info("%s was trained on %s; comparing its content with %s", corpus.name, old, corpus)
    return file_sha256(old) == file_sha256(corpus)


# What a prepared folder holds: the tokenizer (SentencePiece model and its sidecars, or a Hugging Face tokenizer's
# files), the shards and their index. A folder of only these is this command's own, to continue or re-encode.
_DATA_FILES = ("meta.json", "lines.npy", "docs.npy", HF_TOKENIZER_DIR)
_DATA_PREFIXES = ("tokens_", "spm.", f"{HF_TOKENIZER_DIR}.")  # spm.<hash>.model: a tokenizer --force replaced


def is_data_folder(folder: Path) -> bool:
    """Whether ``folder`` holds only what ``prepare`` writes (a finished or an interrupted preparation)."""
    return all(p.name in _DATA_FILES or p.name.startswith(_DATA_PREFIXES) or p.name.startswith(".")
               for p in Path(folder).iterdir())


def prepare(
    corpus: Path,
    out_dir: Path,
    *,
    tokenizer: Path | None = None,
    vocab_size: int = 50_000,
    model_type: str = "unigram",
    character_coverage: float | None = None,
    input_sentence_size: int = 2_000_000,
    seed: int = 0,
    lowercase: bool = False,
    fit_vocab: bool = False,
    workers: int | None = None,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Put a tokenizer at out_dir/spm.model (copied from `tokenizer`, else trained on `corpus`), or, when
    `tokenizer` is a Hugging Face folder, its files at out_dir/hf_tokenizer/ (``prepare_tokenizer``); then encode
    `corpus` with it into `out_dir`. Returns prepare_corpus's summary."""
    target = prepare_tokenizer(corpus, out_dir, tokenizer=tokenizer, vocab_size=vocab_size, model_type=model_type,
                               character_coverage=character_coverage, input_sentence_size=input_sentence_size,
                               seed=seed, lowercase=lowercase, fit_vocab=fit_vocab, force=force)
    return prepare_corpus(corpus, out_dir, target, workers=workers, force=force, progress=progress)


def prepare_tokenizer(corpus: Path, out_dir: Path, *, tokenizer: Path | None = None, vocab_size: int = 50_000,
                      model_type: str = "unigram", character_coverage: float | None = None,
                      input_sentence_size: int = 2_000_000, seed: int = 0, lowercase: bool = False,
                      fit_vocab: bool = False, force: bool = False) -> Path:
    """``prepare``'s first half: the folder's tokenizer, trained (or reused when trained with the same arguments) or
    copied; returns where it is. The pipeline runs it for every language before encoding any, so that a language
    whose corpus cannot give its vocabulary is refused before hours of encoding."""
    require_file(corpus, "corpus file")
    require_output(out_dir, own=is_data_folder, what="prepared data")
    hf = tokenizer is not None and Path(tokenizer).is_dir()
    target = out_dir / (HF_TOKENIZER_DIR if hf else TOKENIZER_FILE)
    other = out_dir / (TOKENIZER_FILE if hf else HF_TOKENIZER_DIR)
    if other.exists():  # one tokenizer per folder: tokenizer_path() must not have to choose
        if not force:
            raise InputError(f"{other}: the folder already holds a {'SentencePiece' if hf else 'Hugging Face'} "
                             "tokenizer; pass --force to replace it (and re-encode the corpus) or choose another --out")
        with _replacing(other):  # kept under its hash for the models trained with it
            pass
    out_dir.mkdir(parents=True, exist_ok=True)
    if hf:
        _copy_hf_tokenizer(Path(tokenizer), target, force=force)
    elif tokenizer is not None:
        _copy_tokenizer(tokenizer, target, force=force)
    else:
        _train_or_reuse(corpus, target, force=force, vocab_size=vocab_size, model_type=model_type,
                        character_coverage=character_coverage, input_sentence_size=input_sentence_size, seed=seed,
                        lowercase=lowercase, fit_vocab=fit_vocab)
    return target


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ds-minimodel prepare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True,
                        help="UTF-8 text, one paragraph per line, a blank line between documents (CC-100 layout)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the tokenizer and the token shards")
    parser.add_argument("--tokenizer", type=Path,
                        help="use this SentencePiece model instead of training one, or a Hugging Face model or "
                             "tokenizer folder (an imported model's tokenizer: see ds_minimodel.model.hf)")
    training = parser.add_argument_group("tokenizer training (without --tokenizer)")
    training.add_argument("--vocab-size", type=int, help="pieces, including 5 special ones (default 50000)")
    training.add_argument("--model-type", choices=MODEL_TYPES, help="default unigram")
    training.add_argument("--character-coverage", type=float,
                          help="default: 0.9995 for mostly Chinese/Japanese/Korean text, else 1.0")
    training.add_argument("--input-sentence-size", type=int, help="lines sampled for training (default 2000000)")
    training.add_argument("--lowercase", action="store_true", default=None,
                          help="the tokenizer case-folds text (SentencePiece's nmt_nfkc_cf), in training and encoding:"
                               " for a language added to an uncased model")
    training.add_argument("--fit-vocab", action="store_true", default=None,
                          help="a corpus too small for --vocab-size pieces gets the largest vocabulary it allows")
    parser.add_argument("--workers", type=int, help="encoding processes (default: all available cores)")
    parser.add_argument("--force", action="store_true", help="redo the tokenizer and the encoding")
    parser.add_argument("--seed", type=int, default=0, help="seed of SentencePiece's line sampling")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    training = {"vocab_size": args.vocab_size, "model_type": args.model_type,
                "character_coverage": args.character_coverage, "input_sentence_size": args.input_sentence_size,
                "lowercase": args.lowercase, "fit_vocab": args.fit_vocab}
    given = [name for name, value in training.items() if value is not None]
    if args.tokenizer is not None and given:
        parser.error(f"--tokenizer uses an existing model; drop {', '.join('--' + n.replace('_', '-') for n in given)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        prepare(args.corpus, args.out, tokenizer=args.tokenizer, seed=args.seed, workers=args.workers,
                force=args.force, progress=not args.no_progress,
                **{name: value for name, value in training.items() if value is not None})
    except InputError as err:
        return report(err)
    except KeyboardInterrupt:  # Ctrl-C (the pool's workers ignore it): one line, no traceback
        print(f"ds-minimodel prepare: interrupted; what it finished in {args.out} is kept, the shards it was writing "
              "are removed: run the same command again to finish", file=sys.stderr, flush=True)
        return 130
    return 0

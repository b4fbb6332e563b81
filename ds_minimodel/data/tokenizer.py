"""SentencePiece tokenizers with RoBERTa's special ids reserved identically in every language.

Mini-model adaptation (Marchisio et al., 2023, Sec. 3) swaps the embedding matrix of a trained encoder for one
learned on a new language. The swap only works if every language's vocabulary puts the pieces the model has
learned to treat specially (`<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>`) at the same ids, so every model trained
here reserves fairseq/RoBERTa's ids 0..4 and `Tokenizer.load` refuses a model that does not. A model imported from
Hugging Face keeps its own tokenizer, seen through the same ids by `HFTokenizer` (``ds_minimodel.data.hf_tokenizer``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import logging
import math
import os
import random
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from ds_minimodel.data.corpus_text import check_corpus, choose_character_coverage
from ds_minimodel.data.hf_tokenizer import HFTokenizer
from ds_minimodel.data.special import (  # noqa: F401 (re-exported: the ids are part of this module's interface)
    BOS_ID,
    EOS_ID,
    IGNORE_INDEX,
    MASK_ID,
    NUM_SPECIAL,
    PAD_ID,
    SPECIAL_PIECES,
    UNK_ID,
)
from ds_minimodel.errors import InputError

logger = logging.getLogger(__name__)


MODEL_TYPES = ("unigram", "bpe", "char", "word")



def _sidecar(prefix: Path, suffix: str) -> Path:
    # Path.with_suffix would eat a dotted prefix such as "spm.v2".
    return prefix.parent / (prefix.name + suffix)


def _model_prefix(model_path: Path) -> Path:
    return model_path.parent / model_path.name.removesuffix(".model")


def training_arguments(
    corpus: Path,
    *,
    vocab_size: int,
    model_type: str,
    character_coverage: float | None,
    input_sentence_size: int,
    seed: int,
    lowercase: bool = False,
) -> dict:
    """The arguments that determine a trained model, as recorded next to it (`<prefix>.json`).

    Callers compare a record with this to decide whether an existing model can be reused. The corpus is
    identified by its absolute path and size rather than a hash: hashing a CC-100 file costs minutes. ``lowercase``
    is recorded only when set, so the records of models trained before it existed still match. (Whether the size was
    fitted to the corpus is the record's ``vocab_size_used``: it changes the model only where the corpus is small.)
    """
    return {**({"lowercase": True} if lowercase else {}),
        "corpus": str(corpus.resolve()),
        "corpus_bytes": corpus.stat().st_size,
        "vocab_size": vocab_size,
        "model_type": model_type,
        "character_coverage": character_coverage,
        "input_sentence_size": input_sentence_size,
        "seed": seed,
    }


def training_record_path(model_path: Path) -> Path:
    """Where `train_sentencepiece` records how `model_path` was trained: `<prefix>.json`."""
    return _sidecar(_model_prefix(Path(model_path)), ".json")


def read_training_record(model_path: Path) -> dict | None:
    """The record `train_sentencepiece` wrote beside `model_path`, or None if there is none or it is unreadable."""
    try:
        return json.loads(training_record_path(model_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _open_unit(rng: random.Random) -> float:
    """Uniform on the open interval (0, 1), so that its logarithm is finite and negative."""
    return (rng.getrandbits(53) + 0.5) / 2**53


def _skip(rng: random.Random, log_weight: float) -> int:
    """Algorithm L's gap: floor(log U / log(1 - W)) lines are passed over before the next one is taken."""
    return int(math.log(_open_unit(rng)) / math.log(-math.expm1(log_weight)))


def _sample_lines(corpus: Path, size: int, seed: int) -> list[str]:
    """A uniform sample of `size` non-blank UTF-8 lines (all of them if fewer or `size` is 0), in one pass.

    SentencePiece 0.2's own sampling (`input_sentence_size`) ignores `set_random_generator_seed`, so the
    same corpus gave a different vocabulary on every run; this reservoir sample is seeded instead. It is Li's
    Algorithm L (ACM TOMS 20(4), 1994): it draws random numbers only for the ~size x log(lines / size) lines it
    takes, so the pass costs little more than reading the file."""
    rng = random.Random(seed)
    reservoir: list[bytes] = []
    with corpus.open("rb") as f:
        lines = (line for line in f if not line.isspace())
        if size <= 0:  # SentencePiece's convention: 0 means every line
            reservoir.extend(lines)
        else:
            reservoir.extend(itertools.islice(lines, size))
            log_weight = math.log(_open_unit(rng)) / size  # Li's W, kept as a logarithm
            take = size + _skip(rng, log_weight)  # index of the next line taken
            for index, line in enumerate(lines, start=size):
                if index == take:
                    reservoir[rng.randrange(size)] = line
                    log_weight += math.log(_open_unit(rng)) / size
                    take += _skip(rng, log_weight) + 1
    texts = []
    for line in reservoir:
        try:
            texts.append(line.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError:
            pass  # skipped when the corpus is encoded too
    return texts


SENTENCE_BYTES = 4192  # SentencePiece's max_sentence_length default: longer lines are left out of training


@contextlib.contextmanager
def _stderr_to(log_path: Path) -> Iterator[None]:
    """Send file descriptor 2 to `log_path`: SentencePiece's C++ logger writes hundreds of lines there.

    Works on the descriptor rather than sys.stderr because pytest and notebooks replace sys.stderr with objects
    that have no file descriptor (sentencepiece's own `logstream=` needs one)."""
    with log_path.open("ab") as log:
        saved = os.dup(2)
        try:
            os.dup2(log.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def train_sentencepiece(
    corpus: Path,
    model_prefix: Path,
    *,
    vocab_size: int = 50_000,
    model_type: str = "unigram",
    character_coverage: float | None = None,
    input_sentence_size: int = 2_000_000,
    seed: int = 0,
    num_threads: int | None = None,
    lowercase: bool = False,
    fit_vocab: bool = False,
) -> Path:
    """Train a SentencePiece model with the reserved special ids; return the path of `<model_prefix>.model`.

    ``lowercase``: the model case-folds text (SentencePiece's ``nmt_nfkc_cf`` normalisation, NFKC then case folding),
    in training and in every later encoding, since the rule is stored in the model: for a language added to an
    uncased source model, whose body never saw a capital letter and whose vocabulary then shares more pieces with
    this one (``pipeline.settings.CorpusSettings.lowercase``).

    ``fit_vocab``: a corpus too small for ``vocab_size`` pieces gets the largest vocabulary SentencePiece can learn
    from it (said in a warning and recorded as ``vocab_size_used``), instead of an error.

    Memory stays bounded on a CC-100-sized corpus: training sees a seeded uniform sample of `input_sentence_size`
    non-blank lines (0: all lines). `character_coverage=None` chooses by script (see `choose_character_coverage`).
    The arguments and the coverage used are recorded in `<model_prefix>.json`; SentencePiece's log goes to
    `<model_prefix>.log`.
    """
    corpus, model_prefix = Path(corpus), Path(model_prefix)
    check_corpus(corpus)
    if model_type not in MODEL_TYPES:
        raise InputError(f"model type {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    if vocab_size <= NUM_SPECIAL:
        raise InputError(f"vocabulary size {vocab_size} leaves no room beyond the {NUM_SPECIAL} special pieces")
    arguments = training_arguments(
        corpus,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        seed=seed,
        lowercase=lowercase,
    )
    coverage = choose_character_coverage(corpus) if character_coverage is None else character_coverage
    if num_threads is None:
        num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    log_path = _sidecar(model_prefix, ".log")
    log_path.unlink(missing_ok=True)
    logger.info("training a %s SentencePiece model of %d pieces on %s (character coverage %s, log %s)",
                model_type, vocab_size, corpus, coverage, log_path)

    sample = _sample_lines(corpus, input_sentence_size, seed)
    if not sample:
        raise InputError(f"{corpus}: no text found (only blank lines or lines that are not UTF-8)")
    if all(len(line.encode("utf-8")) > SENTENCE_BYTES for line in sample):
        raise InputError(f"{corpus}: every line is longer than {SENTENCE_BYTES:,} bytes, which SentencePiece leaves "
                         "out of training; put one paragraph or sentence per line")
    size = vocab_size
    while True:
        try:
            _train(sample, model_prefix, log_path, vocab_size=size, model_type=model_type, coverage=coverage,
                   num_threads=num_threads, lowercase=lowercase)
            break
        except RuntimeError as err:
            too_high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", str(err))
            if too_high and fit_vocab and int(too_high.group(2)) < size:
                size = int(too_high.group(2))
                logger.warning("%s: %s pieces are more than this corpus allows; training the largest vocabulary it "
                               "allows, %s pieces (fit_vocab)", corpus, f"{vocab_size:,}", f"{size:,}")
                continue
            if too_high:
                raise InputError(
                    f"{corpus}: vocabulary size {vocab_size} is too large for this corpus (at most "
                    f"{too_high.group(2)} pieces can be learned from it); lower --vocab-size, use a bigger corpus, "
                    "or let the size fit the corpus (prepare --fit-vocab, the pipeline's fit_vocab)") from None
            required = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", str(err))
            if required:
                raise InputError(
                    f"{corpus}: a vocabulary of {size:,} pieces cannot hold this text's {required.group(2)} "
                    f"required characters at character coverage {coverage}; raise the vocabulary size or lower the "
                    "character coverage") from None
            _raise_if_out_of_space(model_prefix.parent)
            raise InputError(f"{corpus}: SentencePiece training failed: {err} (log: {log_path})") from None

    model_path = _sidecar(model_prefix, ".model")
    try:
        Tokenizer.load(model_path)  # proves the special ids came out where RoBERTa expects them
    except InputError:
        model_path.unlink(missing_ok=True)  # cut short, perhaps by a full disk, which SentencePiece may not report
        _raise_if_out_of_space(model_path.parent)
        raise
    record = {"arguments": arguments, "character_coverage_used": coverage, "sentencepiece": spm.__version__,
              **({"vocab_size_used": size} if size != vocab_size else {})}
    training_record_path(model_path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return model_path


def _raise_if_out_of_space(folder: Path) -> None:
    """A full disk said as one (``errors.disk_fault``), where SentencePiece's own words are an internal assertion
    about a line it could not write, or a model file cut short."""
    if shutil.disk_usage(folder).free < 1 << 20:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))


def _train(sample: list[str], model_prefix: Path, log_path: Path, *, vocab_size: int, model_type: str,
           coverage: float, num_threads: int, lowercase: bool) -> None:
    """One SentencePiece training with the reserved special ids (its RuntimeError is the caller's to read)."""
    with _stderr_to(log_path):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sample),
            model_prefix=str(model_prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=coverage,
            input_sentence_size=0,  # already sampled
            num_threads=num_threads,
            bos_id=BOS_ID,
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            user_defined_symbols=[SPECIAL_PIECES[MASK_ID]],
            normalization_rule_name="nmt_nfkc_cf" if lowercase else "nmt_nfkc",
        )


class Tokenizer:
    """A loaded SentencePiece model whose special ids are the reserved ones; build with `Tokenizer.load`."""

    special_ids: frozenset[int] = frozenset(SPECIAL_PIECES)

    def __init__(self, path: Path, processor: spm.SentencePieceProcessor, sha256: str) -> None:
        self.path = path
        # Hex digest of the .model file's bytes: the tokenizer's identity in prepared data and checkpoints.
        self.sha256 = sha256
        self._sp = processor

    @classmethod
    def load(cls, path: Path | str) -> Tokenizer:
        path = Path(path)
        try:
            blob = path.read_bytes()
        except OSError as err:
            raise InputError(f"{path}: cannot read tokenizer model ({err.strerror})") from None
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(blob)
        except (RuntimeError, OSError, TypeError):
            raise InputError(f"{path}: not a SentencePiece model") from None
        found = {i: processor.id_to_piece(i) for i in SPECIAL_PIECES if i < processor.get_piece_size()}
        ids_ok = (processor.bos_id(), processor.pad_id(), processor.eos_id(), processor.unk_id()) == (
            BOS_ID, PAD_ID, EOS_ID, UNK_ID)
        if found != SPECIAL_PIECES or not ids_ok:
            expected = ", ".join(f"{p}={i}" for i, p in SPECIAL_PIECES.items())
            got = ", ".join(f"{p}={i}" for i, p in found.items())
            raise InputError(
                f"{path}: special pieces must be {expected} (RoBERTa's ids) but are {got}; "
                "train the model with ds_minimodel.data.prepare (or spm options bos_id=0 pad_id=1 eos_id=2 unk_id=3 "
                "user_defined_symbols=<mask>)"
            )
        return cls(path, processor, hashlib.sha256(blob).hexdigest())

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(texts)

    def encode_flat(self, texts: list[str], *, num_threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Encode `texts` with `</s>` after each; return (all ids concatenated as int32, per-text lengths as int64).

        The binariser's fast path: one C++ call per batch, no Python list per token."""
        if not texts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        arrays = self._sp.encode(texts, out_type="numpy", add_eos=True, num_threads=num_threads)
        return np.concatenate(arrays), np.fromiter(map(len, arrays), np.int64, len(arrays))

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._sp.decode(np.asarray(ids, dtype=np.int64).tolist())

    def piece(self, id: int) -> str:
        if not 0 <= id < self.vocab_size:
            raise IndexError(f"id {id} is outside the vocabulary of {self.vocab_size} pieces ({self.path})")
        return self._sp.id_to_piece(id)

    def id(self, piece: str) -> int | None:
        """The piece's id, or None if the vocabulary lacks it (SentencePiece itself would answer <unk>'s id)."""
        found = self._sp.piece_to_id(piece)
        return None if found == UNK_ID and piece != SPECIAL_PIECES[UNK_ID] else found

    def pieces(self) -> list[str]:
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r}, vocab_size={self.vocab_size}, sha256={self.sha256[:12]}...)"


def load_tokenizer(ref: dict | None, owner: str | Path) -> AnyTokenizer:
    """The tokenizer a checkpoint or data folder refers to ({"path", "sha256"}), checked against the recorded hash,
    so a tokenizer replaced on disk is never silently paired with embeddings trained on another. The path is a
    SentencePiece model or a Hugging Face tokenizer folder (`open_tokenizer`)."""
    if not ref or "path" not in ref:
        raise InputError(f"{owner}: records no tokenizer")
    path = Path(ref["path"])
    if ref.get("sha256"):
        kept = replaced_tokenizer_path(path, ref["sha256"])  # `prepare --force` put the one it replaced there
        if kept.exists() and _sha256_or_none(kept) == ref["sha256"]:
            return open_tokenizer(kept)
    if not path.exists() and ref.get("sha256"):
        # Gone from where it was recorded: the first file at a likely place with the recorded hash, else the
        # nearest one found (refused below by its hash), else the recorded path (refused as missing).
        found = [c for c in _moved_tokenizer_candidates(path, Path(owner)) if c.exists()]
        path = next((c for c in found if _sha256_or_none(c) == ref["sha256"]), found[0] if found else path)
    tokenizer = open_tokenizer(path)
    if ref.get("sha256") and tokenizer.sha256 != ref["sha256"]:
        raise InputError(f"{path}: tokenizer changed since {owner} was written (hash differs)")
    return tokenizer


def replaced_tokenizer_path(path: Path | str, sha256: str) -> Path:
    """Where ``prepare --force`` keeps a tokenizer it replaced, under its hash, so that the models trained with it
    still load: ``spm.model`` -> ``spm.<sha256[:12]>.model``, ``hf_tokenizer/`` -> ``hf_tokenizer.<sha256[:12]>/``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.{sha256[:12]}{path.suffix}")


def _sha256_or_none(path: Path) -> str | None:
    try:
        return open_tokenizer(path).sha256
    except InputError:
        return None


def _moved_tokenizer_candidates(recorded: Path, owner: Path) -> Iterator[Path]:
    """Where a tokenizer recorded at a path that is gone may be now, nearest first; the caller checks the hash.

    A folder copied from another machine (a cluster, the GPU command's body) carries the tokenizer inside it or
    beside it under the same name. A run read from another working directory than the one it was started in, or a
    whole runs tree moved, keeps it at the recorded path's tail under one of the owner's ancestors
    (``runs/x/data/en/spm.model`` recorded relative to the directory that holds ``runs/``)."""
    here = owner if owner.is_dir() else owner.parent
    yield here / recorded.name
    yield here.parent / recorded.name
    tails = [Path(*recorded.parts[i:]) for i in range(len(recorded.parts) - 1) if recorded.parts[i] != recorded.anchor]
    ancestors = [here.resolve(), *here.resolve().parents]
    for tail in tails:  # the longest tail first, the most specific match, under the nearest ancestor first
        for ancestor in ancestors:
            yield ancestor / tail


AnyTokenizer = Tokenizer | HFTokenizer
"""Either kind of tokenizer: the two share one interface and one id layout (``data.special``)."""


def open_tokenizer(path: Path | str) -> AnyTokenizer:
    """A SentencePiece model file, or a folder holding a Hugging Face tokenizer."""
    if Path(path).is_dir():
        return HFTokenizer.load(path)
    return Tokenizer.load(path)

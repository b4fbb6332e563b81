"""SentencePiece tokenizers with RoBERTa's special ids reserved identically in every language.

Mini-model adaptation (Marchisio et al., 2023, Sec. 3) swaps the embedding matrix of a trained encoder for one
learned on a new language. The swap only works if every language's vocabulary puts the pieces the model has
learned to treat specially (`<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>`) at the same ids, so every model trained
here reserves fairseq/RoBERTa's ids 0..4 and `Tokenizer.load` refuses a model that does not. A model imported from
Hugging Face keeps its own tokenizer, seen through the same ids by `HFTokenizer` (end of this module).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import itertools
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

from ds_minimodel.errors import InputError

logger = logging.getLogger(__name__)

BOS_ID = 0
PAD_ID = 1
EOS_ID = 2
UNK_ID = 3
MASK_ID = 4
NUM_SPECIAL = 5
SPECIAL_PIECES: dict[int, str] = {BOS_ID: "<s>", PAD_ID: "<pad>", EOS_ID: "</s>", UNK_ID: "<unk>", MASK_ID: "<mask>"}

MODEL_TYPES = ("unigram", "bpe", "char", "word")

# SentencePiece's advice (README, "character_coverage"): 0.9995 for languages with a rich character set such as
# Chinese and Japanese, 1.0 for everything else, where full coverage avoids mapping rare letters to <unk>.
RICH_SCRIPT_COVERAGE = 0.9995
SMALL_SCRIPT_COVERAGE = 1.0
# Han, kana and Hangul: the scripts whose thousands of characters make full coverage waste the vocabulary.
_RICH_SCRIPT_CHARS = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0003134f]"
)
_LETTERS = re.compile(r"[^\W\d_]")
_SAMPLE_WINDOWS = 16
_SAMPLE_WINDOW_BYTES = 64 * 1024


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
) -> dict:
    """The arguments that determine a trained model, as recorded next to it (`<prefix>.json`).

    Callers compare a record with this to decide whether an existing model can be reused. The corpus is
    identified by its absolute path and size rather than a hash: hashing a CC-100 file costs minutes.
    """
    return {
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


def _check_corpus(corpus: Path) -> None:
    if not corpus.is_file():
        raise InputError(f"{corpus}: corpus file not found")
    if corpus.stat().st_size == 0:
        raise InputError(f"{corpus}: corpus file is empty")
    with corpus.open("rb") as f:
        # Before reading it line by line: a binary file may have no line breaks at all.
        if b"\0" in f.read(_SAMPLE_WINDOW_BYTES):
            raise InputError(f"{corpus}: contains NUL bytes; the file looks binary, not UTF-8 text")


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


def _sample_text(corpus: Path) -> str:
    """Up to 1 MiB of text from evenly spaced windows, so that a file whose first megabyte is atypical
    (a licence header, a different language) does not decide the coverage alone."""
    size = corpus.stat().st_size
    step = max(size // _SAMPLE_WINDOWS, 1)
    parts = []
    with corpus.open("rb") as f:
        for start in range(0, size, step):
            f.seek(start)
            parts.append(f.read(_SAMPLE_WINDOW_BYTES).decode("utf-8", errors="ignore"))
            if len(parts) == _SAMPLE_WINDOWS:
                break
    return "".join(parts)


def choose_character_coverage(corpus: Path) -> float:
    """0.9995 when Han/kana/Hangul make up most letters of a sample of the corpus, else 1.0."""
    text = _sample_text(corpus)
    letters = len(_LETTERS.findall(text))
    rich = len(_RICH_SCRIPT_CHARS.findall(text))
    if letters == 0:
        raise InputError(f"{corpus}: no letters found in a sample of the corpus; is it a UTF-8 text file?")
    return RICH_SCRIPT_COVERAGE if rich / letters > 0.5 else SMALL_SCRIPT_COVERAGE


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
) -> Path:
    """Train a SentencePiece model with the reserved special ids; return the path of `<model_prefix>.model`.

    Memory stays bounded on a CC-100-sized corpus: training sees a seeded uniform sample of `input_sentence_size`
    non-blank lines (0: all lines). `character_coverage=None` chooses by script (see `choose_character_coverage`).
    The arguments and the coverage used are recorded in `<model_prefix>.json`; SentencePiece's log goes to
    `<model_prefix>.log`.
    """
    corpus, model_prefix = Path(corpus), Path(model_prefix)
    _check_corpus(corpus)
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
    try:
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
            )
    except RuntimeError as err:
        too_high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", str(err))
        if too_high:
            raise InputError(
                f"{corpus}: vocabulary size {vocab_size} is too large for this corpus (at most "
                f"{too_high.group(2)} pieces can be learned from it); lower --vocab-size or use a bigger corpus"
            ) from None
        raise InputError(f"{corpus}: SentencePiece training failed: {err} (log: {log_path})") from None

    model_path = _sidecar(model_prefix, ".model")
    Tokenizer.load(model_path)  # proves the special ids came out where RoBERTa expects them
    record = {"arguments": arguments, "character_coverage_used": coverage, "sentencepiece": spm.__version__}
    training_record_path(model_path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return model_path


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
                "train the model with ds_minimodel.prepare (or spm options bos_id=0 pad_id=1 eos_id=2 unk_id=3 "
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
    tokenizer = open_tokenizer(ref["path"])
    if ref.get("sha256") and tokenizer.sha256 != ref["sha256"]:
        raise InputError(f"{ref['path']}: tokenizer changed since {owner} was written (hash differs)")
    return tokenizer


# ----------------------------------------------------------------------------------------- Hugging Face tokenizers
# A model imported from a Hugging Face folder (ds_minimodel.hf) keeps the tokenizer it was trained with: WordPiece
# (BERT), byte-level BPE (RoBERTa) or SentencePiece (XLM-R). `HFTokenizer` reads that folder with transformers'
# AutoTokenizer (offline: the folder only) and shows it through the same interface as `Tokenizer`, in OUR id space:
# the five special roles move to the reserved ids 0..4 and every other token keeps its relative order. The import
# permutes the embedding rows the same way (`hf_of_ours`), so the rest of the pipeline (masking, packing, features,
# embedding swaps) needs no case of its own.

HF_TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model",
                      "spiece.model", "tokenizer.model", "sentencepiece.model")
"""The files that make up a Hugging Face tokenizer (config.json: old folders name the tokenizer class only through
the model type there). They are hashed for the tokenizer's identity and copied when a folder is prepared."""
_HF_VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model",
                        "tokenizer.model", "sentencepiece.model")
WORD_START = "\u2581"  # SentencePiece's "▁": the piece starts a word


def hf_tokenizer_sha256(folder: Path) -> str:
    """Identity of the tokenizer in ``folder``: its tokenizer files' names and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(HF_TOKENIZER_FILES):
        path = Path(folder) / name
        if path.is_file():
            digest.update(f"{name}|{path.stat().st_size}|".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def copy_hf_tokenizer(source: Path, target: Path, *, config: bool = True) -> None:
    """Copy a Hugging Face tokenizer's files (`HF_TOKENIZER_FILES`; config.json only with `config`) into `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in HF_TOKENIZER_FILES:
        if (Path(source) / name).is_file() and (config or name != "config.json"):
            shutil.copyfile(Path(source) / name, target / name)

def _piece_style(spec: dict, folder: Path) -> tuple[str, str]:
    """How the tokenizer marks word boundaries, from its tokenizer.json description: ("wordpiece", "##"),
    ("byte_level", "") or ("metaspace", "▁")."""
    model = spec.get("model") or {}
    if model.get("type") == "WordPiece":
        return "wordpiece", model.get("continuing_subword_prefix") or "##"
    parts = []
    for key in ("pre_tokenizer", "decoder"):
        part = spec.get(key) or {}
        parts += part.get("pretokenizers") or part.get("decoders") or [part]
    kinds = {part.get("type"): part for part in parts}
    if "ByteLevel" in kinds:
        return "byte_level", ""
    if "Metaspace" in kinds:
        return "metaspace", kinds["Metaspace"].get("replacement", WORD_START)
    raise InputError(f"{folder}: tokenizer model {model.get('type')!r} marks word boundaries in none of the ways "
                     "understood here (WordPiece '##', byte-level 'Ġ', SentencePiece '▁')")


def sentencepiece_style(tokens: Sequence[str], style: str, marker: str) -> list[str | None]:
    """Each token written as SentencePiece would write the same piece of text, or None where no SentencePiece
    piece can be the same (a byte-level token holding part of a UTF-8 character).

    Overlap initialisation (paper footnote 1) matches a target piece to a source token by string, and the target
    tokenizers here are SentencePiece: a word-initial piece is "▁the", a word-internal one "ing". WordPiece writes
    them "the" and "##ing"; byte-level BPE "Ġthe" and "ing" in its byte alphabet. Punctuation that BERT splits off
    as a word of its own becomes "▁," although SentencePiece usually glues it to the previous word (","): such
    pieces simply do not match, which costs overlap, never correctness.
    """
    if style == "wordpiece":
        return [t[len(marker):] if t.startswith(marker) else WORD_START + t for t in tokens]
    if style == "metaspace":
        return [t.replace(marker, WORD_START) for t in tokens]
    from tokenizers import decoders

    byte_level = decoders.ByteLevel()
    out: list[str | None] = []
    for token in tokens:
        text = byte_level.decode([token])
        out.append(None if "\ufffd" in text else text.replace(" ", WORD_START))
    return out


class HFTokenizer:
    """A Hugging Face tokenizer folder in our id space (see the section comment); build with `HFTokenizer.load`."""

    special_ids: frozenset[int] = frozenset(SPECIAL_PIECES)

    def __init__(self, path: Path, backend: object, sha256: str, hf_of_ours: np.ndarray, pieces: list[str]) -> None:
        self.path = path
        self.sha256 = sha256
        self._backend = backend  # a `tokenizers.Tokenizer`, padding and truncation off
        self.hf_of_ours = hf_of_ours  # (V,) int64: the Hugging Face id of each of our ids
        self.ours_of_hf = np.argsort(hf_of_ours)  # the inverse permutation
        self._pieces = pieces
        self._index = {piece: i for i, piece in enumerate(pieces)}

    @classmethod
    def load(cls, folder: Path | str) -> HFTokenizer:
        folder = Path(folder)
        if not folder.is_dir():
            raise InputError(f"{folder}: not a folder, so not a Hugging Face tokenizer")
        if not any((folder / name).is_file() for name in _HF_VOCABULARY_FILES):
            raise InputError(f"{folder}: no tokenizer vocabulary found (looked for {', '.join(_HF_VOCABULARY_FILES)})")
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise InputError(f"{folder}: reading a Hugging Face tokenizer needs transformers "
                             "(pip install 'ds_minimodel[hf]')") from None
        try:
            # A local folder: transformers reads only its files and never contacts a hub.
            hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as err:  # noqa: BLE001 - whatever transformers raises, the folder is what is wrong
            raise InputError(f"{folder}: transformers cannot load the tokenizer: {type(err).__name__}: {err}") from None
        backend = getattr(hf, "backend_tokenizer", None)
        if backend is None:
            raise InputError(f"{folder}: {type(hf).__name__} has no fast (Rust) tokenizer; save the folder with a "
                             "tokenizer.json (AutoTokenizer.from_pretrained(...).save_pretrained(...))")
        from tokenizers import Tokenizer as RustTokenizer

        # A private copy: a tokenizer.json may switch on padding and truncation (sentence-transformers' folders pad
        # everything to 128 tokens), which must not reach pretraining text or the caller's tokenizer object.
        spec = json.loads(backend.to_str())
        backend = RustTokenizer.from_str(backend.to_str())
        backend.no_padding()
        backend.no_truncation()
        size = len(hf)
        roles = {BOS_ID: ("cls", "bos"), PAD_ID: ("pad",), EOS_ID: ("sep", "eos"), UNK_ID: ("unk",),
                 MASK_ID: ("mask",)}
        special: dict[int, int] = {}
        for ours, names in roles.items():
            found = next((getattr(hf, f"{n}_token_id") for n in names if getattr(hf, f"{n}_token_id") is not None),
                         None)
            if found is None or not 0 <= found < size:
                raise InputError(f"{folder}: the tokenizer has no {'/'.join(names)} token (needed as "
                                 f"{SPECIAL_PIECES[ours]}); every model here uses RoBERTa's five special roles")
            special[ours] = found
        if len(set(special.values())) < NUM_SPECIAL:
            raise InputError(f"{folder}: special roles share a token ({special}); they need five distinct tokens")
        taken = set(special.values())
        hf_of_ours = np.array([special[i] for i in range(NUM_SPECIAL)] + [i for i in range(size) if i not in taken],
                              dtype=np.int64)
        style, marker = _piece_style(spec, folder)
        tokens = hf.convert_ids_to_tokens([int(i) for i in hf_of_ours])
        converted = sentencepiece_style(tokens, style, marker)
        pieces = [SPECIAL_PIECES[i] for i in range(NUM_SPECIAL)]
        seen = set(pieces)
        for ours in range(NUM_SPECIAL, size):
            piece = converted[ours]
            # A token with no SentencePiece spelling, or a second token with the same one (the first keeps it),
            # gets a name that no SentencePiece piece has, so that overlap initialisation passes it over.
            if piece is None or piece in seen:
                piece = f"<hf-only:{int(hf_of_ours[ours])}>"
            seen.add(piece)
            pieces.append(piece)
        return cls(folder, backend, hf_tokenizer_sha256(folder), hf_of_ours, pieces)

    @property
    def vocab_size(self) -> int:
        return len(self.hf_of_ours)

    def _ours(self, hf_ids: Sequence[int]) -> list[int]:
        return self.ours_of_hf[np.asarray(hf_ids, dtype=np.int64)].tolist()

    def encode(self, text: str) -> list[int]:
        return self._ours(self._backend.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._ours(e.ids) for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def encode_flat(self, texts: list[str], *, num_threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """As `Tokenizer.encode_flat`: all ids with `</s>` after each text (int32), and per-text lengths (int64)."""
        if not texts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        encoded = [np.append(np.asarray(e.ids, np.int64), -1)
                   for e in self._backend.encode_batch(texts, add_special_tokens=False)]
        flat = np.concatenate(encoded)
        ends = flat == -1
        ids = np.where(ends, EOS_ID, self.ours_of_hf[np.where(ends, 0, flat)])
        return ids.astype(np.int32), np.fromiter(map(len, encoded), np.int64, len(encoded))

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and the [begin, end) character span of `text` each token came from (for QA answer spans)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        return self._ours(encoding.ids), [tuple(span) for span in encoding.offsets]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._backend.decode(self.hf_of_ours[np.asarray(ids, dtype=np.int64)].tolist(),
                                    skip_special_tokens=False)

    def piece(self, id: int) -> str:
        if not 0 <= id < self.vocab_size:
            raise IndexError(f"id {id} is outside the vocabulary of {self.vocab_size} tokens ({self.path})")
        return self._pieces[id]

    def id(self, piece: str) -> int | None:
        return self._index.get(piece)

    def pieces(self) -> list[str]:
        """Our ids' tokens in SentencePiece spelling (see `sentencepiece_style`), for overlap initialisation."""
        return list(self._pieces)

    def backend_json(self) -> str:
        """The Rust tokenizer as tokenizer.json text (padding and truncation off), for writing it elsewhere."""
        return self._backend.to_str()

    def hf_token(self, id: int) -> str:
        """The folder's own string for our id (e.g. "[CLS]" for BOS_ID in a BERT vocabulary)."""
        return self._backend.id_to_token(int(self.hf_of_ours[id]))

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r}, vocab_size={self.vocab_size}, sha256={self.sha256[:12]}...)"


AnyTokenizer = Tokenizer | HFTokenizer


def open_tokenizer(path: Path | str) -> AnyTokenizer:
    """A SentencePiece model file, or a folder holding a Hugging Face tokenizer."""
    return HFTokenizer.load(path) if Path(path).is_dir() else Tokenizer.load(path)

"""Static token vectors of a prepared corpus: what FOCUS (Dobler and de Melo, 2023) measures similarity between
target pieces in. gensim's FastText trains on the folder's own token stream, one paragraph a sentence, each piece a
word (its character n-grams included), so the vectors belong to exactly the tokenizer the folder was prepared with.

One worker thread, seeded: the same folder and settings give the same vectors on every run and every rank, which
is what lets a resumed Step 2 rebuild its initialisation instead of storing it. The first run to train them keeps
them in the folder (``.static_vectors/<key>.npz``, keyed by the folder's index, the settings and gensim's version;
numpy arrays and a JSON record, nothing pickled), so the other systems' Step 2 over the same target data, and every
resume, read them instead of training again.

Vectors trained elsewhere can be given instead (``given``: a kept ``.npz``, or one ``scripts/gpu_prepare.py`` wrote
for a GPU machine, which has no gensim): they are used only where their record names this very token stream (the
folder's ``meta.json`` but for its paths: ``data_identity``) and these settings, and no gensim is needed then.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ds_minimodel.data.shards import META_FILE, read_meta
from ds_minimodel.errors import InputError, require_file

if TYPE_CHECKING:
    from ds_minimodel.data.streams import TokenShards

logger = logging.getLogger(__name__)
CACHE_DIR = ".static_vectors"
"""Where a prepared folder keeps the static vectors trained on it: hidden, as ``data.prepare`` counts every hidden
entry of a data folder as its own (so do versions of the package from before the cache)."""


@dataclass(frozen=True)
class StaticSettings:
    """FastText's settings (FOCUS trains token-level vectors for 3 epochs; gensim's defaults otherwise)."""

    dim: int = 100
    epochs: int = 3
    window: int = 5
    min_count: int = 5
    """Pieces seen fewer times get no vector; their rows are drawn like a new piece's (FOCUS: 'very rare')."""
    max_tokens: int = 20_000_000
    """Train on at most this many tokens of the folder (from its start): seconds to minutes on one core."""
    seed: int = 1
    rare: str = "drawn"
    """Pieces seen fewer than ``min_count`` times: ``drawn``, no vector (FOCUS's rule); ``ngrams``, FastText's vector
    from the piece's character n-grams, where the model learned any of them (a small corpus, whose rows would
    otherwise be mostly drawn)."""

    def key(self) -> dict[str, Any]:
        """The settings as the cache key and the record name them (``rare`` only when not the default, so vectors
        kept before it existed are still found)."""
        return {k: v for k, v in asdict(self).items() if not (k == "rare" and v == "drawn")}


RARE = ("drawn", "ngrams")

MIN_CHARACTERS = 5_000
"""The fewest characters (spaces aside) a corpus needs for static vectors: FastText keeps only pieces seen
``min_count`` (5) times, and in less than about a thousand words of English (or as many characters of a script
written without spaces) almost none is (a 3-line corpus: none, and gensim fails). Characters, not words: Chinese,
Japanese and Khmer put no spaces between words."""


def check_enough_text(corpus: Path, where: str) -> None:
    """Refuse, before any work, a corpus too small for static vectors (reads up to ``MIN_CHARACTERS``)."""
    count = 0
    with Path(corpus).open(encoding="utf-8", errors="replace") as text:
        for line in text:
            count += sum(not ch.isspace() for ch in line)
            if count >= MIN_CHARACTERS:
                return
    raise InputError(f"{corpus}: {count:,} characters, too little text for static vectors ({where}: FOCUS and "
                     f"WECHSEL need at least {MIN_CHARACTERS:,}); give the language more text, or use init overlap")


def paragraphs(shards: TokenShards, pieces: list[str], max_tokens: int) -> Iterator[list[str]]:
    """The folder's stored lines as lists of piece strings, up to ``max_tokens`` tokens in all."""
    lines = np.asarray(shards.lines)
    end = int(np.searchsorted(lines, min(max_tokens, shards.num_tokens), side="right")) - 1
    for i in range(max(end, 0)):
        ids = shards.tokens(int(lines[i]), int(lines[i + 1]))
        if ids.size:
            yield [pieces[int(t)] for t in ids]


PATH_FIELDS = ("corpus", "tokenizer")
"""The fields of a prepared folder's ``meta.json`` that name files on the machine that prepared it."""


def data_identity(data_dir: Path | str) -> str:
    """SHA-256 of the folder's ``meta.json`` but for its paths: the same on every machine that prepares the same
    text with the same tokenizer (the corpus's and the tokenizer's hashes, the counts, the format are in it)."""
    meta = read_meta(Path(data_dir) / META_FILE)
    if meta is None:
        raise InputError(f"{data_dir}: not a prepared folder (no {META_FILE})")
    return _identity(meta)


def _identity(meta: dict[str, Any]) -> str:
    kept = {k: v for k, v in meta.items() if k not in PATH_FIELDS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def read_vectors_file(path: Path | str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Given static vectors (``given``), whole: InputError naming the file where they are not."""
    found = _read_kept(require_file(path, "static vectors file"))
    if found is None:
        raise InputError(f"{path}: not static vectors (an .npz of vectors, known and a record whose hash matches "
                         "them, as a run keeps in a prepared folder's .static_vectors/), or damaged")
    if "data_sha256" not in found[2]:
        raise InputError(f"{path}: static vectors kept before their record named the text they were trained on "
                         "(no data_sha256); train them again with this version")
    return found


def check_given(path: Path | str, corpus: Path | str, settings: StaticSettings, where: str) -> None:
    """Before any work: given vectors that are whole, made for rare pieces as ``settings`` says, on a text of
    ``corpus``'s size (the text's hash and the tokenizer are compared when Step 2 opens the prepared folder)."""
    record = read_vectors_file(path)[2]
    if record.get("rare", "drawn") != settings.rare:
        raise InputError(f"{path}: static vectors with rare pieces {record.get('rare', 'drawn')}, where this run "
                         f"has rare_vectors {settings.rare} ({where})")
    size = Path(corpus).stat().st_size
    if record.get("corpus_bytes") != size:
        raise InputError(f"{path}: static vectors trained on a text of {record.get('corpus_bytes')} bytes, not on "
                         f"{corpus} ({size:,} bytes) ({where})")


def _given_vectors(path: Path, data_dir: Path, pieces: list[str], settings: StaticSettings
                   ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Given vectors, where made for this folder's very tokens (FastText's other settings and seed are theirs, as
    their record says; rare pieces must be treated as ``settings`` says)."""
    vectors, known, record = read_vectors_file(path)
    identity = data_identity(data_dir)
    if record["data_sha256"] != identity:
        raise InputError(f"{path}: static vectors trained on other text or with another tokenizer than {data_dir}'s "
                         f"(their data_sha256 {str(record['data_sha256'])[:12]}, the folder's {identity[:12]})")
    if record.get("rare", "drawn") != settings.rare or vectors.ndim != 2 or len(vectors) != len(pieces) \
            or known.shape != (len(pieces),) or known.dtype != bool:
        raise InputError(f"{path}: static vectors of shape {vectors.shape}, rare pieces {record.get('rare', 'drawn')}; "
                         f"this run needs {len(pieces):,} rows, rare pieces {settings.rare}")
    return vectors, known, {"data": str(data_dir.resolve()), "given": str(path.resolve()), **record}


def train_static_vectors(data_dir: Path | str, pieces: list[str], settings: StaticSettings = StaticSettings(), *,
                         cache: bool = True, given: Path | str | None = None,
                         say: Callable[[str], None] = lambda line: None
                         ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(vectors (V, dim) float32, known (V,) bool, record): one vector per piece of the folder's tokenizer, known
    where FastText kept the piece (seen at least ``min_count`` times); the record names the folder, its hash and
    the settings, for the checkpoint that used them. ``cache``: read them from the folder where an earlier call
    kept them, else train them and keep them there (a folder that cannot be written to is only read). ``given``:
    vectors trained before on this folder's very tokens, used as they are (no gensim needed); InputError where
    they were trained on anything else."""
    if given is not None:
        return _given_vectors(Path(given), Path(data_dir), pieces, settings)
    try:
        from gensim.models import FastText
    except ImportError:
        raise InputError("static vectors (--init focus or wechsel) need gensim: pip install gensim, or the "
                         "package's [focus] extra") from None
    import gensim

    # Here, not at the top: the streams module imports torch, and the pipeline's settings (StaticSettings) are
    # also read by ``ds-minimodel analysis``, which never loads it.
    from ds_minimodel.data.streams import TokenShards

    shards = TokenShards.open(data_dir)
    if shards.vocab_size != len(pieces):
        raise InputError(f"{data_dir}: prepared with a vocabulary of {shards.vocab_size:,} pieces, the tokenizer "
                         f"given has {len(pieces):,}")
    meta_sha256 = hashlib.sha256((Path(data_dir) / META_FILE).read_bytes()).hexdigest()
    if settings.rare not in RARE:
        raise InputError(f"static vectors for rare pieces: one of {', '.join(RARE)}, not {settings.rare!r}")
    key = {"data_meta_sha256": meta_sha256, "tokenizer_sha256": shards.tokenizer_sha256, "gensim": gensim.__version__,
           **settings.key()}
    kept = Path(data_dir) / CACHE_DIR / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
                                         + ".npz")
    found = _read_kept(kept) if cache else None
    if found is not None:
        vectors, known, record = found
        return vectors, known, {"data": str(Path(data_dir).resolve()), **record}
    corpus = list(paragraphs(shards, pieces, settings.max_tokens))
    if not corpus:
        raise InputError(f"{data_dir}: no text to train static vectors on")
    say(f"training static vectors (FastText, {settings.epochs} epochs over {sum(map(len, corpus)):,} tokens of "
        f"{data_dir}, one core): a minute or more" + (f"; kept in {kept.parent} for the next run" if cache else ""))
    model = FastText(vector_size=settings.dim, window=settings.window, min_count=settings.min_count,
                     epochs=settings.epochs, seed=settings.seed, workers=1, sg=1)
    model.build_vocab(corpus_iterable=corpus)
    if not model.wv.key_to_index:  # gensim would fail in train() with "you must first build vocabulary"
        raise InputError(f"{data_dir}: too little text for static vectors: no piece occurs {settings.min_count} times "
                         f"in its {sum(map(len, corpus)):,} tokens; give the language more text, or use init overlap")
    model.train(corpus_iterable=corpus, total_examples=len(corpus), epochs=settings.epochs)
    known = np.array([piece in model.wv.key_to_index for piece in pieces])
    vectors = np.zeros((len(pieces), settings.dim), dtype=np.float32)
    for i in np.flatnonzero(known):
        vectors[i] = model.wv[pieces[i]]
    if settings.rare == "ngrams":  # a rare piece's vector from its n-grams (zero where none was learned)
        for i in np.flatnonzero(~known):
            vectors[i] = model.wv[pieces[i]]
            known[i] = bool(np.any(vectors[i]))
    meta = read_meta(Path(data_dir) / META_FILE) or {}
    record = {"data_meta_sha256": meta_sha256, "data_sha256": _identity(meta),
              "corpus_sha256": meta.get("corpus_sha256"), "corpus_bytes": meta.get("corpus_bytes"),
              "tokenizer_sha256": shards.tokenizer_sha256, "paragraphs": len(corpus), "tokens": sum(map(len, corpus)),
              "known": int(known.sum()),
              "gensim": gensim.__version__, "vectors_sha256": hashlib.sha256(vectors.tobytes()).hexdigest(),
              **settings.key()}
    if cache:
        keep_vectors(kept, vectors, known, record)
    return vectors, known, {"data": str(Path(data_dir).resolve()), **record}


def _read_kept(path: Path) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
    """Vectors an earlier call kept, if they are there and whole (their hash is in their record)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            vectors, known, record = stored["vectors"], stored["known"], json.loads(str(stored["record"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # none kept, or a damaged file: train again
        return None
    if not isinstance(record, dict) or hashlib.sha256(vectors.tobytes()).hexdigest() != record.get("vectors_sha256"):
        return None
    return vectors, known, record


def keep_vectors(path: Path, vectors: np.ndarray, known: np.ndarray, record: dict[str, Any]) -> None:
    """Write them beside the data, whole or not at all (ranks training the same vectors may race: same bytes)."""
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}.npz")
    try:
        path.parent.mkdir(exist_ok=True)
        np.savez(tmp, vectors=vectors, known=known, record=np.array(json.dumps(record)))
        os.replace(tmp, path)
    except OSError as err:  # a read-only or full data folder: the vectors are used, not kept
        logger.info("%s: static vectors not kept (%s)", path.parent, err)
        tmp.unlink(missing_ok=True)

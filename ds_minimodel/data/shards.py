"""Corpus -> memory-mapped token shards (binarising, reading).

A prepared folder (what `prepare_corpus` writes) holds, like fairseq's binarisation of CC-100:

    tokens_00000.bin, ...  every stored line's ids back to back, raw uint16 (uint32 when the vocabulary exceeds
                           65,535 pieces); a paragraph is stored as its ids followed by `</s>`, and each document
                           boundary (a blank line) as one lone `</s>`
    lines.npy              int64 token offset of every stored line, plus the total at the end (num_lines + 1)
    docs.npy               int64 index into lines of each document's first line, plus num_lines (num_documents + 1)
    meta.json              written last: a folder without it is incomplete

Pretraining reads the folder through `TokenShards` -> `ds_minimodel.data.streams` (`PackedDataset`, RoBERTa's
FULL-SENTENCES packing -> `MLMBatchStream`, BERT's dynamic 80/10/10 masking in a per-rank order that resumes exactly).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import psutil
from tqdm import tqdm

from ds_minimodel.config import file_sha256, write_json
from ds_minimodel.data.pool import ordered_map
from ds_minimodel.data.tokenizer import EOS_ID, AnyTokenizer, open_tokenizer
from ds_minimodel.errors import InputError, require_file

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
META_FILE = "meta.json"
LINES_FILE = "lines.npy"
DOCS_FILE = "docs.npy"
DEFAULT_SHARD_TOKENS = 64 * 2**20  # 128 MiB per shard at uint16

# Raw text sent to a worker per task. Large enough to amortise pickling, small enough that 2 x workers tasks in
# flight stay a few MiB.
_BLOCK_BYTES = 1 << 20
# Per-line results of a worker (`_encode_block`): a positive value is a paragraph's length including its `</s>`.
_BLANK, _INVALID_UTF8, _NO_TOKENS = 0, -1, -2
# A file is called binary once this many lines were read and most of them were not UTF-8.
_BINARY_CHECK_LINES = 1000


def _shard_name(index: int) -> str:
    return f"tokens_{index:05d}.bin"


def _available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


# ----------------------------------------------------------------------------------------------------------------
# Preparation: reading, encoding in worker processes, writing shards


def _line_too_long(path: Path, line_no: int, max_line_bytes: int) -> InputError:
    return InputError(
        f"{path}: line {line_no:,} is longer than {max_line_bytes:,} bytes; the file looks binary or has lost its "
        "line breaks (raise max_line_bytes if such paragraphs are real)"
    )


def _read_blocks(f: BinaryIO, path: Path, digest: hashlib._Hash, max_line_bytes: int) -> Iterator[bytes]:
    """Yield ~_BLOCK_BYTES blocks of whole lines, hashing everything read and rejecting binary input.

    The main process only moves blocks (workers split and decode them), so that it is not the bottleneck in
    front of many workers. Reads are bounded, so a file without line breaks is caught at `max_line_bytes` instead
    of being read into memory whole."""
    pending = b""  # the start of a line continued in the next read
    line_no = 0  # lines before `pending`
    while data := f.read(_BLOCK_BYTES):
        digest.update(data)
        if (nul := data.find(b"\0")) >= 0:
            line = line_no + pending.count(b"\n") + data.count(b"\n", 0, nul) + 1
            raise InputError(f"{path}: line {line:,} contains a NUL byte; the file looks binary, not UTF-8 text")
        block = pending + data
        cut = block.rfind(b"\n") + 1
        block, pending = block[:cut], block[cut:]
        if len(pending) > max_line_bytes:
            raise _line_too_long(path, line_no + block.count(b"\n") + 1, max_line_bytes)
        if block:
            newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
            too_long = np.flatnonzero(np.diff(newlines, prepend=-1) - 1 > max_line_bytes)
            if too_long.size:
                raise _line_too_long(path, line_no + int(too_long[0]) + 1, max_line_bytes)
            line_no += newlines.size
            yield block
    if pending:  # a last line without a line break
        yield pending


def _encode_block(tokenizer: AnyTokenizer, block: bytes, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Encode a block of lines: (ids of its paragraphs, each followed by `</s>`; one code per line, either a
    paragraph's length including `</s>` or _BLANK / _INVALID_UTF8 / _NO_TOKENS)."""
    # Split on "\n" only, as the file was cut: str.splitlines would also split at \x1c, \u2028 and others.
    try:
        texts = block.decode("utf-8").removesuffix("\n").split("\n")  # the common case: the whole block is valid
    except UnicodeDecodeError:
        texts = [_decode_or_none(raw) for raw in block.removesuffix(b"\n").split(b"\n")]
    codes = np.full(len(texts), _BLANK, np.int64)
    paragraphs: list[str] = []
    rows: list[int] = []
    for row, text in enumerate(texts):
        if text is None:
            codes[row] = _INVALID_UTF8
        elif text and not text.isspace():
            paragraphs.append(text.removesuffix("\r"))
            rows.append(row)
    ids, lengths = tokenizer.encode_flat(paragraphs)
    # A non-blank line can normalise to nothing (e.g. only zero-width characters): `</s>` alone would read as a
    # document boundary, so it is dropped instead.
    empty = lengths == 1
    if empty.any():
        ids = np.delete(ids, np.cumsum(lengths)[empty] - 1)
        lengths[empty] = _NO_TOKENS
    codes[rows] = lengths
    return ids.astype(dtype), codes


def _decode_or_none(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


_worker_tokenizer: AnyTokenizer | None = None
_worker_dtype: np.dtype | None = None


def _init_worker(tokenizer_path: str, dtype: str) -> None:
    global _worker_tokenizer, _worker_dtype
    _worker_tokenizer = open_tokenizer(tokenizer_path)
    _worker_dtype = np.dtype(dtype)


def _encode_in_worker(block: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    assert _worker_tokenizer is not None and _worker_dtype is not None
    return *_encode_block(_worker_tokenizer, block, _worker_dtype), len(block)


def _encoded_blocks(
    blocks: Iterator[bytes], tokenizer_path: Path, dtype: np.dtype, workers: int
) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """Encode blocks in worker processes (``pool.ordered_map``), yielding (ids, codes, bytes of the block) in input
    order. The workers load the tokenizer themselves: SentencePiece, or a Hugging Face tokenizer whose Rust thread
    pool this process has not started (it loaded the tokenizer but encoded nothing), so forking them is safe."""
    if workers == 1:
        tokenizer = open_tokenizer(tokenizer_path)
        for block in blocks:
            yield *_encode_block(tokenizer, block, dtype), len(block)
        return
    yield from ordered_map(_encode_in_worker, blocks, workers, initializer=_init_worker,
                           initargs=(str(tokenizer_path), dtype.str))


class _ShardWriter:
    """Appends token arrays to tokens_NNNNN.bin files of exactly `shard_tokens` tokens (the last one shorter)."""

    def __init__(self, directory: Path, shard_tokens: int) -> None:
        self.directory = directory
        self.shard_tokens = shard_tokens
        self.shards: list[dict] = []
        self._file = None

    def write(self, tokens: np.ndarray) -> None:
        while tokens.size:
            if self._file is None or self.shards[-1]["num_tokens"] == self.shard_tokens:
                self._open_next()
            room = self.shard_tokens - self.shards[-1]["num_tokens"]
            piece, tokens = tokens[:room], tokens[room:]
            self._file.write(piece.tobytes())
            self.shards[-1]["num_tokens"] += piece.size

    def _open_next(self) -> None:
        self.close()
        name = _shard_name(len(self.shards))
        self._file = (self.directory / name).open("wb")
        self.shards.append({"file": name, "num_tokens": 0})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class _Int64Spool:
    """An int64 array of unknown final length, appended on disk and turned into a .npy at the end.

    lines.npy holds one entry per paragraph (billions for CC-100 English), so it cannot be collected in memory."""

    def __init__(self, raw_path: Path) -> None:
        self.raw_path = raw_path
        self._file = raw_path.open("wb")
        self.count = 0

    def append(self, values: np.ndarray) -> None:
        self._file.write(values.astype(np.int64, copy=False).tobytes())
        self.count += values.size

    def save(self, npy_path: Path, block: int = 1 << 24) -> None:
        self._file.close()
        out = np.lib.format.open_memmap(npy_path, mode="w+", dtype=np.int64, shape=(self.count,))
        if self.count:
            raw = np.memmap(self.raw_path, dtype=np.int64, mode="r", shape=(self.count,))
            for start in range(0, self.count, block):
                out[start : start + block] = raw[start : start + block]
            del raw
        out.flush()
        del out
        self.raw_path.unlink()


class _Binariser:
    """Turns per-line worker results into the stored token stream, lines.npy and docs.npy.

    The state carried from one block to the next is whether the last text line was a paragraph: a blank line
    after a paragraph closes the document and is stored as a lone `</s>`; blank lines after that (or at the start
    of the file) carry no boundary and are dropped, so no document is empty."""

    def __init__(self, directory: Path, shard_tokens: int) -> None:
        self.shards = _ShardWriter(directory, shard_tokens)
        self.lines = _Int64Spool(directory / "lines.i64")
        self.docs = _Int64Spool(directory / "docs.i64")
        self.lines.append(np.zeros(1, np.int64))
        self.num_tokens = 0
        self.num_paragraphs = 0
        self.skipped_invalid_utf8 = 0
        self.skipped_no_tokens = 0
        self._last_was_paragraph = False

    @property
    def num_lines(self) -> int:
        return self.lines.count - 1

    def add(self, ids: np.ndarray, codes: np.ndarray) -> None:
        self.skipped_invalid_utf8 += int(np.count_nonzero(codes == _INVALID_UTF8))
        self.skipped_no_tokens += int(np.count_nonzero(codes == _NO_TOKENS))
        text = codes[codes >= 0]  # paragraphs (> 0) and blank lines (0), in file order
        if not text.size:
            return
        is_paragraph = text > 0
        previous_is_paragraph = np.concatenate(([self._last_was_paragraph], is_paragraph[:-1]))
        boundary = ~is_paragraph & previous_is_paragraph
        self._last_was_paragraph = bool(is_paragraph[-1])

        # Each kept boundary's `</s>` goes after the paragraph tokens that precede it in this block.
        paragraph_tokens = np.where(is_paragraph, text, 0)
        paragraph_tokens_before = np.cumsum(paragraph_tokens) - paragraph_tokens
        tokens = np.insert(ids, paragraph_tokens_before[boundary], np.asarray(EOS_ID, ids.dtype))
        stored = is_paragraph | boundary
        sizes = np.where(is_paragraph, text, 1)[stored]
        # A document starts at a paragraph that follows a boundary, or at the first paragraph of the file.
        stored_is_paragraph = is_paragraph[stored]
        doc_start = stored_is_paragraph & ~previous_is_paragraph[stored]

        self.docs.append(self.num_lines + np.flatnonzero(doc_start))
        self.lines.append(self.num_tokens + np.cumsum(sizes))
        self.shards.write(tokens)
        self.num_tokens += tokens.size
        self.num_paragraphs += int(np.count_nonzero(is_paragraph))

    def finish(self) -> list[dict]:
        self.shards.close()
        self.docs.append(np.asarray([self.num_lines]))
        self.lines.save(self.shards.directory / LINES_FILE)
        self.docs.save(self.shards.directory / DOCS_FILE)
        return self.shards.shards


def read_meta(path: Path) -> dict | None:
    """The meta.json at `path`, or None if it does not exist; InputError if it cannot be read."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: unreadable prepared-data metadata ({err})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: prepared-data metadata is not a JSON object")
    return meta


def _existing_matches(meta: dict, corpus: Path, tokenizer: AnyTokenizer) -> str | None:
    """None when `meta` describes this corpus content and tokenizer, else what differs.

    Cheap checks first: the corpus is only hashed when its size already matches."""
    if meta.get("format_version") != FORMAT_VERSION:
        return f"format version {meta.get('format_version')} (this code writes {FORMAT_VERSION})"
    if meta.get("tokenizer_sha256") != tokenizer.sha256:
        return f"tokenizer {meta.get('tokenizer')} (sha256 {str(meta.get('tokenizer_sha256'))[:12]}...)"
    if meta.get("corpus_bytes") != corpus.stat().st_size or meta.get("corpus_sha256") != file_sha256(corpus):
        return f"corpus {meta.get('corpus')} (sha256 {str(meta.get('corpus_sha256'))[:12]}...)"
    return None


def _install(staging: Path, out_dir: Path, shards: list[dict]) -> None:
    """Move the finished files from `staging` into `out_dir`, meta.json last.

    `out_dir` may hold other files (the CLI keeps the tokenizer there), so it is not replaced whole; the old
    meta.json is removed first so that the folder never looks complete while old and new files are mixed."""
    if not out_dir.exists():
        os.replace(staging, out_dir)
        return
    (out_dir / META_FILE).unlink(missing_ok=True)
    keep = {shard["file"] for shard in shards}
    for stale in out_dir.glob("tokens_*.bin"):
        if stale.name not in keep:
            stale.unlink()
    for name in [*keep, LINES_FILE, DOCS_FILE, META_FILE]:
        os.replace(staging / name, out_dir / name)


def _print_summary(meta: dict, out_dir: Path, skipped: bool) -> None:
    what = "already prepared, nothing to do" if skipped else "prepared"
    print(
        f"{out_dir}: {what}. {meta['corpus']} -> {meta['num_tokens']:,} tokens ({meta['dtype']}, "
        f"{len(meta['shards'])} shard(s)) in {meta['num_paragraphs']:,} paragraphs and {meta['num_documents']:,} "
        f"documents, vocabulary {meta['vocab_size']:,} from {meta['tokenizer']}; skipped "
        f"{meta['skipped_invalid_utf8']:,} lines that were not UTF-8 and {meta['skipped_no_tokens']:,} that "
        "encoded to nothing."
    )


def _check_mostly_text(corpus: Path, binariser: _Binariser) -> None:
    if binariser.skipped_invalid_utf8 > binariser.num_paragraphs:
        raise InputError(
            f"{corpus}: {binariser.skipped_invalid_utf8:,} lines are not valid UTF-8 against "
            f"{binariser.num_paragraphs:,} that are; the file looks binary or is in another encoding"
        )


def prepare_corpus(
    corpus: Path,
    out_dir: Path,
    tokenizer_path: Path,
    *,
    workers: int | None = None,
    force: bool = False,
    max_line_bytes: int = 1_000_000,
    progress: bool = True,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
) -> dict:
    """Encode a CC-100-layout corpus into `out_dir` (layout in the module docstring); return meta.json's content.

    Streams the corpus (never read whole) through `workers` encoding processes (default: the cores this
    process may use). Re-running with the same corpus content and tokenizer does nothing unless `force`.
    """
    corpus, out_dir, tokenizer_path = Path(corpus), Path(out_dir), Path(tokenizer_path)
    require_file(corpus, "corpus file")
    corpus_bytes = corpus.stat().st_size
    if corpus_bytes == 0:
        raise InputError(f"{corpus}: corpus file is empty")
    tokenizer = open_tokenizer(tokenizer_path)
    workers = _available_cores() if workers is None else workers
    if workers < 1:
        raise InputError(f"workers must be at least 1, got {workers}")

    existing = None if force else read_meta(out_dir / META_FILE)
    if existing is not None:
        difference = _existing_matches(existing, corpus, tokenizer)
        if difference is None:
            logger.info("%s already holds %s encoded with %s; skipping (force=True rebuilds it)",
                        out_dir, corpus, tokenizer_path)
            _print_summary(existing, out_dir, skipped=True)
            return existing
        raise InputError(
            f"{out_dir / META_FILE}: this folder already holds data prepared from {difference}, not from {corpus} "
            f"with tokenizer {tokenizer_path}; pass --force (force=True) to overwrite it or choose another output "
            "folder"
        )

    dtype = _token_dtype(tokenizer.vocab_size)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # A sibling on the same file system, so that the final renames are atomic. Not tempfile.mkdtemp: its 0700
    # mode would become the prepared folder's when the staging folder is renamed into place.
    staging = out_dir.parent / f".{out_dir.name}.tmp-{socket.gethostname()}-{os.getpid()}"
    _remove_stale_staging(out_dir)
    staging.mkdir()
    try:
        binariser = _Binariser(staging, shard_tokens)
        digest = hashlib.sha256()
        with corpus.open("rb") as f, tqdm(total=corpus_bytes, unit="B", unit_scale=True, disable=not progress,
                                          desc=f"encoding {corpus.name}") as bar:
            blocks = _read_blocks(f, corpus, digest, max_line_bytes)
            # closed here, not whenever it is collected: its pool's workers end before anything else does
            with contextlib.closing(_encoded_blocks(blocks, tokenizer.path, dtype, workers)) as encoded:
                for ids, codes, size in encoded:
                    binariser.add(ids, codes)
                    bar.update(size)
                    lines_seen = binariser.num_paragraphs + binariser.skipped_invalid_utf8
                    if lines_seen >= _BINARY_CHECK_LINES:
                        _check_mostly_text(corpus, binariser)
        shards = binariser.finish()
        _check_mostly_text(corpus, binariser)
        if binariser.num_paragraphs == 0:
            raise InputError(f"{corpus}: no text found (only blank lines or lines that are not UTF-8)")
        meta = {
            "format_version": FORMAT_VERSION,
            "corpus": str(corpus.resolve()),
            "corpus_bytes": corpus_bytes,
            "corpus_sha256": digest.hexdigest(),
            "tokenizer": str(tokenizer.path.resolve()),
            "tokenizer_sha256": tokenizer.sha256,
            "vocab_size": tokenizer.vocab_size,
            "dtype": dtype.name,
            "num_tokens": binariser.num_tokens,
            # Stored lines: paragraphs plus one lone `</s>` per document boundary; len(lines.npy) - 1.
            "num_lines": binariser.num_lines,
            "num_paragraphs": binariser.num_paragraphs,
            "num_documents": binariser.docs.count - 1,
            "skipped_invalid_utf8": binariser.skipped_invalid_utf8,
            "skipped_no_tokens": binariser.skipped_no_tokens,
            "shards": shards,
        }
        write_json(staging / META_FILE, meta)
        _install(staging, out_dir, shards)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _print_summary(meta, out_dir, skipped=False)
    return meta


def _remove_stale_staging(out_dir: Path) -> None:
    """Remove the staging folders that runs killed outright (SIGKILL, a lost node: their cleanup never ran) left
    beside `out_dir`: at CC-100's size each holds gigabytes. One is stale when the process named in it, on this host,
    is gone or is this one (a reused process id); another host's, or a live process's, is left alone."""
    host = socket.gethostname()
    for folder in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        owner, _, pid = folder.name.split(".tmp-", 1)[1].rpartition("-")
        if owner not in (host, "") or not pid.isdigit():  # "": named by a version that gave no host
            continue
        if int(pid) == os.getpid() or not psutil.pid_exists(int(pid)):
            logger.info("%s: removing what a killed run left (process %s is gone)", folder, pid)
            shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------------
# Reading: shards, packing, masking, batches

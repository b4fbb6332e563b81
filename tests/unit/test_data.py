"""Corpus preparation, token shards, FULL-SENTENCES packing, masking and the per-rank batch stream, plus the
prepare CLI. One small synthetic corpus and one real SentencePiece model per module keep the file fast."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ds_minimodel.data import shards as data
from ds_minimodel.data import streams
from ds_minimodel.data.prefetch import Prefetcher
from ds_minimodel.data.prepare import main
from ds_minimodel.data.shards import prepare_corpus
from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards, mask_tokens
from ds_minimodel.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    IGNORE_INDEX,
    MASK_ID,
    NUM_SPECIAL,
    PAD_ID,
    Tokenizer,
    train_sentencepiece,
)
from ds_minimodel.errors import InputError, TrainingError
from tests.integration.conftest import run_cmd

VOCAB_SIZE = 300
SHARD_TOKENS = 5000  # several shards, so reads cross shard boundaries


def write_corpus(path: Path, *, documents: int, seed: int) -> Path:
    """CC-100 layout: paragraphs of pseudo-words, one per line, a blank line after each document. A few
    paragraphs run to hundreds of tokens so that packing must cut them."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "bé", "gü", "dra", "pel", "qua", "stor"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(600)]
    with path.open("w", encoding="utf-8") as f:
        for _ in range(documents):
            for _ in range(rng.randint(1, 5)):
                length = rng.randint(1, 150) if rng.random() < 0.1 else rng.randint(1, 30)
                f.write(" ".join(rng.choices(words, k=length)) + ".\n")
            f.write("\n")
    return path


def expected_layout(corpus: Path, tokenizer: Tokenizer) -> tuple[list[int], list[int], list[int]]:
    """The stored stream, line offsets and document starts, computed line by line: the test's oracle."""
    tokens: list[int] = []
    lines = [0]
    docs: list[int] = []
    last_was_paragraph = False
    with corpus.open("rb") as f:
        for raw in f:
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                continue
            if text.strip():
                if not last_was_paragraph:
                    docs.append(len(lines) - 1)
                tokens += tokenizer.encode(text) + [EOS_ID]
            elif last_was_paragraph:
                tokens.append(EOS_ID)  # the document boundary
            else:
                continue  # a blank line that closes no document
            lines.append(len(tokens))
            last_was_paragraph = bool(text.strip())
    return tokens, lines, docs + [len(lines) - 1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", documents=250, seed=0)


@pytest.fixture(scope="module")
def model(corpus: Path) -> Path:
    return train_sentencepiece(corpus, corpus.parent / "spm", vocab_size=VOCAB_SIZE, num_threads=1)


@pytest.fixture(scope="module")
def prepared(corpus: Path, model: Path) -> Path:
    out = corpus.parent / "prepared"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data, "_BLOCK_BYTES", 4096)  # many blocks through the worker pool
        prepare_corpus(corpus, out, model, workers=2, shard_tokens=SHARD_TOKENS, progress=False)
    return out


@pytest.fixture(scope="module")
def shards(prepared: Path) -> TokenShards:
    return TokenShards.open(prepared)


# ----------------------------------------------------------------------------------------------------------------
# prepare_corpus


def test_prepared_layout_reproduces_the_corpus(corpus: Path, model: Path, prepared: Path, shards: TokenShards) -> None:
    tokenizer = Tokenizer.load(model)
    tokens, lines, docs = expected_layout(corpus, tokenizer)
    assert shards.tokens(0, shards.num_tokens).tolist() == tokens
    assert shards.lines.tolist() == lines
    assert shards.docs.tolist() == docs
    meta = shards.meta
    assert meta["num_tokens"] == len(tokens)
    assert meta["num_documents"] == 250
    assert meta["num_lines"] == meta["num_paragraphs"] + 250  # every document here ends with a blank line
    assert meta["dtype"] == "uint16" and shards.vocab_size == VOCAB_SIZE
    assert meta["corpus_sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert shards.tokenizer_sha256 == tokenizer.sha256
    assert meta["skipped_invalid_utf8"] == 0
    assert [s["num_tokens"] for s in meta["shards"][:-1]] == [SHARD_TOKENS] * (len(meta["shards"]) - 1)
    assert sorted(p.name for p in prepared.iterdir()) == sorted(
        [s["file"] for s in meta["shards"]] + ["lines.npy", "docs.npy", "meta.json"])
    assert not list(prepared.parent.glob(".prepared.tmp-*"))  # the staging folder is gone


def test_staging_folders_of_killed_runs_on_this_host_are_removed_and_no_other(tmp_path: Path, corpus: Path,
                                                                              model: Path) -> None:
    """A run killed outright leaves its staging folder (gigabytes at scale); the next run removes it, but not one of a
    process still running, another host's, or a stray folder named alike."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    host = socket.gethostname()
    stale = [tmp_path / f".out.tmp-{host}-{gone}", tmp_path / f".out.tmp-{gone}"]  # the second: no host in its name
    kept = [tmp_path / f".out.tmp-{host}-{os.getppid()}", tmp_path / f".out.tmp-elsewhere-{gone}",
            tmp_path / ".out.tmp-notes"]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "tokens_00000.bin").write_bytes(b"\0" * 64)
    prepare_corpus(corpus, tmp_path / "out", model, workers=1, progress=False)
    assert [f.exists() for f in stale] == [False, False] and all(f.exists() for f in kept)


def test_layout_edge_cases(tmp_path: Path, model: Path) -> None:
    corpus = tmp_path / "edges.txt"
    corpus.write_bytes(
        b"\n\n"                        # blank lines before any document: no boundary
        b"ka lo mi.\n"
        b"\xff\xfe not utf-8\n"        # skipped, counted, and not a boundary
        b"ne ru.\r\n"                  # Windows line ending
        b"\n   \n\n"                   # one boundary, however many blank lines
        b"sa ti \xc3\xa9.\n"
        b"\x80\n"
        b"\n"
        b"vo ze"                       # last document: no blank line, no final newline
    )
    summary = prepare_corpus(corpus, tmp_path / "out", model, workers=1, progress=False)
    shards = TokenShards.open(tmp_path / "out")
    tokens, lines, docs = expected_layout(corpus, Tokenizer.load(model))
    assert shards.tokens(0, shards.num_tokens).tolist() == tokens
    assert (shards.lines.tolist(), shards.docs.tolist()) == (lines, docs)
    assert summary["skipped_invalid_utf8"] == 2
    assert (summary["num_paragraphs"], summary["num_documents"], summary["num_lines"]) == (4, 3, 6)
    assert docs == [0, 3, 5, 6]


def test_rerun_is_a_noop_and_force_rewrites(tmp_path: Path, model: Path) -> None:
    corpus = write_corpus(tmp_path / "c.txt", documents=20, seed=1)
    out = tmp_path / "out"
    first = prepare_corpus(corpus, out, model, workers=1, progress=False)

    def stamps() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in out.iterdir()}

    before = stamps()
    assert prepare_corpus(corpus, out, model, workers=1, progress=False) == first
    assert stamps() == before
    assert prepare_corpus(corpus, out, model, workers=1, progress=False, force=True) == first
    after = stamps()
    assert after.keys() == before.keys()
    assert all(after[name][1] != before[name][1] for name in after)  # every file replaced


def test_another_corpus_needs_force(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "out"
    prepare_corpus(write_corpus(tmp_path / "a.txt", documents=20, seed=1), out, model, workers=1, progress=False)
    other = write_corpus(tmp_path / "b.txt", documents=30, seed=2)
    with pytest.raises(InputError, match="force") as error:
        prepare_corpus(other, out, model, workers=1, progress=False)
    assert str(out / "meta.json") in str(error.value)
    summary = prepare_corpus(other, out, model, workers=1, progress=False, force=True)
    assert TokenShards.open(out).meta == summary and summary["corpus"] == str(other.resolve())
    (out / "meta.json").write_text("{garbled")  # force rewrites even a folder it cannot read
    assert prepare_corpus(other, out, model, workers=1, progress=False, force=True) == summary


def test_token_dtype_follows_the_vocabulary() -> None:
    assert data._token_dtype(65535) == np.uint16 and data._token_dtype(65536) == np.uint32


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found"),
        (b"", "empty"),
        (b"\n \n\n", "no text"),
        (b"ka lo\n\x00\x01\x02 binary\n", "NUL"),
        (b"ka lo\n" + b"x" * 5000 + b"\n", "line 2 is longer"),
        (b"ka lo\n" + b"\xff\xfe\xfd\n" * 3, "not valid UTF-8"),
    ],
    ids=["missing", "empty", "blank", "nul", "long-line", "undecodable"],
)
def test_bad_corpus_names_the_file(tmp_path: Path, model: Path, content: bytes | None, message: str) -> None:
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_bytes(content)
    with pytest.raises(InputError, match=message) as error:
        prepare_corpus(corpus, tmp_path / "out", model, workers=1, progress=False, max_line_bytes=4096)
    assert str(corpus) in str(error.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))


@pytest.mark.parametrize("block_bytes", [64, 1 << 20])  # the long line spans reads / sits inside one read
def test_errors_give_the_line_number(tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch,
                                     block_bytes: int) -> None:
    monkeypatch.setattr(data, "_BLOCK_BYTES", block_bytes)
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"ka lo mi\n" * 20 + b"x" * 300 + b"\nka\n")
    with pytest.raises(InputError, match="line 21 is longer than 200 bytes"):
        prepare_corpus(corpus, tmp_path / "out", model, workers=1, progress=False, max_line_bytes=200)
    assert prepare_corpus(corpus, tmp_path / "out", model, workers=1, progress=False, max_line_bytes=300)
    corpus.write_bytes(b"ka lo mi\n" * 20 + b"ka \x00\n")
    with pytest.raises(InputError, match="line 21 contains a NUL byte"):
        prepare_corpus(corpus, tmp_path / "out", model, workers=1, progress=False, force=True)


def test_open_rejects_damaged_folders(tmp_path: Path, prepared: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(prepared, damaged)
    shard = damaged / "tokens_00001.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(InputError) as error:
        TokenShards.open(damaged)
    assert str(shard) in str(error.value)

    meta = damaged / "meta.json"
    meta.write_text('{"format_version": 1, "vocab')
    with pytest.raises(InputError) as error:
        TokenShards.open(damaged)
    assert str(meta) in str(error.value)

    meta.unlink()
    with pytest.raises(InputError, match="prepare") as error:
        TokenShards.open(damaged)
    assert str(meta) in str(error.value)


def test_tokens_across_shard_boundaries(prepared: Path, shards: TokenShards) -> None:
    stream = np.concatenate([np.fromfile(prepared / s["file"], np.uint16) for s in shards.meta["shards"]])
    assert len(shards.meta["shards"]) > 2 and stream.size == shards.num_tokens
    rng = np.random.default_rng(0)
    for start, end in [(0, 0), (SHARD_TOKENS - 3, SHARD_TOKENS + 3), (0, stream.size), (4990, 2 * SHARD_TOKENS + 7)]:
        assert np.array_equal(shards.tokens(start, end), stream[start:end])
    for start in rng.integers(0, stream.size, 50):
        end = int(rng.integers(start, stream.size + 1))
        assert np.array_equal(shards.tokens(int(start), end), stream[start:end])
    with pytest.raises(IndexError):
        shards.tokens(0, stream.size + 1)


# ----------------------------------------------------------------------------------------------------------------
# Packing


def reference_blocks(line_sizes: list[int], capacity: int) -> list[int]:
    """FULL-SENTENCES packing written as the obvious loop: block end offsets."""
    ends, filled, position = [], 0, 0
    for size in line_sizes:
        while size > capacity:  # an over-long line: close the block, then whole blocks of its pieces
            if filled:
                ends.append(position)
                filled = 0
            position += capacity
            size -= capacity
            ends.append(position)
        if filled + size > capacity:
            ends.append(position)
            filled = 0
        filled += size
        position += size
    return ends + [position] if filled else ends


@pytest.mark.parametrize("seq_len", [12, 64, 512])
def test_packing_keeps_whole_lines(shards: TokenShards, seq_len: int) -> None:
    dataset = PackedDataset(shards, seq_len)
    samples = [dataset[i] for i in range(len(dataset))]
    assert all(s.dtype == np.int64 and 2 <= s.size <= seq_len and s[0] == BOS_ID for s in samples)
    assert all(BOS_ID not in s[1:] for s in samples)
    assert np.array_equal(np.concatenate([s[1:] for s in samples]), shards.tokens(0, shards.num_tokens))

    sizes = np.diff(shards.lines)
    assert (sizes > seq_len - 1).any() or seq_len == 512  # the small sizes must exercise cutting
    ends = np.cumsum([s.size - 1 for s in samples])
    assert ends.tolist() == reference_blocks(sizes.tolist(), seq_len - 1)
    # Every block ends at a line boundary unless it is a piece of a line longer than seq_len - 1.
    line = np.searchsorted(shards.lines, ends, side="right") - 1
    inside = ends != shards.lines[line]
    assert np.all(sizes[line[inside]] > seq_len - 1)
    assert np.all((ends[inside] - shards.lines[line[inside]]) % (seq_len - 1) == 0)
    with pytest.raises(IndexError):
        dataset[len(dataset)]


@pytest.mark.parametrize("seq_len", [12, 64])
def test_packing_blocks_cuts_the_stream_into_full_samples(shards: TokenShards, seq_len: int) -> None:
    """``blocks``: every sample is <s> and the next seq_len - 1 tokens, lines cut anywhere; the stream's tail short
    of a block is left out. Its batches carry no padding and say so."""
    from ds_minimodel.data.streams import PADDED

    dataset = PackedDataset(shards, seq_len, "blocks")
    samples = [dataset[i] for i in range(len(dataset))]
    assert len(samples) == shards.num_tokens // (seq_len - 1)
    assert all(s.size == seq_len and s[0] == BOS_ID and BOS_ID not in s[1:] for s in samples)
    kept = len(samples) * (seq_len - 1)
    assert np.array_equal(np.concatenate([s[1:] for s in samples]), shards.tokens(0, kept))
    assert len(samples) < len(PackedDataset(shards, seq_len))  # fewer samples than whole lines give: no padding
    stream = MLMBatchStream(dataset, micro_batch_size=4, world_size=1, rank=0, seed=1, vocab_size=VOCAB_SIZE,
                            seq_len=seq_len)
    for batch in take(stream, 5):
        assert batch[PADDED] is False and batch["attention_mask"].all() and batch["num_tokens"] == 4 * seq_len
    with pytest.raises(InputError, match="packing must be one of sentences, blocks"):
        PackedDataset(shards, seq_len, "documents")


def test_packing_in_windows_matches_the_whole(shards: TokenShards) -> None:
    whole = streams._pack(np.asarray(shards.lines), 40)
    assert np.array_equal(streams._pack(np.asarray(shards.lines), 40, window=100), whole)


# ----------------------------------------------------------------------------------------------------------------
# Masking


def test_masking_statistics() -> None:
    rng = np.random.default_rng(0)
    vocab_size = 1000
    tokens = rng.integers(0, vocab_size, (2000, 512))  # ~0.5% special ids scattered in
    tokens[:, 0] = BOS_ID
    inputs, labels = zip(*(mask_tokens(row, rng, vocab_size=vocab_size) for row in tokens))
    inputs, labels = np.stack(inputs), np.stack(labels)
    special = tokens < NUM_SPECIAL
    chosen = labels != IGNORE_INDEX

    assert not (chosen & special).any() and np.array_equal(inputs[special], tokens[special])
    assert np.array_equal(labels[chosen], tokens[chosen])
    assert np.array_equal(inputs[~chosen], tokens[~chosen])
    # fairseq's rounding picks exactly 15% in expectation; with ~1e6 candidates the rounding noise is ~3e-5.
    assert abs(chosen.sum() / (~special).sum() - 0.15) < 1e-3
    # Of ~150k chosen tokens, each share's binomial standard deviation is at most 0.0011: tolerances are 5 of them.
    # A random replacement equals the original with probability 1/995, which moves 0.01% from random to kept.
    masked = (inputs == MASK_ID) & chosen
    replaced = (inputs != tokens) & ~masked & chosen
    kept = (inputs == tokens) & chosen
    n = chosen.sum()
    assert abs(masked.sum() / n - 0.8) < 0.006
    assert abs(replaced.sum() / n - 0.1) < 0.005
    assert abs(kept.sum() / n - 0.1) < 0.005
    assert inputs[replaced].min() >= NUM_SPECIAL and inputs[replaced].max() < vocab_size


def test_masking_is_deterministic_in_the_rng() -> None:
    tokens = np.random.default_rng(0).integers(NUM_SPECIAL, 500, 300)

    def masked(seed: int) -> tuple[np.ndarray, np.ndarray]:
        return mask_tokens(tokens, np.random.default_rng(seed), vocab_size=500)

    assert all(np.array_equal(a, b) for a, b in zip(masked(1), masked(1)))
    assert not np.array_equal(masked(1)[1], masked(2)[1])
    only_special = np.array([BOS_ID, EOS_ID, EOS_ID])
    assert (mask_tokens(only_special, np.random.default_rng(0), vocab_size=500)[1] == IGNORE_INDEX).all()


# ----------------------------------------------------------------------------------------------------------------
# The batch stream

SEQ_LEN = 64


@pytest.fixture(scope="module")
def dataset(shards: TokenShards) -> PackedDataset:
    return PackedDataset(shards, SEQ_LEN)


def make_stream(dataset: PackedDataset, *, micro_batch_size: int, world_size: int = 1, rank: int = 0,
                seed: int = 5) -> MLMBatchStream:
    return MLMBatchStream(dataset, micro_batch_size=micro_batch_size, world_size=world_size, rank=rank, seed=seed,
                          vocab_size=VOCAB_SIZE, seq_len=SEQ_LEN)


def take(stream: MLMBatchStream, steps: int) -> list[dict]:
    return [next(stream) for _ in range(steps)]


def same(a: dict, b: dict) -> bool:
    return a["num_tokens"] == b["num_tokens"] and all(
        torch.equal(a[key], b[key]) for key in ("input_ids", "attention_mask", "labels", "sample_index"))


def test_batch_format(dataset: PackedDataset) -> None:
    batch = next(make_stream(dataset, micro_batch_size=8))
    ids, attention, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    assert ids.shape == attention.shape == labels.shape == (8, SEQ_LEN)
    assert (ids.dtype, attention.dtype, labels.dtype) == (torch.int64, torch.bool, torch.int64)
    assert batch["num_tokens"] == int(attention.sum())
    assert (ids[~attention] == PAD_ID).all() and (labels[~attention] == IGNORE_INDEX).all()
    assert (ids[:, 0] == BOS_ID).all() and (labels != IGNORE_INDEX).any()
    for row, index in enumerate(batch["sample_index"].tolist()):
        original = torch.where(labels[row] != IGNORE_INDEX, labels[row], ids[row])[attention[row]]
        assert np.array_equal(original.numpy(), dataset[index])


def test_whole_lines_make_padded_batches_all_along(dataset: PackedDataset) -> None:
    """PADDED is the stream's, not the batch's: with whole lines packed it is True even for a batch whose blocks
    happen to be full, so a compiled model never meets the two kinds (a second graph); ``blocks``: the next test."""
    from ds_minimodel.data.streams import PADDED

    batches = take(make_stream(dataset, micro_batch_size=2), len(dataset) // 2)
    assert any(b["attention_mask"].all() for b in batches) and not all(b["attention_mask"].all() for b in batches)
    assert all(b[PADDED] is True for b in batches)


def test_ranks_are_disjoint_and_cover_the_single_rank_stream(dataset: PackedDataset) -> None:
    single = take(make_stream(dataset, micro_batch_size=16), 6)
    ranks = [take(make_stream(dataset, micro_batch_size=8, world_size=2, rank=r), 6) for r in range(2)]
    seen: set[int] = set()
    for step, whole in enumerate(single):
        first, second = ranks[0][step], ranks[1][step]
        indices = [set(first["sample_index"].tolist()), set(second["sample_index"].tolist())]
        assert not indices[0] & indices[1] and not (indices[0] | indices[1]) & seen
        seen |= indices[0] | indices[1]
        # Masking depends on the sample, not the rank: the two halves are exactly the single rank's batch.
        halves = {key: torch.cat([first[key], second[key]]) for key in ("input_ids", "attention_mask", "labels",
                                                                          "sample_index")}
        assert same({**halves, "num_tokens": first["num_tokens"] + second["num_tokens"]}, whole)


def test_epochs_wrap_and_reshuffle(dataset: PackedDataset) -> None:
    stream = make_stream(dataset, micro_batch_size=64)
    per_epoch = len(dataset) // 64
    assert stream.steps_per_epoch == per_epoch
    first = torch.cat([b["sample_index"] for b in take(stream, per_epoch)])
    assert stream.state_dict() == {"epoch": 0, "offset": per_epoch * 64, "samples_consumed": per_epoch * 64}
    second = torch.cat([b["sample_index"] for b in take(stream, per_epoch)])
    assert stream.state_dict() == {"epoch": 1, "offset": per_epoch * 64, "samples_consumed": 2 * per_epoch * 64}
    assert len(set(first.tolist())) == first.numel() and len(set(second.tolist())) == second.numel()
    assert not torch.equal(first, second)
    assert iter(stream) is stream


@pytest.mark.parametrize("resume_at", [3, 7, 9])  # the epoch ends after step 7 (len(dataset) // 64 = 7 or 8)
def test_resume_gives_the_exact_continuation(dataset: PackedDataset, resume_at: int) -> None:
    assert len(dataset) // 64 in (7, 8)
    reference = [take(make_stream(dataset, micro_batch_size=32, world_size=2, rank=r), 12) for r in range(2)]
    stream = make_stream(dataset, micro_batch_size=32, world_size=2, rank=1)
    take(stream, resume_at)
    state = stream.state_dict()

    resumed = make_stream(dataset, micro_batch_size=32, world_size=2, rank=1)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert all(same(a, b) for a, b in zip(take(resumed, 12 - resume_at), reference[1][resume_at:]))

    # Same global order on 4 ranks of 16 or 1 rank of 64: the rows, concatenated by rank, are the reference's.
    for world_size in (1, 4):
        mbs = 64 // world_size
        parts = []
        for rank in range(world_size):
            other = make_stream(dataset, micro_batch_size=mbs, world_size=world_size, rank=rank)
            other.load_state_dict(state)
            parts.append(take(other, 12 - resume_at))
        for step in range(12 - resume_at):
            expected = torch.cat([reference[r][resume_at + step]["input_ids"] for r in range(2)])
            assert torch.equal(torch.cat([p[step]["input_ids"] for p in parts]), expected)


def test_resume_refuses_an_offset_inside_a_chunk(dataset: PackedDataset) -> None:
    stream = make_stream(dataset, micro_batch_size=3)
    take(stream, 1)
    with pytest.raises(InputError, match="multiple"):
        make_stream(dataset, micro_batch_size=2, world_size=2).load_state_dict(stream.state_dict())
    with pytest.raises(InputError):
        stream.load_state_dict({"epoch": 0})


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_prefetching_hands_out_the_same_batches_and_the_consumed_position(dataset: PackedDataset, process) -> None:
    reference = take(make_stream(dataset, micro_batch_size=32), 12)  # crosses the epoch end after 7 or 8
    plain = make_stream(dataset, micro_batch_size=32)
    prefetched = Prefetcher(make_stream(dataset, micro_batch_size=32), depth=3, process=process)
    for step in range(9):
        assert same(next(prefetched), reference[step])
        next(plain)
        deadline = time.monotonic() + 5  # let the thread build ahead, so that its stream is past the consumed one
        while prefetched._queue.qsize() < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert prefetched.state_dict() == plain.state_dict()
    if not process:  # a process builds ahead on its own copy of the stream
        assert prefetched.stream.state_dict() != plain.state_dict()  # built ahead...
    state = prefetched.state_dict()
    prefetched.close()
    assert prefetched.stream.state_dict() == state  # ...and rewound on close, for whoever uses the stream next
    resumed = Prefetcher(make_stream(dataset, micro_batch_size=32), process=process)
    resumed.load_state_dict(state)
    assert all(same(a, b) for a, b in zip(take(resumed, 3), reference[9:]))
    resumed.load_state_dict(plain.state_dict())  # rewinding a running prefetcher stops it first
    assert same(next(resumed), reference[9])
    resumed.close()
    with pytest.raises(InputError, match="at least 1"):
        Prefetcher(plain, depth=0)


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_an_error_while_prefetching_is_raised_in_the_consumer(dataset: PackedDataset, process) -> None:
    class Broken(MLMBatchStream):
        def _collate(self, indices: np.ndarray) -> dict:
            if self.offset >= 2 * self.samples_per_step:
                raise InputError("block 3 is damaged")
            return super()._collate(indices)

    prefetched = Prefetcher(Broken(dataset, micro_batch_size=8, world_size=1, rank=0, seed=5, vocab_size=VOCAB_SIZE,
                                   seq_len=SEQ_LEN), process=process)
    take(prefetched, 2)
    with pytest.raises(InputError, match="block 3 is damaged"):
        next(prefetched)
    assert prefetched._worker is None and prefetched.stream.state_dict()["offset"] == 16


def test_a_prefetching_process_that_dies_is_a_clear_error_naming_the_batches_handed_out(dataset: PackedDataset):
    prefetched = Prefetcher(make_stream(dataset, micro_batch_size=8), process=True)
    take(prefetched, 1)
    prefetched._worker.kill()  # what the kernel's out-of-memory killer does
    prefetched._worker.join()
    with pytest.raises(TrainingError, match=r"the process building micro-batches ended \(exit code -9\) before "
                                            r"handing out the next one; the batches handed out end at \{"):
        take(prefetched, 4)  # the ones already queued, then the error
    assert prefetched._worker is None


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_a_hung_builder_is_a_clear_error_after_the_stall_limit(dataset: PackedDataset, process) -> None:
    class Hanging(MLMBatchStream):
        def _collate(self, indices: np.ndarray) -> dict:
            if self.offset >= 2 * self.samples_per_step:
                time.sleep(3600)  # what a fork that inherited a held lock does
            return super()._collate(indices)

    prefetched = Prefetcher(Hanging(dataset, micro_batch_size=8, world_size=1, rank=0, seed=5, vocab_size=VOCAB_SIZE,
                                    seq_len=SEQ_LEN), process=process, stall_s=1.0)
    take(prefetched, 2)
    worker, started = prefetched._worker, time.monotonic()
    other = "False builds them on a thread" if process else "True builds them in a process"
    with pytest.raises(TrainingError, match=rf"handed out nothing for 1 s and is taken for hung; the batches handed "
                                            rf"out end at \{{.*'offset': 16.*--prefetch-process {other} instead"):
        next(prefetched)
    assert time.monotonic() - started < 10 and prefetched._worker is None
    if process:  # killed, and the stream where the batches handed out end
        assert not worker.is_alive() and prefetched.stream.state_dict()["offset"] == 16
    prefetched.close()  # the loop's own close afterwards: nothing left to stop


FORKED_AFTER_A_PARALLEL_OP = """
import torch
from ds_minimodel.data.prefetch import Prefetcher

class Stream:  # builds each batch with a torch operation large enough to run on every thread
    def __init__(self):
        self.n = 0
    def __next__(self):
        self.n += 1
        return {"x": torch.full((1 << 20,), float(self.n)).mul_(2)}
    def state_dict(self):
        return {"n": self.n}
    def load_state_dict(self, state):
        self.n = state["n"]

torch.set_num_threads(2)
assert float(torch.ones(1 << 22).mul_(3).sum()) == 3 * (1 << 22)  # starts the parent's OpenMP pool
batches = Prefetcher(Stream(), process=True, stall_s=20)
print([float(next(batches)["x"][0]) for _ in range(3)])
batches.close()
"""


def test_a_builder_forked_from_a_process_with_parallel_threads_builds() -> None:
    """A fork does not take the parent's OpenMP threads with it: a builder that ran a parallel torch operation waited
    on them for ever (until the stall limit, 600 s by default), under every launcher that leaves OMP_NUM_THREADS
    unset for a single process."""
    # run_cmd fails the test on a nonzero exit, with its output; the suite's 1 thread would never start a pool
    result = run_cmd([sys.executable, "-c", FORKED_AFTER_A_PARALLEL_OP], timeout=120, env={"OMP_NUM_THREADS": "2"})
    assert result.stdout.strip() == "[2.0, 4.0, 6.0]"


def test_too_few_blocks_is_an_input_error(dataset: PackedDataset) -> None:
    with pytest.raises(InputError, match=f"{len(dataset)} blocks") as error:
        make_stream(dataset, micro_batch_size=len(dataset), world_size=2)
    assert str(2 * len(dataset)) in str(error.value)


# ----------------------------------------------------------------------------------------------------------------
# The CLI


def test_cli_end_to_end(tmp_path: Path, corpus: Path, model: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "en"
    args = ["--corpus", str(corpus), "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(args + ["--vocab-size", "250"]) == 0
    shards = TokenShards.open(out)
    assert shards.vocab_size == 250
    assert shards.tokenizer_sha256 == Tokenizer.load(out / "spm.model").sha256
    meta_stamp = (out / "meta.json").stat().st_mtime_ns

    assert main(args + ["--vocab-size", "250"]) == 0  # same arguments: nothing to do
    assert (out / "meta.json").stat().st_mtime_ns == meta_stamp
    capsys.readouterr()
    assert main(args + ["--vocab-size", "200"]) == 2  # other arguments need --force
    assert "--force" in capsys.readouterr().err

    copied = tmp_path / "copied"
    assert main(["--corpus", str(corpus), "--out", str(copied), "--tokenizer", str(model), "--no-progress"]) == 0
    assert (copied / "spm.model").read_bytes() == model.read_bytes()
    assert TokenShards.open(copied).tokenizer_sha256 == Tokenizer.load(model).sha256


def test_a_given_tokenizer_other_than_the_folders_needs_force(tmp_path: Path, corpus: Path, model: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "en"
    args = ["--corpus", str(corpus), "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(args + ["--vocab-size", "250"]) == 0  # a tokenizer trained here
    own = (out / "spm.model").read_bytes()
    capsys.readouterr()
    assert main(args + ["--tokenizer", str(model)]) == 2
    assert f"{out / 'spm.model'}: the folder already holds a different tokenizer than {model}" in capsys.readouterr().err
    assert (out / "spm.model").read_bytes() == own  # refused: nothing replaced
    assert main(args + ["--tokenizer", str(model), "--force"]) == 0
    assert (out / "spm.model").read_bytes() == model.read_bytes()
    assert main(args + ["--tokenizer", str(model)]) == 0  # the same one again: nothing to do


def test_a_tokenizer_trained_on_the_same_text_at_another_path_is_reused(tmp_path: Path, corpus: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    # A run linked from another checkout (or a moved one) records another absolute path for the same corpus.
    out = tmp_path / "en"
    args = ["--out", str(out), "--workers", "1", "--no-progress", "--vocab-size", "250"]
    assert main(["--corpus", str(corpus)] + args) == 0
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    elsewhere = tmp_path / "other-checkout" / corpus.name
    elsewhere.parent.mkdir()
    shutil.copyfile(corpus, elsewhere)
    assert main(["--corpus", str(elsewhere)] + args) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps  # nothing retrained or re-encoded
    # The same size with other text is another corpus.
    text = elsewhere.read_bytes()
    elsewhere.write_bytes(text[:-2][::-1] + text[-2:])
    capsys.readouterr()
    assert main(["--corpus", str(elsewhere)] + args) == 2
    assert "trained with other arguments" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps


def test_cli_errors(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "missing.txt"
    assert main(["--corpus", str(missing), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(missing) in err and "Traceback" not in err

    with pytest.raises(SystemExit) as exit_:
        main(["--corpus", str(missing), "--out", str(tmp_path / "out"), "--tokenizer", str(model),
              "--vocab-size", "100"])
    assert exit_.value.code == 2


def test_force_keeps_the_replaced_tokenizer_for_the_models_trained_with_it(tmp_path: Path, corpus: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    from ds_minimodel.data.prepare import is_data_folder
    from ds_minimodel.data.tokenizer import load_tokenizer, read_training_record, replaced_tokenizer_path

    out = tmp_path / "en"
    args = ["--corpus", str(corpus), "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(args + ["--vocab-size", "250"]) == 0
    old = Tokenizer.load(out / "spm.model")
    recorded = {"path": str(out / "spm.model"), "sha256": old.sha256}  # what a checkpoint over this data records
    # A retrain that fails (a vocabulary the corpus cannot fill) leaves the tokenizer where it was.
    assert main(args + ["--vocab-size", "100000", "--force"]) == 2
    assert Tokenizer.load(out / "spm.model").sha256 == old.sha256
    assert not replaced_tokenizer_path(out / "spm.model", old.sha256).exists()
    # The user follows the advice of the error for other arguments and retrains with --force.
    assert main(args + ["--vocab-size", "200", "--force"]) == 0
    new = Tokenizer.load(out / "spm.model")
    kept = replaced_tokenizer_path(out / "spm.model", old.sha256)
    assert new.sha256 != old.sha256 and kept.is_file() and f"kept as {kept}" in caplog.text
    assert TokenShards.open(out).tokenizer_sha256 == new.sha256  # the data is the new tokenizer's
    assert load_tokenizer(recorded, "run/checkpoints/step_00000010").sha256 == old.sha256  # the model's still loads
    assert read_training_record(kept)["arguments"]["vocab_size"] == 250  # with how it was trained
    assert is_data_folder(out)  # still the command's own folder: a later prepare may continue it
    # Retraining with the same arguments gives the same model: nothing more is kept.
    assert main(args + ["--vocab-size", "200", "--force"]) == 0
    assert sorted(p.name for p in out.glob("spm.*.model")) == [kept.name]


def test_static_vectors_are_trained_once_per_folder_and_settings_and_read_back_whole(
        prepared: Path, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The four systems' Step 2 over one target folder (and every resume) need the same FOCUS/WECHSEL vectors.
    import gensim.models

    from ds_minimodel.data import static_vectors
    from ds_minimodel.data.prepare import is_data_folder
    from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors

    folder = tmp_path / "de"
    shutil.copytree(prepared, folder)
    pieces, settings = Tokenizer.load(model).pieces(), StaticSettings(dim=8, epochs=1)
    vectors, known, record = train_static_vectors(folder, pieces, settings)
    kept = sorted((folder / static_vectors.CACHE_DIR).iterdir())
    assert [p.suffix for p in kept] == [".npz"] and is_data_folder(folder)
    fresh = train_static_vectors(folder, pieces, settings, cache=False)  # trained again: the same bytes
    assert np.array_equal(fresh[0], vectors) and fresh[2] == record

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    with monkeypatch.context() as patch:
        patch.setattr(gensim.models, "FastText", no_training)
        again = train_static_vectors(folder, pieces, settings)
    assert np.array_equal(again[0], vectors) and np.array_equal(again[1], known) and again[2] == record
    train_static_vectors(folder, pieces, StaticSettings(dim=8, epochs=1, seed=2))  # other settings: their own file
    assert len(list((folder / static_vectors.CACHE_DIR).iterdir())) == 2
    # A damaged file is trained again and replaced, never read.
    kept[0].write_bytes(kept[0].read_bytes()[:100])
    assert np.array_equal(train_static_vectors(folder, pieces, settings)[0], vectors)
    assert static_vectors._read_kept(kept[0]) is not None
    # A folder that cannot be written to: the vectors are used, nothing is left behind.
    other = tmp_path / "fr"
    shutil.copytree(prepared, other)
    with monkeypatch.context() as patch:
        patch.setattr(np, "savez", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "read-only")))
        assert np.array_equal(train_static_vectors(other, pieces, settings)[0], vectors)
    assert not any((other / static_vectors.CACHE_DIR).iterdir())


def test_given_static_vectors_are_used_without_gensim_only_for_the_same_tokens_elsewhere(
        prepared: Path, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors kept on one machine serve a folder prepared from the same text and tokenizer on another (other paths
    in its meta.json) with gensim absent; any other text, rare-piece rule or damaged file is refused by name."""
    from ds_minimodel.data import static_vectors
    from ds_minimodel.data.static_vectors import StaticSettings, check_given, train_static_vectors

    here, there = tmp_path / "here" / "de", tmp_path / "there" / "de"
    shutil.copytree(prepared, here)
    pieces, settings = Tokenizer.load(model).pieces(), StaticSettings(dim=8, epochs=1)
    vectors, known, record = train_static_vectors(here, pieces, settings)
    kept = next((here / static_vectors.CACHE_DIR).iterdir())
    shutil.copytree(prepared, there)  # "prepared there": the same tokens, the files elsewhere
    meta = json.loads((there / "meta.json").read_text())
    (there / "meta.json").write_text(json.dumps({**meta, "corpus": "/elsewhere/de.txt", "tokenizer": "/x/spm.model"}))
    assert static_vectors.data_identity(there) == static_vectors.data_identity(here) == record["data_sha256"]
    with monkeypatch.context() as patch:  # no gensim on that machine
        patch.setitem(sys.modules, "gensim", None)
        patch.setitem(sys.modules, "gensim.models", None)
        got, got_known, got_record = train_static_vectors(there, pieces, settings, given=kept)
        with pytest.raises(InputError, match="need gensim"):
            train_static_vectors(there, pieces, settings)
    assert np.array_equal(got, vectors) and np.array_equal(got_known, known)
    assert got_record["given"] == str(kept.resolve()) and got_record["vectors_sha256"] == record["vectors_sha256"]
    assert not (there / static_vectors.CACHE_DIR).exists()  # used, not copied
    corpus = tmp_path / "de.txt"
    corpus.write_bytes(b"x" * record["corpus_bytes"])
    check_given(kept, corpus, settings, "config")  # the cheap check before any work: size and rule
    # Refused: other tokens (one more token counted), another rule for rare pieces, another text's size, damage.
    (there / "meta.json").write_text(json.dumps({**meta, "num_tokens": meta["num_tokens"] + 1}))
    with pytest.raises(InputError, match=f"{kept}: static vectors trained on other text"):
        train_static_vectors(there, pieces, settings, given=kept)
    with pytest.raises(InputError, match="rare pieces drawn; this run needs .* rare pieces ngrams"):
        train_static_vectors(here, pieces, StaticSettings(rare="ngrams"), given=kept)
    with pytest.raises(InputError, match="rare pieces drawn, where this run has rare_vectors ngrams"):
        check_given(kept, corpus, StaticSettings(rare="ngrams"), "config")
    corpus.write_bytes(b"x")
    with pytest.raises(InputError, match=r"trained on a text of [0-9]+ bytes, not on .*de.txt \(1 bytes\) \(config\)"):
        check_given(kept, corpus, settings, "config")
    with pytest.raises(InputError, match="static vectors file not found"):
        train_static_vectors(here, pieces, settings, given=tmp_path / "none.npz")
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(kept.read_bytes()[:100])
    with pytest.raises(InputError, match=f"{damaged}: not static vectors"):
        train_static_vectors(here, pieces, settings, given=damaged)
    old = tmp_path / "old.npz"  # kept by a version whose record did not name the text
    static_vectors.keep_vectors(old, vectors, known, {k: v for k, v in record.items() if k != "data_sha256"})
    with pytest.raises(InputError, match="no data_sha256"):
        train_static_vectors(here, pieces, settings, given=old)


def test_rare_pieces_can_take_fasttexts_ngram_vectors_and_the_default_keeps_its_cache_key(tmp_path):
    """A small corpus leaves many pieces below min_count: 'drawn' gives them no vector, 'ngrams' gives every piece
    whose character n-grams FastText learned a vector, the frequent pieces' vectors unchanged."""
    pytest.importorskip("gensim", reason="gensim (the focus extra) is not installed")
    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors
    from ds_minimodel.data.tokenizer import Tokenizer

    german = Path(__file__).resolve().parents[2] / "demo_data/corpus/de.txt"
    corpus = tmp_path / "small.txt"
    corpus.write_text("".join(german.read_text(encoding="utf-8").splitlines(keepends=True)[:400]))
    prepare(corpus, tmp_path / "de", vocab_size=600, workers=1, progress=False)
    pieces = Tokenizer.load(tmp_path / "de" / "spm.model").pieces()
    drawn = train_static_vectors(tmp_path / "de", pieces, StaticSettings(), cache=False)
    ngrams = train_static_vectors(tmp_path / "de", pieces, StaticSettings(rare="ngrams"), cache=False)
    assert drawn[1].sum() < ngrams[1].sum() <= len(pieces) and ngrams[1][drawn[1]].all()
    assert np.array_equal(drawn[0][drawn[1]], ngrams[0][drawn[1]])  # the frequent pieces' own vectors
    assert "rare" not in drawn[2] and ngrams[2]["rare"] == "ngrams"  # the default names no new key
    with pytest.raises(InputError, match="one of drawn, ngrams"):
        train_static_vectors(tmp_path / "de", pieces, StaticSettings(rare="random"), cache=False)

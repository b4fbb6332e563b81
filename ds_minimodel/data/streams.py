"""Prepared token shards (written by ``ds_minimodel.data.shards``) -> packed blocks -> masked, rank-sharded batches.

``TokenShards`` reads a prepared folder, memory-mapped; ``PackedDataset`` cuts it into blocks of whole lines
(RoBERTa's FULL-SENTENCES packing); ``MLMBatchStream`` masks them (BERT's dynamic 80/10/10) in a deterministic
per-rank order that resumes exactly;
``ArrayStream`` serves finetuning features the same way (``data.prefetch`` builds batches ahead).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from ds_minimodel.config import PACKINGS
from ds_minimodel.data.shards import DOCS_FILE, FORMAT_VERSION, LINES_FILE, META_FILE, read_meta
from ds_minimodel.data.tokenizer import BOS_ID, IGNORE_INDEX, MASK_ID, NUM_SPECIAL, PAD_ID
from ds_minimodel.errors import InputError

logger = logging.getLogger(__name__)


class TokenShards:
    """A prepared folder, memory-mapped read-only; build with `TokenShards.open`."""

    def __init__(self, path: Path, meta: dict, dtype: np.dtype, shards: list[np.memmap], lines: np.ndarray,
                 docs: np.ndarray) -> None:
        self.path = path
        self.meta = meta
        self.dtype = dtype  # as stored: uint16, or uint32 for vocabularies over 65,535 pieces
        self.lines = lines  # int64 token offset of each stored line, then num_tokens
        self.docs = docs  # int64 index into lines of each document's first line, then num_lines
        self._shards = shards
        self._starts = np.cumsum([0] + [s.size for s in shards])  # global offset of each shard's first token

    @property
    def num_tokens(self) -> int:
        return int(self.meta["num_tokens"])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def tokenizer_sha256(self) -> str:
        return self.meta["tokenizer_sha256"]

    @classmethod
    def open(cls, prepared_dir: Path | str) -> TokenShards:
        path = Path(prepared_dir)
        meta_path = path / META_FILE
        meta = read_meta(meta_path)
        if meta is None:
            raise InputError(f"{meta_path}: not found; prepare the corpus first (python -m ds_minimodel prepare)")
        required = ("format_version", "vocab_size", "dtype", "num_tokens", "num_lines", "num_documents", "shards",
                    "tokenizer_sha256")
        missing = [key for key in required if key not in meta]
        if missing:
            raise InputError(f"{meta_path}: missing {', '.join(missing)}; prepare the corpus again with --force")
        if meta["format_version"] != FORMAT_VERSION:
            raise InputError(f"{meta_path}: format version {meta['format_version']}, this code reads "
                             f"{FORMAT_VERSION}; prepare the corpus again with --force")
        try:
            dtype = np.dtype(meta["dtype"])
            sizes = {shard["file"]: int(shard["num_tokens"]) for shard in meta["shards"]}
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{meta_path}: garbled dtype or shard list; prepare the corpus again") from None
        shards = []
        for name, num_tokens in sizes.items():
            file = path / name
            expected = num_tokens * dtype.itemsize
            actual = file.stat().st_size if file.is_file() else None
            if actual != expected:
                raise InputError(f"{file}: expected {expected:,} bytes, found "
                                 f"{'no file' if actual is None else f'{actual:,}'}; prepare the corpus again")
            if num_tokens:  # np.memmap cannot map an empty file
                shards.append(np.memmap(file, dtype=dtype, mode="r", shape=(num_tokens,)))
        lines = cls._load_index(path / LINES_FILE, meta["num_lines"] + 1)
        docs = cls._load_index(path / DOCS_FILE, meta["num_documents"] + 1)
        if sum(s.size for s in shards) != meta["num_tokens"] or lines[-1] != meta["num_tokens"]:
            raise InputError(f"{meta_path}: num_tokens disagrees with the shards or {LINES_FILE}; prepare again")
        return cls(path, meta, dtype, shards, lines, docs)

    @staticmethod
    def _load_index(file: Path, length: int) -> np.ndarray:
        try:
            array = np.load(file, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise InputError(f"{file}: unreadable ({err}); prepare the corpus again") from None
        if array.shape != (length,) or array.dtype != np.int64:
            raise InputError(f"{file}: expected {length:,} int64 entries, found {array.shape} {array.dtype}; "
                             "prepare the corpus again")
        return array

    def tokens(self, start: int, end: int) -> np.ndarray:
        """Tokens [start, end) of the global stream, in the stored dtype (a read-only view within one shard)."""
        if not 0 <= start <= end <= self.num_tokens:
            raise IndexError(f"token range [{start}, {end}) outside [0, {self.num_tokens}) in {self.path}")
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        pieces = []
        while start < end:
            local = start - int(self._starts[first])
            take = min(end - start, self._shards[first].size - local)
            pieces.append(self._shards[first][local : local + take])
            start += take
            first += 1
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.zeros(0, self.dtype)


def _split_long_lines(offsets: np.ndarray, capacity: int) -> np.ndarray:
    """Line offsets with extra cuts every `capacity` tokens inside lines longer than `capacity`."""
    sizes = np.diff(offsets)
    extra = (sizes - 1) // capacity  # cuts inside each line
    if not extra.any():
        return offsets
    line = np.repeat(np.arange(sizes.size), extra)
    # k-th cut of its line, k = 1..extra: position within the run of equal `line` values, plus one.
    run_start = np.repeat(np.cumsum(extra) - extra, extra)
    k = np.arange(line.size) - run_start + 1
    return np.insert(offsets, line + 1, offsets[line] + k * capacity)


def _greedy_starts(offsets: np.ndarray, capacity: int) -> np.ndarray:
    """Indices into `offsets` of greedy block starts, then the last index.

    `offsets` are line boundaries with no line longer than `capacity`. A block starting at boundary s ends at
    step[s], the furthest boundary within `capacity` tokens, so the block starts are the orbit 0, step[0],
    step[step[0]], ... That walk is sequential, but pointer doubling computes it in log2(num_blocks) vectorised
    passes: if P holds the first 2^k orbit elements and J is `step` applied 2^k times, [P, J[P]] holds 2^(k+1).
    """
    last = offsets.size - 1
    step = np.searchsorted(offsets, offsets + capacity, side="right") - 1  # step[last] == last: a fixed point
    orbit = np.zeros(1, np.int64)
    while orbit[-1] < last:
        orbit = np.concatenate([orbit, step[orbit]])
        step = step[step]
    return orbit[: int(np.searchsorted(orbit, last)) + 1]


def _pack(lines: np.ndarray, capacity: int, window: int = 1 << 22) -> np.ndarray:
    """Token offsets of the blocks (then the total) when whole lines are packed greedily into `capacity` tokens.

    Works through `window` lines at a time so that memory stays bounded on a corpus of billions of lines. A
    window's last block may have been cut short by the window's end, so the next window restarts at that block's
    start, which can sit inside a long line; cutting that line every `capacity` tokens from there gives the same
    pieces as cutting it from its beginning."""
    window = max(window, 2 * capacity)  # > capacity lines hold > capacity tokens: at least one whole block
    last = lines.size - 1
    blocks = []
    start, line = 0, 0  # token offset of the next block; the line it lies in
    while True:
        end = min(line + window, last)
        offsets = _split_long_lines(np.concatenate(([start], lines[line + 1 : end + 1])), capacity)
        starts = offsets[_greedy_starts(offsets, capacity)]
        if end == last:
            blocks.append(starts)
            return np.concatenate(blocks)
        blocks.append(starts[:-2])
        start = int(starts[-2])
        line = int(np.searchsorted(lines, start, side="right")) - 1


class PackedDataset:
    """The corpus as samples of at most ``seq_len`` tokens, by ``packing`` (``config.PACKINGS``):

    - ``sentences``: RoBERTa's FULL-SENTENCES input (Liu et al., 2019, Sec. 4.2) = fairseq's `--sample-break-mode
      complete`. Sample i is `<s>` followed by a block of whole stored lines, packed greedily in order so that the
      sample fits in `seq_len` (no padding here; the batch pads it). A line longer than seq_len - 1 is cut into
      consecutive pieces of seq_len - 1 tokens. A document boundary's lone `</s>` is kept even when it opens a
      block, so that the blocks concatenate to exactly the stored stream (it costs one token in a few blocks).
    - ``blocks``: fairseq's `--sample-break-mode none`: `<s>` followed by the next seq_len - 1 tokens of the stream,
      lines and documents cut wherever a block ends (the `</s>` between documents stays in it); every sample is
      `seq_len` long. The stream's last tokens short of a block are left out.
    """

    def __init__(self, shards: TokenShards, seq_len: int, packing: str = "sentences") -> None:
        if seq_len < 2:
            raise InputError(f"seq_len must be at least 2 (<s> and one token), got {seq_len}")
        if packing not in PACKINGS:
            raise InputError(f"packing must be one of {', '.join(PACKINGS)}, got {packing!r}")
        self.shards, self.seq_len, self.packing = shards, seq_len, packing
        # Token offsets of the blocks' starts, then their end: block i is tokens[bounds[i]:bounds[i + 1]].
        if packing == "blocks":
            self.bounds = np.arange(0, shards.num_tokens // (seq_len - 1) * (seq_len - 1) + 1, seq_len - 1)
        else:
            self.bounds = _pack(shards.lines, seq_len - 1)

    def __len__(self) -> int:
        return self.bounds.size - 1

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} outside [0, {len(self)})")
        block = self.shards.tokens(int(self.bounds[index]), int(self.bounds[index + 1]))
        sample = np.empty(block.size + 1, np.int64)
        sample[0] = BOS_ID
        sample[1:] = block
        return sample


def mask_tokens(
    tokens: np.ndarray,
    rng: np.random.Generator,
    *,
    vocab_size: int,
    mask_prob: float = 0.15,
    random_prob: float = 0.1,
    keep_prob: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking (Devlin et al., 2019, Sec. 3.1): return (inputs, labels) as int64.

    Of the non-special tokens, floor(mask_prob * n + U[0,1)) are chosen (fairseq's rounding: exactly mask_prob
    in expectation, even for short samples); each chosen token becomes `<mask>` with probability
    1 - random_prob - keep_prob, a uniform random non-special id with probability random_prob, or stays. Labels
    hold the original id at chosen positions and IGNORE_INDEX elsewhere.
    """
    inputs = np.array(tokens, dtype=np.int64)
    labels = np.full_like(inputs, IGNORE_INDEX)
    candidates = np.flatnonzero(inputs >= NUM_SPECIAL)
    count = int(mask_prob * candidates.size + rng.random())
    if count == 0:
        return inputs, labels
    chosen = rng.choice(candidates, count, replace=False)
    labels[chosen] = inputs[chosen]
    draw = rng.random(count)
    to_mask = draw < 1.0 - random_prob - keep_prob
    to_random = ~to_mask & (draw < 1.0 - keep_prob)
    inputs[chosen[to_mask]] = MASK_ID
    inputs[chosen[to_random]] = rng.integers(NUM_SPECIAL, vocab_size, int(np.count_nonzero(to_random)))
    return inputs, labels


class ShardedStream:
    """An endless per-rank stream of micro-batches over any indexable dataset; subclasses say how to collate.

    Epoch e visits the samples in the order `default_rng([seed, e]).permutation(n)`. That global order is cut into
    chunks of micro_batch_size x world_size samples and rank r takes slice [r*mbs, (r+1)*mbs) of each chunk, so
    ranks are disjoint and one global position describes every rank; an epoch's last partial chunk is dropped.
    """

    def __init__(self, num_samples: int, *, micro_batch_size: int, world_size: int, rank: int, seed: int,
                 source: str, unit: str = "samples") -> None:
        if not 0 <= rank < world_size:
            raise InputError(f"rank {rank} is outside [0, world_size={world_size})")
        if micro_batch_size < 1:
            raise InputError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
        chunk = micro_batch_size * world_size
        if num_samples < chunk:
            raise InputError(
                f"{source}: {num_samples} {unit}, but one step needs micro_batch_size x world_size = {chunk}; "
                "use more data or smaller batches"
            )
        self.num_samples = num_samples
        self.micro_batch_size = micro_batch_size
        self.world_size = world_size
        self.rank = rank
        self.seed = seed
        self.epoch = 0
        self.offset = 0  # position in this epoch's permutation: samples all ranks have consumed this epoch
        self.samples_consumed = 0  # over all ranks and epochs
        self._permutation: tuple[int, np.ndarray] | None = None

    @property
    def samples_per_step(self) -> int:
        return self.micro_batch_size * self.world_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.samples_per_step

    def _order(self, epoch: int) -> np.ndarray:
        if self._permutation is None or self._permutation[0] != epoch:
            self._permutation = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.num_samples))
        return self._permutation[1]

    def __iter__(self) -> ShardedStream:
        return self

    def __next__(self) -> dict:
        if self.offset + self.samples_per_step > self.num_samples:
            self.epoch += 1
            self.offset = 0
        start = self.offset + self.rank * self.micro_batch_size
        indices = self._order(self.epoch)[start : start + self.micro_batch_size]
        batch = self._collate(indices)
        self.offset += self.samples_per_step
        self.samples_consumed += self.samples_per_step
        return batch

    def _collate(self, indices: np.ndarray) -> dict:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset, "samples_consumed": self.samples_consumed}

    def load_state_dict(self, state: dict) -> None:
        try:
            epoch, offset, consumed = (int(state[key]) for key in ("epoch", "offset", "samples_consumed"))
        except (KeyError, TypeError, ValueError):
            raise InputError(f"data stream state {state!r} lacks integer epoch, offset and samples_consumed") from None
        if offset % self.samples_per_step:
            raise InputError(
                f"data stream state has offset {offset} inside epoch {epoch}, which is not a multiple of "
                f"micro_batch_size x world_size = {self.samples_per_step}; resume with a batch layout that "
                "divides it (or from a checkpoint saved at an epoch start)"
            )
        if not 0 <= offset <= self.num_samples or epoch < 0:
            raise InputError(f"data stream state {state!r} does not fit a dataset of {self.num_samples} samples")
        self.epoch, self.offset, self.samples_consumed = epoch, offset, consumed


PADDED = "padded"
"""An MLM micro-batch's flag, known on the host: False when its stream's blocks all fill the sequence (``packing``
``blocks``), so the model goes without the attention mask. In eager mode the model would find that out itself by
reading the mask, a wait on the GPU every forward; under ``torch.compile`` it cannot look, so it would pass the mask,
which keeps SDPA off its flash kernels. The same for every batch of a stream: a compiled model keeps one graph. (With
``sentences`` nearly every batch holds a short block: at 128 tokens a fifth of the reference corpus's positions are
padding.)"""


class MLMBatchStream(ShardedStream):
    """Masked micro-batches of packed blocks for MLM training (Steps 1, 1b and 2).

    Sample i of epoch e is masked with `default_rng([seed, e, i, 7])`, independent of rank and world size, so a
    run resumed on a different number of ranks sees the same masked samples.
    """

    def __init__(
        self,
        dataset: PackedDataset,
        *,
        micro_batch_size: int,
        world_size: int,
        rank: int,
        seed: int,
        vocab_size: int,
        seq_len: int,
        mask_prob: float = 0.15,
    ) -> None:
        if not 0.0 < mask_prob <= 1.0:
            raise InputError(f"mask_prob must be in (0, 1], got {mask_prob}")
        if dataset.seq_len > seq_len:
            raise InputError(f"the dataset packs blocks of {dataset.seq_len} tokens, longer than seq_len={seq_len}")
        super().__init__(len(dataset), micro_batch_size=micro_batch_size, world_size=world_size, rank=rank,
                         seed=seed, source=str(dataset.shards.path), unit=f"blocks of {dataset.seq_len} tokens")
        self.dataset = dataset
        self.padded = dataset.packing != "blocks" or dataset.seq_len < seq_len  # PADDED
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.mask_prob = mask_prob

    def _collate(self, indices: np.ndarray) -> dict:
        shape = (indices.size, self.seq_len)
        input_ids = np.full(shape, PAD_ID, np.int64)
        labels = np.full(shape, IGNORE_INDEX, np.int64)
        lengths = np.zeros(indices.size, np.int64)
        for row, index in enumerate(indices.tolist()):
            rng = np.random.default_rng([self.seed, self.epoch, index, 7])
            inputs, targets = mask_tokens(self.dataset[index], rng, vocab_size=self.vocab_size,
                                          mask_prob=self.mask_prob)
            lengths[row] = inputs.size
            input_ids[row, : inputs.size] = inputs
            labels[row, : inputs.size] = targets
        attention_mask = np.arange(self.seq_len) < lengths[:, None]
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "labels": torch.from_numpy(labels),
            "num_tokens": int(lengths.sum()),
            PADDED: self.padded,
            "sample_index": torch.from_numpy(indices.astype(np.int64)),  # dataset indices, for logs and tests
        }


WIDTH_MULTIPLE = 8
"""A cut batch keeps a multiple of this many columns (``trim_padding``): widths that change every batch made a bf16
rank on an AMX CPU keep a oneDNN plan, with weight copies, per width (Step 3 of the MiniLM run grew 1.5 to 3.1 GB a
rank in 11 minutes; the same cause as ``model.encoder.MASKED_ROWS_MULTIPLE``)."""


def trim_padding(rows: dict[str, np.ndarray], multiple: int = WIDTH_MULTIPLE) -> dict[str, np.ndarray]:
    """Rows of task features cut to their longest input, rounded up to ``multiple``: every per-position array
    (the second axis as long as ``attention_mask``'s) loses the trailing columns that are padding in every row.
    Features are padded to ``max_len`` (128 by default) while a classification input averages 27 tokens on lohelp,
    so an uncut batch is mostly padding. Exact: padding sits after the real tokens, positions count from the left,
    and padded keys get no attention, so the real positions' outputs are the same."""
    mask = rows.get("attention_mask")
    if mask is None or mask.ndim != 2 or not len(mask):
        return rows
    width = mask.shape[1]
    longest = int(np.flatnonzero(mask.any(0)).max(initial=0)) + 1
    used = min(width, -(-longest // multiple) * multiple)
    if used == width:
        return rows
    return {name: a[:, :used] if a.ndim >= 2 and a.shape[1] == width else a for name, a in rows.items()}


class ArrayStream(ShardedStream):
    """Micro-batches of precomputed task features (Step 3), with the same order, sharding and resume rules."""

    def __init__(self, arrays: dict[str, np.ndarray], *, micro_batch_size: int, world_size: int, rank: int,
                 seed: int, source: str) -> None:
        sizes = {name: len(a) for name, a in arrays.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"feature arrays of different lengths: {sizes}")
        super().__init__(next(iter(sizes.values())), micro_batch_size=micro_batch_size, world_size=world_size,
                         rank=rank, seed=seed, source=source)
        self.arrays = arrays

    def _collate(self, indices: np.ndarray) -> dict:
        rows = trim_padding({name: a[indices] for name, a in self.arrays.items()})
        batch = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in rows.items()}
        if "attention_mask" in batch:
            batch["num_tokens"] = int(batch["attention_mask"].sum())
        return batch

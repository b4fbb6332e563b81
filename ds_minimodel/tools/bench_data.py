"""The data side of ``ds-minimodel bench`` (its ``prepare`` and ``loader`` commands; BENCHMARKS.md): SentencePiece
encoding throughput per core, and how long the training loop waits for each micro-batch."""
from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ds_minimodel import flops
from ds_minimodel.config import get_preset
from ds_minimodel.errors import InputError, require_file
from ds_minimodel.systems import Step
from ds_minimodel.tools.machine import GPU_PEAK_TFLOPS, BenchSpec, environment


def preprocessing(args: BenchSpec) -> dict[str, Any]:
    """SentencePiece encoding into shards (``prepare_corpus``) with 1 worker and with every core: MB/s and per core."""
    import tempfile

    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.shards import prepare_corpus

    corpus = require_file(args.corpus, "corpus file", "bench prepare --corpus")
    size_mb = corpus.stat().st_size / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_dir = Path(tmp) / "tok"
        prepare(corpus, tokenizer_dir, vocab_size=args.vocab, progress=False)  # tokenizer + a first encoding
        runs = []
        for workers in sorted({1, os.cpu_count() or 1}):
            best = float("inf")
            for repeat in range(args.repeats):
                out = Path(tmp) / f"w{workers}_{repeat}"
                start = time.perf_counter()
                prepare_corpus(corpus, out, tokenizer_dir / "spm.model", workers=workers, progress=False)
                best = min(best, time.perf_counter() - start)
            runs.append({"workers": workers, "seconds": best, "mb_per_s": size_mb / best,
                         "mb_per_s_per_core": size_mb / best / workers})
    return {"benchmark": "prepare", "corpus": str(corpus), "corpus_mb": size_mb, "vocab": args.vocab,
            "cpu_count": os.cpu_count(), "runs": runs, "python": platform.python_version()}


BUILDERS = (("demand", 0, False), ("thread", 2, False), ("process", 2, True))
"""The loader benchmark's rows: (name, prefetch depth, in a process of its own)."""


def loader(args: BenchSpec) -> dict[str, Any]:
    """How long the training loop waits for each micro-batch (masking and collation from the memory-mapped shards,
    then the copy to the device) and what building it costs the loop, with the batches built when asked for, on a
    thread and in a process (``Prefetcher``). The model's compute is stood in for in one of two ways:

    - a sleep (the default), which is what the host thread does while a GPU computes, its length by default the
      analytic FLOPs of a ``--preset`` Step-1 micro-batch at 45% of an H100's bf16 peak (target 4's utilisation);
    - ``--launches N``: N small tensor operations, each of which lets go of the interpreter's lock and takes it
      back as launching a GPU kernel does, timed alone first. A builder that runs Python on a thread then takes
      turns of that lock from them, and the row's ``cost_ms`` is what that adds to each update.
    """
    import tempfile

    from ds_minimodel.data.prefetch import Prefetcher
    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards
    from ds_minimodel.train.engine import batch_to

    if args.launches is not None and args.launches < 1:
        raise InputError(f"--launches must be a positive count of tensor operations, got {args.launches}")
    cfg = get_preset(args.preset)
    shape = {"seq_len": args.seq_len, "batch": args.micro_batch, "mask_prob": args.mask_prob}
    gpu_peak = GPU_PEAK_TFLOPS["H100"]["bf16"] * 1e12
    compute_s = (args.compute_ms / 1e3 if args.compute_ms is not None
                 else flops.per_update_flops(Step.PRETRAIN, cfg, **shape) / (0.45 * gpu_peak))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    stand_in = launcher(args.launches, device) if args.launches else lambda: time.sleep(compute_s)
    # The stand-in alone, after the warm-up as in the rows (a GPU's first launches load their kernels)
    alone = statistics.fmean([timed(stand_in) for _ in range(args.warmup + args.updates)][args.warmup:])
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp) / "en"
            prepare(args.corpus, data, vocab_size=8000, progress=False)
        shards = TokenShards.open(data)
        dataset = PackedDataset(shards, args.seq_len - 1)
        runs = []
        for builder, depth, process in BUILDERS:
            stream = MLMBatchStream(dataset, micro_batch_size=args.micro_batch, world_size=1, rank=0, seed=1,
                                    vocab_size=shards.vocab_size, seq_len=args.seq_len, mask_prob=args.mask_prob)
            batches = Prefetcher(stream, depth=depth, pin_for=device, process=process) if depth else stream
            waits, stood = [], []
            for i in range(args.warmup + args.updates):
                start = time.perf_counter()
                batch = batch_to(next(batches), device)
                wait = time.perf_counter() - start
                if i >= args.warmup:
                    waits.append(wait)
                    stood.append(timed(stand_in))
                else:
                    stand_in()
            if depth:
                batches.close()
            mean, update = statistics.fmean(waits), statistics.fmean(w + s for w, s in zip(waits, stood))
            runs.append({"builder": builder, "prefetch": depth, "mean_wait_ms": mean * 1e3,
                         "max_wait_ms": max(waits) * 1e3, "stand_in_ms": statistics.fmean(stood) * 1e3,
                         "update_ms": update * 1e3, "cost_ms": (update - alone) * 1e3, "stall_share": mean / update,
                         "tokens_per_s_when_built_on_demand": batch["num_tokens"] / mean if not depth else None})
    stood_in = ({"launches": args.launches} if args.launches else {"compute_ms": compute_s * 1e3})
    return {"benchmark": "loader", **environment(args), **stood_in, "stand_in_alone_ms": alone * 1e3, "runs": runs}


def launcher(count: int, device: torch.device) -> Callable[[], None]:
    """``count`` in-place additions to a one-element tensor on ``device``, then a wait for the device: a GPU
    update's host side without its compute."""
    x = torch.zeros(1, device=device)

    def launch() -> None:
        for _ in range(count):
            x.add_(1)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return launch


def timed(work: Callable[[], None]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start

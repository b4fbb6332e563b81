"""What a benchmark is asked to measure (``BenchSpec``), what it records about the machine it ran on, and the
datasheet peaks its utilisation is measured against (shared by ``tools.bench`` and ``tools.bench_data``)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ds_minimodel.config import known_fields

# Dense tensor-core peaks from the vendors' datasheets, TFLOP/s (no sparsity). Matched against the name CUDA reports
# in this order: every word of a key must be in it. The SXM H100 reports itself as "NVIDIA H100 80GB HBM3", without
# "SXM", so the plain "H100" key (the SXM figures) comes after the PCIe and NVL parts.
GPU_PEAK_TFLOPS = {
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 378.0},
    "H100 NVL": {"bf16": 835.5, "fp16": 835.5, "fp32": 417.5},
    "H100": {"bf16": 989.4, "fp16": 989.4, "fp32": 494.7},  # SXM; fp32 = TF32 tensor cores
    "H200": {"bf16": 989.4, "fp16": 989.4, "fp32": 494.7},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 156.0},
    "V100": {"bf16": None, "fp16": 125.0, "fp32": 15.7},
}


@dataclass(frozen=True, kw_only=True)
class BenchSpec:
    """One benchmark's settings (``ds-minimodel bench``'s options, each documented by its ``--help``); below the
    command line the benchmarks read this, not the parsed arguments."""

    preset: str = "base"
    vocab: int = 50_000
    seq_len: int = 128
    micro_batch: int = 8
    mask_prob: float = 0.15
    warmup: int = 3
    updates: int = 10
    layers: int = 12
    mini_layers: int = 4
    new_layers: int = 2
    ds_config: Path | None = None
    activation_checkpointing: bool = False
    qkv_views: bool = False
    compile: bool = False
    profile: Path | None = None
    start: int = 8
    max: int = 1024
    bf16: bool = False
    hf_attention: str = "sdpa"
    data: Path | None = None
    corpus: Path | None = None
    compute_ms: float | None = None
    launches: int | None = None
    repeats: int = 3

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BenchSpec:
        """The parsed options that are settings (the command, the stages and ``--json`` are the command's own)."""
        return cls(**known_fields(cls, vars(args)))


def environment(args: BenchSpec) -> dict[str, Any]:
    import deepspeed

    options = sys.argv[1:]
    if options[:1] == ["bench"]:  # through ``python -m ds_minimodel`` (or ``ds-minimodel``), the command itself
        options = options[1:]
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    return {"device": device, "torch": torch.__version__, "deepspeed": deepspeed.__version__,
            "threads": torch.get_num_threads(), "preset": args.preset, "vocab": args.vocab,
            "seq_len": args.seq_len, "micro_batch": args.micro_batch, "updates": args.updates,
            "ds_config": str(args.ds_config or ""), "command": " ".join(["python -m ds_minimodel bench", *options])}

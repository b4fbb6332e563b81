"""What a benchmark records about the machine it ran on, and the datasheet peaks its utilisation is measured against
(shared by ``tools.bench`` and ``tools.bench_data``)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any

import torch

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


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import deepspeed

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    return {"device": device, "torch": torch.__version__, "deepspeed": deepspeed.__version__,
            "threads": torch.get_num_threads(), "preset": args.preset, "vocab": args.vocab,
            "seq_len": args.seq_len, "micro_batch": args.micro_batch, "updates": args.updates,
            "ds_config": str(getattr(args, "ds_config", "")), "command": " ".join(["python -m ds_minimodel bench",
                                                                                   *sys.argv[1:]])}

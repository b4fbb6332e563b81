"""Benchmarks whose figures go into BENCHMARKS.md. Nothing here is asserted in tests: timings are measured, not checked.

    python -m ds_minimodel.bench step2 --preset base --seq-len 128 --micro-batch 8

``step2`` times one Step-2 update (forward, backward, optimizer step through the DeepSpeed engine) with a frozen
body, over the full 12-layer body and over the 4-layer mini-model, on the same machine in the same process, and
prints the measured time ratio next to the analytic FLOP ratio A3(12)/A3(4).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ds_minimodel import flops
from ds_minimodel.config import get_preset
from ds_minimodel.engine import init_distributed, load_ds_config
from ds_minimodel.losses import IGNORE_INDEX, mlm_step
from ds_minimodel.model import MaskedLM
from ds_minimodel.surgery import freeze_for_adaptation
from ds_minimodel.tokenizer import NUM_SPECIAL, MASK_ID


def synthetic_batch(batch: int, seq_len: int, vocab: int, mask_prob: float, generator: torch.Generator
                    ) -> dict[str, torch.Tensor]:
    """Random tokens with a mask_prob share of targets: timing does not depend on the text."""
    ids = torch.randint(NUM_SPECIAL, vocab, (batch, seq_len), generator=generator)
    chosen = torch.rand(batch, seq_len, generator=generator) < mask_prob
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return {"input_ids": torch.where(chosen, torch.full_like(ids, MASK_ID), ids),
            "attention_mask": torch.ones(batch, seq_len, dtype=torch.bool), "labels": labels}


def time_step2(num_layers: int, args: argparse.Namespace, ds_config: dict[str, Any]) -> dict[str, float]:
    import deepspeed

    cfg = get_preset(args.preset).replace(num_layers=num_layers, vocab_size=args.vocab)
    torch.manual_seed(0)
    model = MaskedLM(cfg)
    freeze_for_adaptation(model)
    config = {**ds_config, "train_batch_size": args.micro_batch, "train_micro_batch_size_per_gpu": args.micro_batch,
              "gradient_accumulation_steps": 1}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                      if p.requires_grad], config=config)
    generator = torch.Generator().manual_seed(0)
    batch = {k: v.to(engine.device) for k, v in
             synthetic_batch(args.micro_batch, args.seq_len, args.vocab, args.mask_prob, generator).items()}
    times = []
    for i in range(args.warmup + args.updates):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        engine.backward(mlm_step(engine, batch)["loss"])
        engine.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    engine.destroy()
    analytic = flops.per_update_flops("adapt", cfg, seq_len=args.seq_len, batch=args.micro_batch,
                                      mask_prob=args.mask_prob)
    return {"layers": num_layers, "median_s": statistics.median(times), "min_s": min(times),
            "analytic_flops": analytic}


def step2(args: argparse.Namespace) -> dict[str, Any]:
    init_distributed()
    ds_config = load_ds_config(args.ds_config)
    full, mini = time_step2(args.full_layers, args, ds_config), time_step2(args.mini_layers, args, ds_config)
    measured = full["median_s"] / mini["median_s"]
    analytic = full["analytic_flops"] / mini["analytic_flops"]
    return {
        "benchmark": "step2", "preset": args.preset, "vocab": args.vocab, "seq_len": args.seq_len,
        "micro_batch": args.micro_batch, "updates": args.updates, "ds_config": str(args.ds_config),
        "full": full, "mini": mini, "measured_time_ratio": measured, "analytic_flop_ratio": analytic,
        "measured_over_analytic": measured / analytic, "device": _device(), "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def _device() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU {platform.processor() or platform.machine()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s2 = sub.add_parser("step2", help="Step-2 update time: full body vs mini-model")
    s2.add_argument("--preset", default="base")
    s2.add_argument("--vocab", type=int, default=50_000)
    s2.add_argument("--seq-len", type=int, default=128)
    s2.add_argument("--micro-batch", type=int, default=8)
    s2.add_argument("--mask-prob", type=float, default=0.15)
    s2.add_argument("--full-layers", type=int, default=12)
    s2.add_argument("--mini-layers", type=int, default=4)
    s2.add_argument("--warmup", type=int, default=3)
    s2.add_argument("--updates", type=int, default=10)
    s2.add_argument("--ds-config", type=Path, default=Path("ds_configs/cpu_fp32.json"))
    s2.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args(argv)
    result = step2(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    print(f"Step-2 update, {args.full_layers} vs {args.mini_layers} layers: measured time ratio "
          f"{result['measured_time_ratio']:.2f}, analytic FLOP ratio {result['analytic_flop_ratio']:.2f} "
          f"({result['measured_over_analytic']:.0%} of analytic)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

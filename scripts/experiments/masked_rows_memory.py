"""A process's memory over MLM updates whose masked count changes every update, with the masked rows sent to the
vocabulary projection as they are (``--multiple 1``) or in buckets (the model's default, ``MASKED_ROWS_MULTIPLE``).

    python scripts/experiments/masked_rows_memory.py              # both, each in a fresh process; bf16, MiniLM's shape

On a CPU whose bf16 matmuls run through oneDNN's AMX kernels, every new shape got a bf16 copy of the (V, h)
projection that was never given back (BENCHMARKS.md, "Memory: the masked rows"); elsewhere the two lines may match.
Prints one line per ``--every`` updates: resident set size in MB.
"""
from __future__ import annotations

import argparse
import subprocess
import sys


def rss_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 // 2**20


def run(multiple: int, updates: int, every: int, batch: int, seq_len: int, dtype: str) -> None:
    import torch

    from ds_minimodel.config import ModelConfig
    from ds_minimodel.model.encoder import MaskedLM

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, ffn_size=1536, max_positions=512)
    model = MaskedLM(cfg).to(getattr(torch, dtype)).train()
    model.masked_rows_multiple = multiple
    generator = torch.Generator().manual_seed(1)
    counts = set()
    for update in range(1, updates + 1):
        ids = torch.randint(5, cfg.vocab_size, (batch, seq_len), generator=generator)
        masked = torch.rand(batch, seq_len, generator=generator) < 0.15
        counts.add(int(masked.sum()))
        logits = model(ids, masked_positions=masked)
        sum(t.float().logsumexp(-1).mean() for t in logits.values()).backward()
        model.zero_grad(set_to_none=True)
        if update % every == 0 or update == 1:
            print(f"multiple {multiple:>2}  update {update:>4}  masked counts so far {len(counts):>4}  "
                  f"RSS {rss_mb():>6,} MB", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--multiple", type=int, help="one run with this multiple (default: 1, then the model's own)")
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = p.parse_args(argv)
    if args.multiple is not None:
        run(args.multiple, args.updates, args.every, args.batch, args.seq_len, args.dtype)
        return 0
    from ds_minimodel.model.encoder import MASKED_ROWS_MULTIPLE

    for multiple in (1, MASKED_ROWS_MULTIPLE):  # a fresh process each: memory is what the process keeps
        subprocess.run([sys.executable, __file__, "--multiple", str(multiple), "--updates", str(args.updates),
                        "--every", str(args.every), "--batch", str(args.batch), "--seq-len", str(args.seq_len),
                        "--dtype", args.dtype], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What training at shapes that change every update costs, in memory and in time, with the shapes as they come
(``--multiple 1``) or rounded up into buckets (the package's defaults). Two cases, each a place where the package
rounds:

- ``masked-rows``: Step 1's MLM update, whose vocabulary projection takes only the masked rows, a different count
  almost every update (``model.encoder.MASKED_ROWS_MULTIPLE``; a random 15% of ``--batch`` x ``--seq-len``);
- ``widths``: Step 3's classifier update, each micro-batch cut to its longest input (``data.streams.trim_padding``,
  ``WIDTH_MULTIPLE``); input lengths from ``--tokenizer`` over ``--texts`` (a jsonl with a ``text`` field) when given,
  else drawn from a log-normal around 27 tokens (lohelp's English mean).

    python scripts/experiments/shape_buckets.py                          # masked-rows, 1 then the default; bf16
    python scripts/experiments/shape_buckets.py --case widths --batch 16 --tokenizer T.json --texts train.en.jsonl

Each run is a fresh process (memory is what a process keeps) of MiniLM's shape (6 x 384, vocabulary 30,522) with
AdamW, on the threads torch is given (``OMP_NUM_THREADS``). Prints one line per ``--every`` updates: the process's
resident set size and the mean seconds per update since the line before; then the mean over all updates and over
the second half. On a CPU whose bf16 matmuls run through oneDNN, every new shape got a plan with its own weight
copies that the process kept (BENCHMARKS.md, "Memory: the masked rows").
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np

CASES = ("masked-rows", "widths")


def rss_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 // 2**20


def input_lengths(args: argparse.Namespace, rng: np.random.Generator) -> np.ndarray:
    """Token counts of the task's inputs, capped at ``--seq-len``."""
    if args.tokenizer is None:
        return np.clip(rng.lognormal(np.log(22), 0.6, 20_000).astype(int) + 2, 3, args.seq_len)
    import json

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(args.tokenizer))
    tok.no_padding()
    tok.no_truncation()
    with open(args.texts, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    return np.minimum(args.seq_len, [len(e.ids) for e in tok.encode_batch(texts)])


def batches(args: argparse.Namespace, vocab: int):
    """(input_ids, attention_mask, masked positions or labels) per update, the same for every ``--multiple``."""
    import torch

    from ds_minimodel.data.streams import trim_padding

    generator = torch.Generator().manual_seed(1)
    rng = np.random.default_rng(1)
    lengths = input_lengths(args, rng) if args.case == "widths" else None
    for _ in range(args.updates):
        ids = torch.randint(5, vocab, (args.batch, args.seq_len), generator=generator)
        if lengths is None:
            yield ids, None, torch.rand(args.batch, args.seq_len, generator=generator) < 0.15
            continue
        mask = np.arange(args.seq_len) < rng.choice(lengths, args.batch)[:, None]
        cut = trim_padding({"input_ids": ids.numpy(), "attention_mask": mask}, multiple=args.multiple)
        yield (torch.from_numpy(cut["input_ids"]), torch.from_numpy(cut["attention_mask"]),
               torch.randint(0, 3, (args.batch,), generator=generator))


def run(args: argparse.Namespace) -> None:
    import torch

    from ds_minimodel.config import ModelConfig
    from ds_minimodel.model.encoder import MaskedLM, TaskModel

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, ffn_size=1536, max_positions=512)
    if args.case == "masked-rows":
        model = MaskedLM(cfg)
        model.masked_rows_multiple = args.multiple
    else:
        model = TaskModel(cfg, "sequence", num_labels=3)
    model = model.to(getattr(torch, args.dtype)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    shapes, times, since = set(), [], 0
    for update, (ids, mask, target) in enumerate(batches(args, cfg.vocab_size), start=1):
        start = time.perf_counter()
        if args.case == "masked-rows":
            shapes.add(-(-int(target.sum()) // args.multiple) * args.multiple)  # the rows the projection takes
            logits = model(ids, masked_positions=target)
            loss = sum(t.float().logsumexp(-1).mean() for t in logits.values())
        else:
            shapes.add(ids.shape[1])
            loss = torch.nn.functional.cross_entropy(model(ids, mask).float(), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        if update % args.every == 0 or update == 1:
            window = times[since:]
            since = len(times)
            print(f"{args.case}  multiple {args.multiple:>2}  update {update:>4}  shapes so far {len(shapes):>4}  "
                  f"RSS {rss_mb():>6,} MB  {sum(window) / len(window):.4f} s/update", flush=True)
    half = times[len(times) // 2:]
    print(f"{args.case}  multiple {args.multiple:>2}  {len(times)} updates  {len(shapes)} shapes  "
          f"mean {sum(times) / len(times):.4f} s/update  second half {sum(half) / len(half):.4f} s/update", flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default="masked-rows", choices=CASES)
    p.add_argument("--multiple", type=int, help="one run with this multiple (default: 1, then the package's own)")
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--tokenizer", help="widths: a tokenizer.json whose token counts of --texts give the lengths")
    p.add_argument("--texts", help="widths: a jsonl with a text field per line")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if (args.tokenizer is None) != (args.texts is None):
        p.error("--tokenizer and --texts go together")
    if args.multiple is not None:
        run(args)
        return 0
    from ds_minimodel.data.streams import WIDTH_MULTIPLE
    from ds_minimodel.model.encoder import MASKED_ROWS_MULTIPLE

    own = MASKED_ROWS_MULTIPLE if args.case == "masked-rows" else WIDTH_MULTIPLE
    passed = list(argv if argv is not None else sys.argv[1:])
    for multiple in (1, own):  # a fresh process each: memory is what the process keeps
        subprocess.run([sys.executable, __file__, *passed, "--multiple", str(multiple)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The test suite's demo pipeline (``tests/integration/conftest.py``, ``demo_test_config``) with its Step 1 changed,
to see whether a cheaper Step 1 still gives English classifiers over the bar ``test_pipeline.py`` sets (each above the
majority class on English dev, their mean 5 points above it). Prepares the demo's English and German data as the
suite does (once per ``--root``), runs the pipeline on one rank with one thread, as the fixture does, and prints each
Step-1 run's last loss, each classifier's English dev accuracy, their mean and the run's wall clock.

    python scripts/experiments/fixture_variants.py --root runs/fixture --name b16 --batch 16
    python scripts/experiments/fixture_variants.py --root runs/fixture --name lr3e3 --lr 3e-3 --steps 450 \\
        --systems bl_base --step2-steps 1
    python scripts/experiments/fixture_variants.py --root runs/fixture --name preln --model '{"pre_norm": true}' \\
        --steps 450 --systems bl_base --step2-steps 1

BENCHMARKS.md, "The test suite (CPU)", has what each variant gave.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.integration.conftest import DEMO, demo_test_config, prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="folder for the prepared data and every variant")
    parser.add_argument("--name", required=True, help="this variant's folder under --root")
    parser.add_argument("--lr", type=float, help="Step 1's peak learning rate (default: the demo's)")
    parser.add_argument("--steps", type=int, help="Step 1's updates (default: the fixture's 900)")
    parser.add_argument("--batch", type=int, help="Step 1's global batch, in one micro-batch (default: the demo's 32)")
    parser.add_argument("--seed", type=int, help="the pipeline's seed (default: the demo's)")
    parser.add_argument("--systems", help="comma-separated (default: the demo's four)")
    parser.add_argument("--step2-steps", type=int, help="Step 2's updates, saved at the end (default: the fixture's)")
    parser.add_argument("--epochs", type=float, help="Step 3's epochs (default: the fixture's)")
    parser.add_argument("--model", type=json.loads, default={},
                        help='model fields over the demo preset\'s, as JSON: e.g. \'{"pre_norm": true}\'')
    args = parser.parse_args()

    root = args.root / args.name
    if root.exists():
        parser.error(f"{root} exists: give this variant another --name")
    prepared = {}
    for lang in ("en", "de"):
        prepared[lang] = args.root / "data" / lang
        if not prepared[lang].exists():
            prepare(DEMO / f"corpus/{lang}.txt", prepared[lang])
    root.mkdir(parents=True)
    config = demo_test_config(root, prepared)
    step1_ds = Path(config["step1"]["ds_config"])
    ds = json.loads(step1_ds.read_text())
    if args.lr is not None:
        ds["optimizer"]["params"]["lr"] = ds["scheduler"]["params"]["warmup_max_lr"] = args.lr
    if args.batch is not None:
        ds["train_batch_size"] = ds["train_micro_batch_size_per_gpu"] = args.batch
    step1_ds.write_text(json.dumps(ds))
    if args.steps is not None:
        config["step1"].update(steps=args.steps, save_every=args.steps)
    if args.seed is not None:
        config["seed"] = args.seed
    if args.systems:
        config["systems"] = args.systems.split(",")
    if args.step2_steps is not None:
        config["step2"].update(steps=args.step2_steps, save_every=args.step2_steps)
    if args.epochs is not None:
        config["step3"].update(epochs=args.epochs)
    if args.model:
        config["model"] = {**config.get("model", {}), **args.model}
    path = root / "pipeline.json"
    path.write_text(json.dumps(config))

    start = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--launcher", "torchrun"],
                   cwd=REPO, env=env, check=True)
    took = time.monotonic() - start
    out = Path(config["out"])
    for run in sorted((out / "step1").iterdir()):
        last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
        print(f"step1 {run.name}: loss {last['loss']:.4f} at update {last['step']}")
    accuracies = []
    for scores in sorted((out / "step3").glob("*/*/seed*/dev_scores.json")):
        accuracy = json.loads(scores.read_text())["accuracy"]
        accuracies.append(accuracy)
        print(f"step3 {scores.parent.parent.name} {scores.parent.name}: English dev accuracy {accuracy:.2f}")
    if accuracies:
        print(f"mean {sum(accuracies) / len(accuracies):.2f} over {len(accuracies)} classifiers")
    print(f"pipeline: {took:.0f} s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Is the demo's English classifier held back by its Step-3 recipe, and does a better one transfer better?

The demo (``configs/demo.json``) finetunes BL_BASE's primary for 3 epochs at 1e-3 and its English classifier reads
English dev far under the bag of words. This finetunes the same primary of a finished demo run again with other
rates and lengths (its two seeds, one rank taking the demo's global batch of 32 in one micro-batch, which trains the
demo's weights: the 1e-3, 3-epoch row reproduces the pipeline's dev scores), then reads each classifier on English
dev and, through BL_BASE's and MiniPost's German rows at every Step-2 checkpoint, on the German dev set the demo
ships. Dev sets only: the choice is read there.

    bash scripts/demo.sh                                     # a finished demo run in runs/demo
    .venv/bin/python scripts/experiments/demo_step3_recipes.py [--run runs/demo] [--out runs/demo-step3-recipes]

Resumable: a variant whose classifier finished is not trained again. Output: ``OUT/scores.jsonl`` (one line per
classifier and embeddings read) and the table this prints (means over the two seeds).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# (peak rate, epochs); the first is the demo's own recipe
VARIANTS = [(1e-3, 3.0), (3e-3, 3.0), (3e-4, 3.0), (1e-4, 3.0), (1e-3, 10.0)]
SEEDS = (1, 2)
SYSTEMS = ("bl_base", "minipost")  # both read through BL_BASE's primary's classifier


def name(lr: float, epochs: float) -> str:
    return f"lr{lr:g}-ep{epochs:g}"


def finetune(run: Path, out: Path, lr: float, epochs: float, seed: int, env: dict) -> Path:
    """BL_BASE's classifier of ``seed`` trained again at ``lr`` for ``epochs``; its folder."""
    folder = out / name(lr, epochs) / f"seed{seed}"
    if not (folder / "summary.json").is_file():
        ds = json.loads((REPO / "ds_configs/cpu_finetune.json").read_text())
        ds["train_micro_batch_size_per_gpu"] = ds["train_batch_size"]
        ds["optimizer"]["params"]["lr"] = lr
        ds["scheduler"]["params"]["warmup_max_lr"] = lr
        ds_path = out / f"{name(lr, epochs)}.ds.json"
        ds_path.write_text(json.dumps(ds, indent=2))
        spec = json.loads((run / "specs" / f"step3-lohelp-base-seed{seed}.json").read_text())
        spec.update(ds_config=str(ds_path), epochs=epochs, out=str(folder), run_name=f"{name(lr, epochs)}-seed{seed}",
                    log_root=str(out / "tensorboard"), resume=(folder / "run.json").is_file())
        spec_path = out / f"{name(lr, epochs)}-seed{seed}.spec.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        subprocess.run([sys.executable, "run_finetune.py", "--config", str(spec_path)], cwd=REPO, env=env, check=True)
    return folder


def evaluate(classifier: Path, embeddings: list[Path], test: Path, env: dict) -> list[dict]:
    ckpt = max((classifier / "checkpoints").glob("step_*"))
    cmd = [sys.executable, "-m", "ds_minimodel", "evaluate", "--task-model", str(ckpt), "--test", str(test),
           "--lang", "de"]
    if embeddings:
        cmd += ["--embeddings", *map(str, embeddings)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def table(rows: list[dict]) -> list[str]:
    """One line per variant: English dev, and German dev through each system's rows at its last Step-2 checkpoint,
    means over the seeds, accuracy (macro-F1)."""
    last = {s: max(r["update"] for r in rows if r["system"] == s) for s in SYSTEMS}
    lines = [f"{'variant':<16}{'English':>16}" + "".join(f"{'German, ' + s + ' ' + str(last[s]):>26}" for s in SYSTEMS)]
    for variant in dict.fromkeys(r["variant"] for r in rows):
        cells = []
        for lang, system in [("en", "own")] + [("de", s) for s in SYSTEMS]:
            picked = [r for r in rows if r["variant"] == variant and r["lang"] == lang and r["system"] == system
                      and (lang == "en" or r["update"] == last[system])]
            acc = statistics.mean(r["accuracy"] for r in picked)
            f1 = statistics.mean(r["macro_f1"] for r in picked)
            cells.append(f"{acc:.1f} ({f1:.1f})")
        lines.append(f"{variant:<16}{cells[0]:>16}" + "".join(f"{c:>26}" for c in cells[1:]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=Path("runs/demo"), help="a finished demo run (configs/demo.json)")
    parser.add_argument("--out", type=Path, default=Path("runs/demo-step3-recipes"))
    args = parser.parse_args()
    run, out = (REPO / args.run).resolve(), (REPO / args.out).resolve()
    for needed in ("step1/base", "step2/de/bl_base", "step2/de/minipost", "specs/step3-lohelp-base-seed1.json"):
        if not (run / needed).exists():
            sys.exit(f"{run}: no {needed}; run the demo first (bash scripts/demo.sh)")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    german_dev = REPO / "demo_data/tasks/lohelp/dev.de.jsonl"
    rows = []
    for lr, epochs in VARIANTS:
        for seed in SEEDS:
            folder = finetune(run, out, lr, epochs, seed, env)
            english = json.loads((folder / "dev_scores.json").read_text())
            base = {"variant": name(lr, epochs), "lr": lr, "epochs": epochs, "seed": seed}
            rows.append({**base, "lang": "en", "system": "own", "update": None,
                         "accuracy": english["accuracy"], "macro_f1": english["macro_f1"]})
            for system in SYSTEMS:
                ckpts = sorted((run / "step2/de" / system / "checkpoints").glob("step_*"))
                for score in evaluate(folder, ckpts, german_dev, env):
                    rows.append({**base, "lang": "de", "system": system, "update": int(score["embeddings"][-8:]),
                                 "accuracy": score["accuracy"], "macro_f1": score["macro_f1"]})
    with open(out / "scores.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"\nBL_BASE's classifier of the demo run {args.run}, mean over seeds {list(SEEDS)}: "
          "accuracy (macro-F1) on dev")
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()

"""How much Step 3 (and Step 1) the English classifier needs before it reads lohelp: the GPU reference's sizing.

The GPU reference plan gives Step 3 what is left of its time after Steps 1, 1b and 2 (``tools.gpu_reference.SHARES``):
on the seventh lease 0.11 of an epoch, planned from that lease for an 8-minute call 0.41, where the CPU reference's
classifier that reads English dev as well as the bag of words trained 3 epochs of 32 at 1e-4 (RESULTS.md, "Two
levers on dev"). This finetunes the English classifier over given bodies with the variants named on the command line,
each ``BATCH:LR:EPOCHS`` (the rest as ``--ds-config``: the CPU's ``cpu_bf16_finetune.json``), and prints, per body and
variant, English dev accuracy and macro-F1, the updates it took and their wall clock; ``OUT/results.jsonl`` holds
every finished run under ``--out``. Dev only; finished runs are read again, not retrained.

With ``--transfer STEP2_RUN --lang L``, each classifier of the call is also read zero-shot on L's dev file with the
embeddings of every complete checkpoint of that Step-2 run swapped in (Step 4 on dev), one row per (classifier,
checkpoint) in ``OUT/transfer.L.jsonl``: what a Step-3 recipe chosen on English does to transfer.

    python scripts/experiments/step3_budget.py --out runs/step3-budget \\
        --body runs/reference/step1/base/checkpoints/step_00003000 --variants 32:1e-4:3 32:1e-4:1 128:4e-4:3 \\
        [--transfer runs/reference/step2/de/bl_base --lang de]
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
from ds_minimodel.tasks.evaluate import zero_shot
from ds_minimodel.train.checkpoint import complete_checkpoints, load_meta

TASK = REPO / "reference_data/tasks/lohelp"


def variant(text: str) -> tuple[int, float, float]:
    try:
        batch, lr, epochs = text.split(":")
        return int(batch), float(lr), float(epochs)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected BATCH:LR:EPOCHS, e.g. 32:1e-4:3") from None


def ds_config(base: Path, batch: int, lr: float, ranks: int) -> dict:
    cfg = json.loads(base.read_text(encoding="utf-8"))
    cfg["train_batch_size"] = batch
    cfg["train_micro_batch_size_per_gpu"] = min(batch // ranks, cfg["train_micro_batch_size_per_gpu"])
    cfg["optimizer"]["params"]["lr"] = lr
    cfg["scheduler"]["params"]["warmup_max_lr"] = lr
    return cfg


def finetune(body: Path, out: Path, batch: int, lr: float, epochs: float, seed: int, ranks: int, base: Path) -> dict:
    """One classifier in ``out/run`` (its DeepSpeed JSON, log and wall clock beside it); an interrupted one resumed."""
    run = out / "run"
    scores = run / "dev_scores.json"
    if not scores.is_file():
        out.mkdir(parents=True, exist_ok=True)
        config = out / "ds_config.json"
        config.write_text(json.dumps(ds_config(base, batch, lr, ranks), indent=1), encoding="utf-8")
        resume = ["--resume"] if (run / "run.json").is_file() else []
        started = time.monotonic()
        command = ["torchrun", "--standalone", f"--nproc_per_node={ranks}", str(REPO / "run_finetune.py"),
                   "--model", str(body), "--task", "lohelp", "--format", "generic",
                   "--train", str(TASK / "train.en.jsonl"), "--dev", str(TASK / "dev.en.jsonl"), "--language", "en",
                   "--ds-config", str(config), "--epochs", str(epochs), "--max-len", "128", "--pooling", "cls",
                   "--seed", str(seed), "--out", str(run), *resume]
        with open(out / "finetune.log", "a", encoding="utf-8") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                           env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
        (out / "wall_s.txt").write_text(f"{time.monotonic() - started:.1f}\n", encoding="utf-8")
    dev = json.loads(scores.read_text(encoding="utf-8"))
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    wall = out / "wall_s.txt"
    return {"accuracy": dev["accuracy"], "macro_f1": dev["macro_f1"], "updates": json.loads(lines[-1])["step"],
            "wall_s": float(wall.read_text()) if wall.is_file() else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--body", type=Path, action="append", required=True, help="a Step-1 checkpoint (repeatable)")
    parser.add_argument("--variants", type=variant, nargs="+", required=True, help="BATCH:LR:EPOCHS each")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--ds-config", type=Path, default=REPO / "ds_configs/cpu_bf16_finetune.json")
    parser.add_argument("--transfer", type=Path, help="a Step-2 run folder whose checkpoints are read (with --lang)")
    parser.add_argument("--lang", help="the Step-2 run's language: its dev file is read")
    args = parser.parse_args()
    if (args.transfer is None) != (args.lang is None):
        parser.error("--transfer and --lang go together")
    if args.transfer is not None:  # checked before any classifier trains
        saves = complete_checkpoints(args.transfer)
        if not saves:
            parser.error(f"{args.transfer}: no complete Step-2 checkpoint in it")
        learned_for = load_meta(saves[-1]).details.get("lang")
        if learned_for not in (None, args.lang):
            parser.error(f"{args.transfer}: embeddings learned for {learned_for!r}, but --lang is {args.lang!r}")
        if not (TASK / f"dev.{args.lang}.jsonl").is_file():
            parser.error(f"{TASK / f'dev.{args.lang}.jsonl'}: no dev file for --lang {args.lang!r}")
    classifiers = []
    print("body | batch | lr | epochs | seed | updates | English dev | macro-F1 | wall s", flush=True)
    for body in args.body:
        for batch, lr, epochs in args.variants:
            for seed in args.seeds:
                name = f"{body.name}/b{batch}-lr{lr:g}-e{epochs:g}/seed{seed}"
                row = {"body": str(body), "batch": batch, "lr": lr, "epochs": epochs, "seed": seed,
                       **finetune(body, args.out / name, batch, lr, epochs, seed, args.ranks, args.ds_config)}
                classifiers.append((args.out / name / "run", row))
                print(f"{body.name} | {batch} | {lr:g} | {epochs:g} | {seed} | {row['updates']} | "
                      f"{row['accuracy']:.1f} | {row['macro_f1']:.1f} | {row['wall_s']}", flush=True)
    finished = [read_run(path.parent) for path in sorted(args.out.glob("*/*/seed*/run/dev_scores.json"))]
    with open(args.out / "results.jsonl", "w", encoding="utf-8") as f:  # every finished run under --out, this call's
        f.writelines(json.dumps(row) + "\n" for row in finished)       # and earlier ones'
    if args.transfer is not None:
        transfer(classifiers, args.transfer, TASK / f"dev.{args.lang}.jsonl", args.lang,
                 args.out / f"transfer.{args.lang}.jsonl")
    return 0


def transfer(classifiers: list[tuple[Path, dict]], step2: Path, dev: Path, lang: str, out: Path) -> None:
    """Each classifier's (its run folder, its settings) final save with each Step-2 checkpoint's embeddings on
    ``dev`` in ``lang``; rows already in ``out`` (same classifier and checkpoint) are kept, not scored again."""
    kept = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] if out.is_file() else []
    done = {(row["task_model"], row["embeddings"]) for row in kept}
    print(f"{lang} dev: body | batch | lr | epochs | seed | Step-2 update | accuracy | macro-F1", flush=True)
    saves = complete_checkpoints(step2)
    with open(out, "a", encoding="utf-8") as f:
        for run, settings in classifiers:
            model = complete_checkpoints(run)[-1]
            for ckpt in saves:
                if (str(model), str(ckpt)) in done:
                    continue
                record = zero_shot(model, ckpt, dev, lang)
                row = {**{k: settings[k] for k in ("body", "batch", "lr", "epochs", "seed")}, **record}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{Path(row['body']).name} | {row['batch']} | {row['lr']:g} | {row['epochs']:g} | "
                      f"{row['seed']} | {row['step2_update']} | {row['accuracy']:.1f} | {row['macro_f1']:.1f}",
                      flush=True)


def read_run(run: Path) -> dict:
    """A finished classifier's row, from its own files: the body and settings its run.json records, its scores."""
    record = json.loads((run / "run.json").read_text(encoding="utf-8"))
    ds = json.loads((run.parent / "ds_config.json").read_text(encoding="utf-8"))
    dev = json.loads((run / "dev_scores.json").read_text(encoding="utf-8"))
    wall = run.parent / "wall_s.txt"
    return {"body": record["spec"]["model"], "batch": ds["train_batch_size"], "lr": ds["optimizer"]["params"]["lr"],
            "epochs": record["spec"]["epochs"], "seed": record["seed"], "updates": record["train"]["steps"],
            "accuracy": dev["accuracy"], "macro_f1": dev["macro_f1"],
            "wall_s": float(wall.read_text()) if wall.is_file() else None}


if __name__ == "__main__":
    sys.exit(main())

"""Step 4's results.json from committed readings, for a run whose checkpoints are gone.

A run too long for one session (``results/minilm-long-test``) reads each Step-2 checkpoint on the test file with
every finetuned classifier as it is saved (``label_shares.py``: the function Step 4 scores with) and commits those
readings and Step 2's training log, not the checkpoints. Where the machine is lost before Step 4, this builds the
results.json Step 4 would have written from them, for ``python -m ds_minimodel analysis``: one zero-shot record per
reading, its seed and update read from the paths it names, its FLOPs the update times Step 2's FLOPs per update
from the same system's training log (the analytic figure the checkpoint would have carried); the source-language
dev scores from ``step3-<primary>-seed<k>.dev_scores.json``; the trivial baselines computed from the config's task
files. The source-language test scores (the primaries with their own embeddings) need the classifiers: none.

    python scripts/experiments/readings_results.py --config configs/reference_minilm_continued_long.json \\
        --folder results/minilm-long-test --out runs/minilm-long-test-step4
    python -m ds_minimodel analysis --results runs/minilm-long-test-step4/results.json --no-plots

Readings files are ``step2-<lang>-<system>.test_readings.jsonl`` beside ``step2-<lang>-<system>.metrics.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ds_minimodel.config import read_json
from ds_minimodel.errors import InputError, report
from ds_minimodel.flops import to_gpu_days
from ds_minimodel.pipeline.records import METRICS, DevScore, Results, Score
from ds_minimodel.pipeline.results import task_baselines, write_results
from ds_minimodel.pipeline.settings import PipelineConfig, TaskSettings
from ds_minimodel.systems import is_system
from ds_minimodel.tasks.readers import jsonl_objects

READINGS = re.compile(r"step2-(?P<lang>[^-]+)-(?P<system>.+)\.test_readings\.jsonl")
DEV = re.compile(r"step3-(?P<primary>.+)-seed(?P<seed>\d+)\.dev_scores\.json")
RELATIVE_SPREAD = 1e-9
"""How far FLOPs per update may vary over a training log's lines (float rounding of an analytic constant)."""


def flops_per_update(path: Path) -> float:
    """Step 2's analytic FLOPs per update, from its training log (``flops`` over ``step`` on every line)."""
    if not path.is_file():
        raise InputError(f"{path}: no such file (the Step-2 training log beside its readings gives the FLOPs)")
    ratios = []
    for n, row in jsonl_objects(path):
        if not isinstance(row.get("flops"), (int, float)) or not isinstance(row.get("step"), int) or row["step"] < 1:
            raise InputError(f"{path}:{n}: needs a number 'flops' and a positive 'step'")
        ratios.append(row["flops"] / row["step"])
    if not ratios:
        raise InputError(f"{path}: empty")
    if max(ratios) - min(ratios) > RELATIVE_SPREAD * max(ratios):
        raise InputError(f"{path}: FLOPs per update vary from {min(ratios):.6g} to {max(ratios):.6g}; "
                         "Step 2's are one constant")
    return ratios[-1]


def _number(pattern: str, text: str, where: str, what: str) -> int:
    found = re.search(pattern, text)
    if found is None:
        raise InputError(f"{where}: {what} not found in {text!r}")
    return int(found.group(1))


def zero_shot_scores(folder: Path, task: TaskSettings) -> list[Score]:
    """One Step-4 record per reading of ``folder``'s readings files, for ``task``."""
    records, seen = [], {}
    paths = sorted(folder.glob("step2-*.test_readings.jsonl"))
    if not paths:
        raise InputError(f"{folder}: no step2-<lang>-<system>.test_readings.jsonl")
    for path in paths:
        match = READINGS.fullmatch(path.name)
        if match is None or not is_system(match["system"]):
            raise InputError(f"{path}: not named step2-<lang>-<system>.test_readings.jsonl with a known system")
        lang, system = match["lang"], match["system"]
        if lang not in task.test:
            raise InputError(f"{path}: task {task.name!r} has no test file for {lang!r}")
        per_update = flops_per_update(folder / f"step2-{lang}-{system}.metrics.jsonl")
        for n, r in jsonl_objects(path):
            where = f"{path}:{n}"
            if r.get("lang") != lang or Path(r.get("file", "")) != Path(task.test[lang]):
                raise InputError(f"{where}: reads {r.get('file')!r} ({r.get('lang')}), not task {task.name!r}'s "
                                 f"{lang} test file {task.test[lang]}")
            if f"/step2/{lang}/{system}/" not in r.get("embeddings", ""):
                raise InputError(f"{where}: embeddings {r.get('embeddings')!r} are not {system}'s {lang} Step 2")
            seed = _number(r"/seed(\d+)/", str(r.get("task_model")), where, "the finetuning seed")
            update = _number(r"/step_(\d+)/?$", r["embeddings"], where, "the Step-2 update")
            key = (lang, system, seed, update)
            if key in seen:
                raise InputError(f"{where}: {system} {lang} seed {seed} update {update} read twice "
                                 f"(first at line {seen[key]})")
            seen[key] = n
            metrics = {k: r[k] for k in METRICS if k in r}
            if not metrics or not all(isinstance(v, (int, float)) for v in metrics.values()):
                raise InputError(f"{where}: needs numbers among {', '.join(METRICS)}; has {sorted(metrics)}")
            step2_flops = update * per_update
            records.append(Score(task=task.name, lang=lang, seed=seed,
                                 metrics={k: float(v) for k, v in metrics.items()}, test_file=r["file"],
                                 task_model=r["task_model"], system=system, embeddings=r["embeddings"],
                                 step2_update=update, step2_flops=step2_flops, v100_days=to_gpu_days(step2_flops)))
    return records


def dev_scores(folder: Path, task: TaskSettings) -> list[DevScore]:
    rows = []
    for path in sorted(folder.glob("step3-*-seed*.dev_scores.json")):
        if (match := DEV.fullmatch(path.name)) is not None:
            rows.append(DevScore.from_dict({"task": task.name, "primary": match["primary"],
                                            "seed": int(match["seed"]), **read_json(path)}, str(path)))
    return rows


def build(config: Path, folder: Path, out: Path, task_name: str | None, source_model_from: Path | None) -> dict:
    cfg = PipelineConfig.load(config)
    tasks = {t.name: t for t in cfg.tasks}
    name = task_name or next(iter(tasks))
    if name not in tasks:
        raise InputError(f"{config}: no task {name!r}; its tasks: {', '.join(tasks)}")
    task = tasks[name]
    records = zero_shot_scores(folder, task)
    source_model = None if source_model_from is None else Results.load(source_model_from).source_model
    if source_model_from is not None and (source_model is None or cfg.source.model is None):
        raise InputError(f"{source_model_from}: its run and {config} must both start from a given source model")
    out.mkdir(parents=True, exist_ok=True)
    return write_results(out, records, dev_scores(folder, task), baselines=task_baselines(task, cfg.source.lang),
                         source_model=source_model)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, required=True, help="the run's pipeline config (its task files)")
    p.add_argument("--folder", type=Path, required=True, help="the committed readings and training logs")
    p.add_argument("--out", type=Path, required=True, help="where results.json, results.csv and results_mean.csv go")
    p.add_argument("--task", help="the config's task the readings are of (default: its first)")
    p.add_argument("--source-model-from", type=Path,
                   help="a results.json of another run from the same given source model: its record of that model")
    args = p.parse_args(argv)
    try:
        print(json.dumps(build(args.config, args.folder, args.out, args.task, args.source_model_from)))
    except InputError as err:
        return report(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())

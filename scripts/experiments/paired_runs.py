"""Two pipelines' zero-shot scores at each one's last Step-2 checkpoint, seed by seed: for runs read by the same
finetuned classifiers (same primaries, same Step-3 seeds), the per-seed difference shows what the Step-2 change did
without the spread between classifiers. Prints, per system and language, both means and the differences seed by
seed, then each system's mean over languages; accuracy and macro-F1. Optionally a checkpoint of the new run to read
instead of its last (``--at 600``: where the long run stood after the short run's number of updates).

    python scripts/experiments/paired_runs.py results/reference-focus/results.json \\
        results/relearn-long/all/results.json
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.records import Results

METRICS = ("accuracy", "macro_f1")


def by_seed(results: Results, task: str, at: int | None = None) -> dict[tuple[str, str], dict[int, dict]]:
    """{(system, lang): {seed: metrics}} at the last Step-2 checkpoint of each (system, lang), or at update ``at``."""
    points = defaultdict(lambda: defaultdict(dict))
    for r in results.zero_shot:
        if r.task == task:
            points[(r.system, r.lang)][r.step2_update][r.seed] = r.metrics
    out = {}
    for key, updates in points.items():
        update = max(updates) if at is None else at
        if update in updates:
            out[key] = updates[update]
    return out


def compare(old: Results, new: Results, task: str, at: int | None) -> list[str]:
    before, after = by_seed(old, task), by_seed(new, task, at)
    shared = sorted(set(before) & set(after))
    if not shared:
        raise InputError(f"the two runs share no (system, language) with scores for task {task!r}"
                         + (f" at update {at}" if at is not None else ""))
    lines, means = [], defaultdict(lambda: defaultdict(list))
    for system, lang in shared:
        seeds = sorted(set(before[(system, lang)]) & set(after[(system, lang)]))
        if not seeds:
            raise InputError(f"{system} {lang}: the two runs share no finetuning seed")
        parts = []
        for metric in METRICS:
            old_mean = statistics.fmean(before[(system, lang)][s][metric] for s in seeds)
            new_mean = statistics.fmean(after[(system, lang)][s][metric] for s in seeds)
            diffs = ", ".join(f"{after[(system, lang)][s][metric] - before[(system, lang)][s][metric]:+.1f}"
                              for s in seeds)
            parts.append(f"{metric} {old_mean:.1f} -> {new_mean:.1f} (seeds {' '.join(map(str, seeds))}: {diffs})")
            means[system][metric].append((old_mean, new_mean))
        lines.append(f"{system:10} {lang:4} " + "; ".join(parts))
    for system, by_metric in means.items():
        lines.append(f"{system:10} mean " + "; ".join(
            f"{metric} {statistics.fmean(o for o, _ in pairs):.1f} -> {statistics.fmean(n for _, n in pairs):.1f}"
            for metric, pairs in by_metric.items()))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the run compared against (its last checkpoint)")
    parser.add_argument("new", type=Path)
    parser.add_argument("--task", default="lohelp")
    parser.add_argument("--at", type=int, help="read the new run at this Step-2 update instead of its last")
    args = parser.parse_args(argv)
    try:
        print("\n".join(compare(Results.load(args.old), Results.load(args.new), args.task, args.at)))
    except InputError as err:
        print(f"paired_runs.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``ds-minimodel analysis``: every table and figure of the paper that a pipeline's ``results.json`` holds, written
into one folder: Tables 2 and 3 (scores and compute to near-maximal performance), Figure 1 (speedups), Figure 3
(score against Step-2 compute) and the diagnostics; where the run has them, the depth study's Table 4, Table A3 and
Figure 4, Table 5 (mini-models on English), Table A5 (further pretraining runs) and Table 3 over further Step-2 runs
(``table3_step2_runs.txt``, ``time_to_target_step2_runs.json``).

Only results.json is read: the analysis of a finished run can be redone anywhere, without its checkpoints.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ds_minimodel.config import write_csv, write_json
from ds_minimodel.errors import InputError, report
from ds_minimodel.pipeline import dev_choice, studies
from ds_minimodel.pipeline.analysis import (
    AVERAGE,
    NEAR_MAXIMAL,
    analyse,
    average_over_languages,
    curves,
    diagnostics,
    own_scores,
    table2,
    table3,
    trivial_scores,
)
from ds_minimodel.pipeline.figures import plot_curves, plot_speedups
from ds_minimodel.pipeline.records import Results
from ds_minimodel.systems import BASELINE, get_system


def run(results_path: Path, out: Path, *, plots: bool = True) -> dict[str, Any]:
    results = Results.load(results_path)
    all_curves, metrics = curves(results.zero_shot_over_seeds, f"{results_path}: zero_shot_over_seeds")
    if not all_curves:
        raise InputError(f"{results_path}: holds no zero-shot scores yet")
    relearn_curves = curves(results.source_relearn_over_seeds, f"{results_path}: source_relearn_over_seeds")[0]
    trivial = trivial_scores(results)
    majority, bag_of_words = ({(task, lang): v[kind] for (task, lang, split), v in trivial.items()
                               if split == "test" and kind in v} for kind in ("majority", "bag_of_words"))
    baseline = get_system(BASELINE).primary  # the source line: BL_BASE's primary with its own embeddings
    source_score = {task: p.score for (task, _, primary), p in own_scores(results).items() if primary == baseline}
    out.mkdir(parents=True, exist_ok=True)
    rows = analyse(all_curves, majority)
    averaged = average_over_languages(all_curves)
    tables = {"table2": table2(all_curves, metrics, trivial, results.source_model), "table3": table3(rows),
              "diagnostics": diagnostics(results, all_curves, relearn_curves, metrics),
              "table4": studies.table4(rows), "table_a3": studies.table_a3(all_curves),
              "table5": studies.table5(results), "table_a5": studies.table_a5(results),
              "chosen_on_dev": dev_choice.table(results, results_path.parent / "export")}
    tables["table3_step2_runs"], over_runs = studies.step2_runs(results, majority, str(results_path))
    for name, text in tables.items():
        if text:  # the studies' tables exist only where the run has a depth sweep or finetuned mini-models
            (out / f"{name}.txt").write_text(text + "\n", encoding="utf-8")
    records = [asdict(row) for row in rows]
    write_json(out / "time_to_target.json", {"near_maximal": NEAR_MAXIMAL, "baseline": BASELINE, "rows": records})
    if records:
        write_csv(out / "time_to_target.csv", records, fieldnames=list(records[0]))
    if over_runs:
        write_json(out / "time_to_target_step2_runs.json", over_runs)
    if averaged:  # a task with two target languages or more
        write_json(out / "curves_over_languages.json", {
            "note": "mean over target languages of the per-seed-mean curves, at the updates all languages share",
            "curves": [{"task": task, "system": system, "points": [asdict(p) for p in curve]}
                       for (task, _, system), curve in sorted(averaged.items())]})
    averaged_majority, averaged_bow = (_over_languages(line, averaged, all_curves) for line in (majority, bag_of_words))
    figures = []
    if plots:
        figures = [*plot_curves(all_curves, rows, metrics, out, majority=majority, bag_of_words=bag_of_words,
                                source_score=source_score),
                   *plot_curves(averaged, [], metrics, out, majority=averaged_majority, bag_of_words=averaged_bow,
                                source_score=source_score),
                   *plot_curves(relearn_curves, [], metrics, out, majority=majority, source_score=source_score,
                                prefix="relearn"),
                   *studies.plot_depths(all_curves, averaged, metrics, out, source_score)]
        speedups = plot_speedups(rows, out)
        if speedups is None:
            tables["table3"] += ("\nfigure1_speedup.png not drawn: no task has a target (no transfer to any "
                                 "language), so there is no speedup to plot")
            (out / "table3.txt").write_text(tables["table3"] + "\n", encoding="utf-8")
        else:
            figures.append(speedups)
    return {**tables, "figures": [str(p) for p in figures], "out": str(out)}


def _over_languages(line: dict[tuple[str, str], float], averaged: dict[tuple[str, str, str], Any],
                    all_curves: dict[tuple[str, str, str], Any]) -> dict[tuple[str, str], float]:
    """A reference line's mean over each task's target languages (those with BL_BASE curves): the line drawn with the
    curves averaged over languages."""
    means = {}
    for task in {k[0] for k in averaged}:
        values = [v for (t, lang), v in line.items() if t == task and (t, lang, BASELINE) in all_curves]
        if values:
            means[(task, AVERAGE)] = sum(values) / len(values)
    return means


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ds-minimodel analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, required=True, help="results.json written by the pipeline")
    p.add_argument("--out", type=Path, help="folder for tables and plots (default: <results folder>/analysis)")
    p.add_argument("--no-plots", action="store_true", help="tables only, no figures")
    args = p.parse_args(argv)
    try:
        summary = run(args.results, args.out or args.results.parent / "analysis", plots=not args.no_plots)
    except InputError as err:
        return report(err)
    print("\n\n".join(summary[name] for name in ("table2", "table3", "table3_step2_runs", "chosen_on_dev",
                                                     "diagnostics", "table4", "table_a3", "table5", "table_a5")
                      if summary[name]))
    print(f"\ntables and time to target: {summary['out']}")
    for figure in summary["figures"]:
        print(f"plot: {figure}")
    return 0

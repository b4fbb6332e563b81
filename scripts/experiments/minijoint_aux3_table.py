"""MiniJoint with its second head after layer 3 (``scripts/experiments/minijoint_aux3_test.sh``) beside the reference
run with WECHSEL rows it is measured against: one results.json that holds the reference run's records for every other
system and the new run's for MiniJoint, the paper's analysis over it (Tables 2 and 3, the speedups, the diagnostics),
and a table of the two MiniJoints side by side on test, language by language.

    python scripts/experiments/minijoint_aux3_table.py runs/minijoint-aux3-test/results.json \
        [--reference results/reference-wechsel/results.json] [--out results/minijoint-aux3-test]

The two runs share their data, their Step-2 recipe and Step 3's seeds; only MiniJoint's primary differs. It reads the
two results files and starts no training.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]
from minijoint_table import macro_f1

from ds_minimodel.pipeline.analysis import curves, time_to_target
from ds_minimodel.pipeline.records import Results
from ds_minimodel.pipeline.report import run as analysis

SYSTEM = "minijoint"
BASE = "bl_base"


def is_minijoint(record) -> bool:
    """A record of MiniJoint's: its transfer scores (``system``) and its classifier's own (``primary``)."""
    return getattr(record, "system", None) == SYSTEM or getattr(record, "primary", None) == SYSTEM


def merged(reference: Results, new: Results) -> Results:
    """The reference run's records, MiniJoint's taken from ``new`` instead (the trivial baselines are the reference
    run's: the same files)."""
    lists = {}
    for key in Results.KINDS:
        theirs = [r for r in getattr(reference, key) if not is_minijoint(r)]
        ours = [r for r in getattr(new, key) if is_minijoint(r)] if key != "baselines" else []
        lists[key] = theirs + ours
    return dataclasses.replace(reference, **lists)


def cell(results: Results, system: str, lang: str, point) -> str:
    f1 = macro_f1(results, system, point.updates, lang)
    return f"{point.score:.1f} +- {point.std:.1f}" + (f" ({f1:.1f})" if f1 is not None else "")


def english(results: Results) -> str:
    """MiniJoint's classifiers on English test: mean accuracy over seeds."""
    values = [s.score for s in results.source_test if s.primary == SYSTEM]
    return f"{statistics.mean(values):.1f} over {len(values)} seeds" if values else "-"


def table(reference: Results, new: Results, where: tuple[str, str]) -> list[str]:
    ref_curves, _ = curves(reference.zero_shot_over_seeds, where[0])
    new_curves, _ = curves(new.zero_shot_over_seeds, where[1])
    lines = [(f"MiniJoint's classifiers on English test: second head after layer 2 {english(reference)}; "
              f"after layer 3 {english(new)}"),
             ("| lang | BL_BASE final | target (95%) | MiniJoint, head after layer 2: update 0 | final | to target "
              "| head after layer 3: update 0 | final | to target | speedup over BL_BASE |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (task, lang, system), base in sorted(ref_curves.items()):
        if system != BASE:
            continue
        target = 0.95 * base[-1].score
        base_cost = time_to_target(base, target).v100_days
        cells = [lang, cell(reference, BASE, lang, base[-1]), f"{target:.1f}"]
        speedup = "-"
        for results, found in ((reference, ref_curves), (new, new_curves)):
            points = found.get((task, lang, SYSTEM))
            if not points:
                cells += ["not scored yet"] * 3
                continue
            cost = time_to_target(points, target).v100_days
            cells += [cell(results, SYSTEM, lang, points[0]), cell(results, SYSTEM, lang, points[-1]),
                      "never" if cost is None else f"{cost:.3g}"]
            if results is new and cost is not None:
                speedup = "at update 0" if cost == 0 else f"{base_cost / cost:.2f}x" if base_cost else "-"
        lines.append("| " + " | ".join(cells + [speedup]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the new run's results.json")
    parser.add_argument("--reference", type=Path, default=Path("results/reference-wechsel/results.json"))
    parser.add_argument("--out", type=Path, help="write the merged results.json and the analysis here")
    args = parser.parse_args(argv)
    reference, new = Results.load(args.reference), Results.load(args.results)
    print("\n".join(table(reference, new, (str(args.reference), str(args.results)))))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        merged(reference, new).write(args.out / "results.json")
        summary = analysis(args.out / "results.json", args.out / "analysis", plots=True)
        print("\n\n".join(summary[name] for name in ("table2", "table3", "diagnostics")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

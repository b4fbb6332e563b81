"""The table of MiniJoint's dev experiment (``scripts/experiments/minijoint_dev.sh``; issue 46 item 4): for the
control and each lever, German dev accuracy (macro-F1) of BL_BASE and MiniJoint at update 0 and at Step 2's last
checkpoint, the English dev score of the primary's classifier, and the Step-2 V100-days to 95% of the control
BL_BASE's final score with the speedup over it (the paper's measure, interpolated between checkpoints as the
pipeline's Table 3 is); then the alignment probe's top-1 after every layer of both control primaries and of each
lever's MiniJoint, at update 0 and at the last update.

    python scripts/experiments/minijoint_table.py [runs/minijoint-dev]

It reads each finished part's results.json (a part not yet scored is said so) and starts nothing.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]
import minijoint_full_system  # noqa: F401  (registers the part full-depth's system, minijoint_full)

from ds_minimodel.pipeline.analysis import curves, time_to_target
from ds_minimodel.pipeline.records import Results

PARTS = ("control", "long-step2", "aux-weight", "aux-layer", "full-depth")
LANG = "de"
PRIMARY = {"bl_base": "base", "bl_small": "small", "minijoint": "minijoint", "minipost": "base",
           "minijoint_full": "minijoint"}
"""Each system's primary, as Step 3 names its classifiers (MiniPost's transfer is read by BL_BASE's; minijoint_full is
the experiment's own, scripts/experiments/minijoint_full_system.py)."""
PROBED = (("control", "bl_base"), ("control", "minijoint"), ("long-step2", "minijoint"), ("aux-weight", "minijoint"),
          ("aux-layer", "minijoint"), ("full-depth", "minijoint_full"))
"""The probe's files, ``<part>/align-<system>.jsonl``, as minijoint_dev.sh writes them."""


def macro_f1(results: Results, system: str, update: float, lang: str = LANG) -> float | None:
    """A system's macro-F1 at one Step-2 checkpoint in one language, mean over seeds (results.json keeps the means
    over seeds of accuracy only)."""
    values = [s.metrics["macro_f1"] for s in results.zero_shot
              if s.system == system and s.lang == lang and s.step2_update == update and "macro_f1" in s.metrics]
    return statistics.mean(values) if values else None


def english_dev(results: Results, primary: str) -> str:
    values = [d.metrics.get("accuracy") for d in results.source_dev if d.primary == primary]
    values = [v for v in values if v is not None]
    return f"{statistics.mean(values):.1f}" if values else "-"


def cell(score: float, f1: float | None) -> str:
    return f"{score:.1f}" + (f" ({f1:.1f})" if f1 is not None else "")


def rows(out: Path) -> list[str]:
    loaded = {part: Results.load(out / part / "results.json") for part in PARTS
              if (out / part / "results.json").is_file()}
    if "control" not in loaded:
        return [f"{out}/control/results.json: not there yet (the control is scored first)"]
    control, _ = curves(loaded["control"].zero_shot_over_seeds, str(out / "control/results.json"))
    base = next(points for (task, lang, system), points in control.items() if lang == LANG and system == "bl_base")
    target = 0.95 * base[-1].score
    base_cost = time_to_target(base, target).v100_days
    lines = [f"target: 95% of the control BL_BASE's final German dev accuracy ({base[-1].score:.1f}) = {target:.1f}",
             "| part | system | English dev | update 0 | last update | score there | V100-days to target | speedup |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for part in PARTS:
        if part not in loaded:
            lines.append(f"| {part} | not scored yet | | | | | | |")
            continue
        results = loaded[part]
        found, _ = curves(results.zero_shot_over_seeds, str(out / part / "results.json"))
        for (task, lang, system), points in sorted(found.items()):
            if lang != LANG:
                continue
            first, last = points[0], points[-1]
            cost = time_to_target(points, target).v100_days
            speedup = ("never" if cost is None else "at update 0" if cost == 0 else
                       f"{base_cost / cost:.2f}x" if base_cost else "- (BL_BASE meets it at update 0)")
            lines.append(f"| {part} | {system} | {english_dev(results, PRIMARY.get(system, system))} | "
                         f"{cell(first.score, macro_f1(results, system, int(first.updates)))} | {int(last.updates)} | "
                         f"{cell(last.score, macro_f1(results, system, int(last.updates)))} | "
                         f"{'-' if cost is None else f'{cost:.3g}'} | {speedup} |")
    for part, system in PROBED:
        probe = out / part / f"align-{system}.jsonl"
        if not probe.is_file():
            lines.append(f"{probe}: not there yet")
            continue
        records = sorted((json.loads(line) for line in probe.read_text(encoding="utf-8").splitlines()),
                         key=lambda r: r["step2_update"])
        for record in (records[0], records[-1]):
            top1 = record["top1"]
            lines.append(f"probe {part} {system} update {record['step2_update']}: top-1 % by layer 0..{len(top1) - 1}: "
                         + " ".join(f"{100 * t:.1f}" for t in top1))
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print("\n".join(rows(Path(args[0] if args else "runs/minijoint-dev"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

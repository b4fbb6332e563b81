"""The paper's compute analysis from a pipeline's results: what ``python -m ds_minimodel analysis``
(``pipeline.report``) writes.

It reads ``results.json`` (written by ``pipeline.plan``: one zero-shot score per system, task, language, seed and
Step-2 checkpoint, with the checkpoint's updates, FLOPs and V100-days); the tables and figures:

- ``table2.txt``: the final checkpoint's score per language next to Step 2's cost (the paper's Table 2);
- ``table3.txt`` and ``time_to_target.json``/``.csv``: V100-days (and updates, FLOPs) each system needs to reach
  near-maximal performance, and its speedup over BL_BASE (the paper's Table 3);
- ``figure3_<task>_<lang>.png``: score against V100-days per system, with the target marked (Figure 3), and
  ``figure3_<task>_avg.png`` with ``curves_over_languages.json``: the same averaged over the task's target
  languages (Figure A2 style);
- ``figure1_speedup.png``: average speedup per task and system (Figure 1).

Definitions (paper section 4.2 and footnotes 5 and 6):

- scores are means over finetuning seeds at each checkpoint;
- the near-maximal target for a task and language is 95% of BL_BASE's final score there;
- the cost to reach a target is interpolated linearly between the checkpoint just before and the first checkpoint
  at or above it (section 3: 48% at 5,000 updates and 1.17 EFLOPs, 52% at 10,000 and 2.34 EFLOPs give 50% at 7,500
  updates and 1.755 EFLOPs). Step 2 saves its initial rows as update 0, so a curve starts at no cost; a target
  already met there costs nothing: the initialised rows alone reach it, and no speedup is defined. A curve
  without an update-0 point (runs from before it was saved) that meets the target at its first checkpoint gets that
  checkpoint's cost, an upper bound, flagged ``at_first_checkpoint``. A target never met is ``never``. Each estimate
  comes with the paper's lower and upper bounds (appendix A.4, Table A4): the cost at the checkpoint before the
  crossing (0.0 when the first checkpoint already meets the target) and at the checkpoint at or after it;
- ours, not the paper's: the speedup those bounds allow (``speedup_at_least``, ``speedup_at_most``). Where a curve
  starts just under the target, interpolation puts the crossing early in the first interval and the speedup can be
  many times what the checkpoints prove (Russian on test: 52.4x interpolated, at least 1.46x);
- the speedup for a language is BL_BASE's V100-days to the target over the system's; the average speedup is the
  mean of the per-language ratios, over the languages where both reach it at a cost above zero (BL_BASE at
  update 0 needs no Step 2 to be sped up; a system at update 0 against BL_BASE above it is marked, not divided);
- no speedup on noise: where BL_BASE's final score is not clearly above the majority class of that language's test
  file (by more than ``CLEAR_MARGIN`` points and twice its standard deviation over seeds), there is no transfer
  to be fast at, and that language gets no target and no speedup ("no transfer" in the tables).

The diagnostics (``diagnostics.txt``) put each score next to what it should be read against: the majority class and
a bag-of-words classifier per test file, each primary's score with its own source-language embeddings, and the
source-relearn control (Step 2 on the source language itself) when the pipeline ran it.

Only Step 2 is counted: it is what is paid again for every new language. Step 1 (and MiniPost's Step 1b) are
one-time costs, reported by ``python -m ds_minimodel flops``.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from ds_minimodel.errors import InputError
from ds_minimodel.flops import EFLOP
from ds_minimodel.pipeline.records import MeanScore, Results
from ds_minimodel.pipeline.settings import RELEARN_SUFFIX
from ds_minimodel.pipeline.source_model import CONTINUED
from ds_minimodel.systems import BASELINE, get_system, is_system, order_key

NEAR_MAXIMAL = 0.95
CLEAR_MARGIN = 2.0
"""Points by which BL_BASE's final score must exceed the majority class (and twice its spread over seeds) for a
language to count as transferred."""


@dataclass(frozen=True)
class Point:
    """One Step-2 checkpoint on a training curve: cost so far and the mean score over seeds."""

    updates: float
    flops: float
    v100_days: float
    score: float
    std: float = 0.0
    """Sample standard deviation of the score over seeds."""


@dataclass(frozen=True)
class Reached:
    """The cost at which a curve first reaches a target; all None when it never does.

    ``lower_*``/``upper_*`` are the paper's bounds (appendix A.4, Table A4): the checkpoint just before the crossing
    (0 when the first checkpoint already meets the target) and the first checkpoint at or above it."""

    updates: float | None
    flops: float | None
    v100_days: float | None
    at_first_checkpoint: bool = False
    lower_updates: float | None = None
    upper_updates: float | None = None
    lower_v100_days: float | None = None
    upper_v100_days: float | None = None

    @property
    def never(self) -> bool:
        return self.v100_days is None


@dataclass(frozen=True, kw_only=True)
class TargetRow:
    """One row of Table 3 (``time_to_target.json``): a task, language and system; BL_BASE's target there, what the
    system's curve ends at, what it costs to reach the target (``Reached``'s fields) and its speedup over BL_BASE."""

    task: str
    lang: str
    system: str
    target: float | None
    """95% of BL_BASE's final score; None where BL_BASE does not transfer."""
    transfer: bool
    """BL_BASE's final score is clearly above the majority class (``transfer_is_clear``)."""
    majority: float | None
    final_score: float
    final_std: float
    final_updates: float
    start_score: float | None
    """The score at update 0 (the initial rows), where the curve has that checkpoint."""
    final_v100_days: float
    updates: float | None
    flops: float | None
    v100_days: float | None
    at_first_checkpoint: bool
    lower_updates: float | None
    upper_updates: float | None
    lower_v100_days: float | None
    upper_v100_days: float | None
    never: bool | None
    """The curve never reaches the target; None where there is no target (neither met nor missed)."""
    speedup: float | None
    gain_target: float | None
    """Ours (``gain_figures``): 95% of BL_BASE's gain from its update-0 score, where its update-0 rows already meet
    the paper's target; with the cost and speedup to reach it."""
    gain_v100_days: float | None
    gain_updates: float | None
    gain_speedup: float | None
    speedup_at_least: float | None = None
    """The smallest speedup the checkpoints allow, whatever a curve does between two of them: BL_BASE's lower bound
    over the system's upper one (Table A4's bounds). Where one checkpoint interval holds both a score just under the
    target and a crossing, the interpolated ``speedup`` can be many times this."""
    speedup_at_most: float | None = None
    """The largest: BL_BASE's upper bound over the system's lower one; None where that is 0 (unbounded)."""


def speedup_bounds(base: Reached, reached: Reached) -> dict[str, float | None]:
    """``speedup_at_least`` and ``speedup_at_most`` from the bounds of BL_BASE's and a system's crossings, both
    reached at a cost above zero (where a speedup is defined)."""
    return {"speedup_at_least": base.lower_v100_days / reached.upper_v100_days,
            "speedup_at_most": base.upper_v100_days / reached.lower_v100_days if reached.lower_v100_days else None}


def time_to_target(curve: list[Point], target: float) -> Reached:
    """Cost at which ``curve`` (ordered by updates) first reaches ``target``, by linear interpolation between the
    checkpoint before and the first checkpoint at or above it."""
    for i, point in enumerate(curve):
        if point.score < target:
            continue
        bounds = {"upper_updates": point.updates, "upper_v100_days": point.v100_days}
        if i == 0:  # at update 0 (Step 2 saves the initial rows) exact; at a later first checkpoint, an upper bound
            return Reached(point.updates, point.flops, point.v100_days, at_first_checkpoint=point.updates > 0,
                           lower_updates=0.0, lower_v100_days=0.0, **bounds)
        before = curve[i - 1]
        t = (target - before.score) / (point.score - before.score)  # 0 < t <= 1: before < target <= point

        def between(a: float, b: float) -> float:
            return a + t * (b - a)

        return Reached(between(before.updates, point.updates), between(before.flops, point.flops),
                       between(before.v100_days, point.v100_days), lower_updates=before.updates,
                       lower_v100_days=before.v100_days, **bounds)
    return Reached(None, None, None)


# ----------------------------------------------------------------------------------------------- reading results
def curves(rows: list[MeanScore], where: str) -> tuple[dict[tuple[str, str, str], list[Point]], dict[str, str]]:
    """{(task, lang, system): checkpoints ordered by updates} from results.json's per-checkpoint means over seeds
    (``zero_shot_over_seeds``, or ``source_relearn_over_seeds`` for the control: ``where`` names the file and the
    list), and the metric of each task."""
    out: dict[tuple[str, str, str], list[Point]] = {}
    metrics: dict[str, str] = {}
    for i, row in enumerate(rows):
        if not is_system(row.system):
            raise InputError(f"{where}[{i}]: unknown system {row.system!r}")
        point = Point(float(row.step2_update), float(row.step2_flops), float(row.v100_days), row.mean, row.std)
        metrics[row.task] = row.metric
        out.setdefault((row.task, row.lang, row.system), []).append(point)
    for points in out.values():
        points.sort(key=lambda p: p.updates)
    return out, metrics


AVERAGE = "avg"
"""The language key of curves averaged over a task's target languages."""


def average_over_languages(all_curves: dict[tuple[str, str, str], list[Point]]
                           ) -> dict[tuple[str, str, str], list[Point]]:
    """{(task, AVERAGE, system): the mean over the task's target languages of their curves} (Figure A2 style),
    at the Step-2 updates every language of that system has a checkpoint at; costs and scores are means over the
    languages (costs differ only through each language's vocabulary size). Only where a task has two or more
    languages."""
    averaged: dict[tuple[str, str, str], list[Point]] = {}
    for task, system in sorted({(k[0], k[2]) for k in all_curves}):
        per_lang = [c for (t, _, s), c in sorted(all_curves.items()) if (t, s) == (task, system)]
        if len(per_lang) < 2:
            continue
        common = sorted(set.intersection(*({p.updates for p in c} for c in per_lang)))
        at = [{p.updates: p for p in c} for c in per_lang]
        averaged[(task, AVERAGE, system)] = [
            Point(u, statistics.mean(a[u].flops for a in at), statistics.mean(a[u].v100_days for a in at),
                  statistics.mean(a[u].score for a in at)) for u in common]
    return averaged


def ordered_systems(present: set[str]) -> list[str]:
    return sorted(present, key=order_key)


# ----------------------------------------------------------------------------------------------- analyses
def transfer_is_clear(final: Point, majority: float | None) -> bool:
    """BL_BASE's final point is clearly above the majority class: by CLEAR_MARGIN points and by twice its sample
    standard deviation over seeds. Without a trivial baseline (QA) every score counts."""
    return majority is None or final.score - majority > max(CLEAR_MARGIN, 2 * final.std)


def analyse(all_curves: dict[tuple[str, str, str], list[Point]],
            majority: dict[tuple[str, str], float] | None = None) -> list[TargetRow]:
    """One row per task, language and system: the target, the cost to reach it and the speedup over BL_BASE.
    ``majority``: {(task, lang): majority-class score}; a language where BL_BASE is not clearly above it gets no
    target and no speedup (``transfer`` False)."""
    majority = majority or {}
    rows = []
    for task, lang in sorted({(k[0], k[1]) for k in all_curves}):
        baseline = all_curves.get((task, lang, BASELINE))
        if not baseline:
            continue  # no BL_BASE run: no target (footnote 5 defines it from BL_BASE)
        transfer = transfer_is_clear(baseline[-1], majority.get((task, lang)))
        target = NEAR_MAXIMAL * baseline[-1].score if transfer else None
        base_cost = time_to_target(baseline, target) if transfer else Reached(None, None, None)
        for system in ordered_systems({k[2] for k in all_curves if k[:2] == (task, lang)}):
            curve = all_curves[(task, lang, system)]
            reached = time_to_target(curve, target) if transfer else Reached(None, None, None)
            speedup = (base_cost.v100_days / reached.v100_days
                       if not reached.never and not base_cost.never and reached.v100_days > 0
                       and base_cost.v100_days > 0 else None)
            rows.append(TargetRow(task=task, lang=lang, system=system, target=target, transfer=transfer,
                                  majority=majority.get((task, lang)), final_score=curve[-1].score,
                                  final_std=curve[-1].std, final_updates=curve[-1].updates,
                                  start_score=curve[0].score if curve[0].updates == 0 else None,
                                  final_v100_days=curve[-1].v100_days, **asdict(reached),
                                  never=reached.never if transfer else None, speedup=speedup,
                                  **gain_figures(baseline, curve, target),
                                  **(speedup_bounds(base_cost, reached)
                                     if speedup is not None and system != BASELINE else {})))
    return rows


def gain_figures(baseline: list[Point], curve: list[Point], target: float | None) -> dict[str, Any]:
    """Ours, not the paper's: where BL_BASE's update-0 rows already meet the paper's target (a good initialisation
    makes 'time to 95% of the final score' zero for every system), the cost to reach 95% of BL_BASE's gain from its
    update-0 score to its final one, and the speedup over BL_BASE by that measure. None otherwise (every row has the
    same columns)."""
    if target is None or baseline[0].updates != 0 or baseline[0].score < target or baseline[-1].score <= \
            baseline[0].score:
        return dict.fromkeys(("gain_target", "gain_v100_days", "gain_updates", "gain_speedup"))
    gain_target = baseline[0].score + NEAR_MAXIMAL * (baseline[-1].score - baseline[0].score)
    base, reached = time_to_target(baseline, gain_target), time_to_target(curve, gain_target)
    speedup = (base.v100_days / reached.v100_days if not reached.never and not base.never
               and reached.v100_days > 0 and base.v100_days > 0 else None)
    return {"gain_target": gain_target, "gain_v100_days": reached.v100_days, "gain_updates": reached.updates,
            "gain_speedup": speedup}


def average_speedups(rows: list[TargetRow]) -> dict[tuple[str, str], float | None]:
    """{(task, system): mean over languages of the per-language speedups} (footnote 6)."""
    ratios: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        ratios.setdefault((row.task, row.system), [])
        if row.speedup is not None:
            ratios[(row.task, row.system)].append(row.speedup)
    return {key: statistics.mean(values) if values else None for key, values in ratios.items()}


def never_reached(rows: list[TargetRow], task: str, system: str) -> list[str]:
    """The languages with a target that ``system`` never reached: its average speedup leaves them out."""
    return sorted(r.lang for r in rows
                  if r.task == task and r.system == system and r.transfer and r.never)


# ----------------------------------------------------------------------------------------------- tables
TRIVIAL = {"majority": "majority class", "bag_of_words": "bag of words (Naive Bayes, source-trained)"}


def trivial_scores(results: Results) -> dict[tuple[str, str, str], dict[str, float]]:
    """{(task, lang, split): {"majority": ..., "bag_of_words": ...}} from results.json's ``baselines``."""
    return {(r.task, r.lang, r.split): {k: r.scores[k] for k in TRIVIAL if k in r.scores} for r in results.baselines}


def table2(all_curves: dict[tuple[str, str, str], list[Point]], metrics: dict[str, str],
           trivial: dict[tuple[str, str, str], dict[str, float]] | None = None,
           source_model: dict[str, Any] | None = None) -> str:
    """Final checkpoint's score per language (mean over seeds) next to Step 2's cost, per task; below, the trivial
    baselines of each language's test file. ``source_model``: the given model BL_BASE's primary is (results.json's
    ``source_model``), said above the table: its Step 1 was not run here and is charged nothing."""
    trivial = trivial or {}
    lines = []
    if source_model:
        if source_model.get("trained_here") == CONTINUED:
            head = (" (continued here with MLM, body and head, a one-time cost like Step 1b: BL_BASE's primary is "
                    "that continuation)")
        elif source_model.get("mlm_head") == "initialised":
            head = " (its MLM head trained here, a one-time cost like Step 1b)"
        else:
            head = ""
        given = (f"Step 1 of {get_system(BASELINE).paper_name}'s primary: given, not trained here (no FLOPs charged): "
                 f"{source_model['path']}, weights {str(source_model['weights_sha256'])[:12]}{head}")
        lines += [given, ""]
    for task in sorted({k[0] for k in all_curves}):
        langs = sorted({k[1] for k in all_curves if k[0] == task})
        lines += [f"Table 2 ({task}, {metrics[task]}): final Step-2 checkpoint, mean +- std over seeds",
                  f"{'system':<12} {'updates':>8} {'EFLOPs':>10} {'V100-days':>10} "
                  + " ".join(f"{lang:>12}" for lang in langs) + f" {'avg':>7}"]
        for system in ordered_systems({k[2] for k in all_curves if k[0] == task}):
            finals = [all_curves.get((task, lang, system), [None])[-1] for lang in langs]
            present = [p for p in finals if p is not None]
            cost = present[0]  # the cost columns: the first language's run (the same schedule for every language)
            cells = [f"{p.score:6.1f}+-{p.std:4.1f}" if p else f"{'-':>12}" for p in finals]
            lines.append(f"{system:<12} {cost.updates:8.0f} {cost.flops / EFLOP:10.3g} {cost.v100_days:10.3g} "
                         + " ".join(cells) + f" {statistics.mean(p.score for p in present):7.1f}")
        for name, label in TRIVIAL.items():
            values = [trivial.get((task, lang, "test"), {}).get(name) for lang in langs]
            if any(v is not None for v in values):
                known = [v for v in values if v is not None]
                lines.append(f"{label:<43} " + " ".join(f"{v:12.1f}" if v is not None else f"{'-':>12}"
                                                        for v in values) + f" {statistics.mean(known):7.1f}")
        lines.append("")
    return "\n".join(lines).rstrip()


def table3(rows: list[TargetRow]) -> str:
    """V100-days to reach 95% of BL_BASE's final score, and the speedup over BL_BASE, per language."""
    speedups = average_speedups(rows)
    lines = []
    for task in sorted({r.task for r in rows}):
        langs = sorted({r.lang for r in rows if r.task == task})
        by_key = {(r.lang, r.system): r for r in rows if r.task == task}
        lines += [f"Table 3 ({task}): V100-days to near-maximal performance (95% of BL_BASE's final score) and "
                  "speedup over BL_BASE",
                  f"{'system':<12} " + " ".join(f"{lang:>18}" for lang in langs) + f" {'avg speedup':>12}"]
        bounds: list[str] = []
        at_zero: list[str] = []
        starred: list[str] = []  # averages that leave out languages never reached
        for system in ordered_systems({r.system for r in rows if r.task == task}):
            cells = []
            for lang in langs:
                r = by_key.get((lang, system))
                if r is None:
                    cells.append(f"{'-':>18}")
                elif not r.transfer:
                    cells.append(f"{'no transfer':>18}")
                elif r.never:
                    cells.append(f"{'never':>18}")
                else:
                    mark = "<=" if r.at_first_checkpoint else ""
                    ratio = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
                    if r.v100_days == 0:
                        at_zero.append(f"{system} {lang}")
                    cells.append(f"{mark + format(r.v100_days, '.3g'):>11} {ratio:>6}")
                    bounds.append(f"{system} {lang}: {r.lower_v100_days:.3g} - {r.upper_v100_days:.3g}")
            avg = speedups.get((task, system))
            left_out = never_reached(rows, task, system) if avg else []
            if left_out:
                starred.append(f"{system} {', '.join(left_out)}")
            lines.append(f"{system:<12} " + " ".join(cells)
                         + f" {(f'{avg:.2f}x' + ('*' if left_out else '') if avg else '-'):>12}")
        if not any(r.transfer for r in rows if r.task == task):
            lines.append("BL_BASE transfers to none of these languages: the run is too small to measure a speedup "
                         "(RESULTS.md reports the larger reference run, configs/reference_focus.json, whose does)")
        targets = sorted({(r.lang, r.target) for r in rows if r.task == task and r.target is not None})
        marked = any(r.task == task and r.transfer and not r.never and r.at_first_checkpoint
                     for r in rows)
        lines.append("targets: " + (", ".join(f"{lang} {t:.1f}" for lang, t in targets) or "none")
                     + ("   (<=: reached at the first checkpoint, an upper bound)" if marked else ""))
        lines += same_start(rows, task)
        if at_zero:
            lines.append("met at update 0, before any Step-2 update (the initialised rows alone; no speedup "
                         "where BL_BASE is one of them): " + ", ".join(at_zero))
        if starred:  # as the paper's Table A1 marks an average without Turkish
            lines.append("*: the average leaves out the languages where the target was never reached: "
                         + "; ".join(starred))
        gains = [r for r in rows if r.task == task and r.gain_target is not None]
        if gains:
            lines.append("ours, not the paper's (update 0 already meets the target): V100-days to 95% of BL_BASE's "
                         "gain from update 0 to its final score, speedup: " + "; ".join(
                             f"{r.system} {r.lang} " + ("never" if r.gain_v100_days is None else
                                                              f"{r.gain_v100_days:.3g}" + (
                                                                  f" {r.gain_speedup:.2f}x"
                                                                  if r.gain_speedup else ""))
                             for r in gains))
        if bounds:  # appendix A.4 / Table A4: the checkpoints before and at the crossing
            lines.append("lower - upper V100-days (checkpoint before the crossing, 0 before the first; checkpoint at "
                         "or after it): " + "; ".join(bounds))
        ranges = [f"{r.system} {r.lang} {r.speedup_at_least:.2f}x - "
                  + ("unbounded" if r.speedup_at_most is None else f"{r.speedup_at_most:.2f}x")
                  for r in rows if r.task == task and r.system != BASELINE and r.speedup_at_least is not None]
        if ranges:  # what the checkpoints prove, whatever a curve does between two of them
            lines.append("speedup by those bounds (BL_BASE's lower over the system's upper; its upper over the "
                         "system's lower): " + "; ".join(ranges))
        for r in rows:
            if r.task == task and r.system == BASELINE and not r.transfer:
                lines.append(f"no transfer in {r.lang}: BL_BASE's final score {r.final_score:.1f} is not "
                             f"clearly above the majority class {r.majority:.1f} (by {CLEAR_MARGIN:g} points and "
                             "twice its spread over seeds), so no speedup is computed there")
                others = [o for o in rows if (o.task, o.lang) == (task, r.lang) and o.system != BASELINE]
                if others:  # read by the same rule, so that no system's number passes without a word
                    lines.append("  the other systems there, read the same way: "
                                 + "; ".join(_against_majority(o) for o in others)
                                 + "; with no target from BL_BASE, none of them is a speedup")
        lines.append("")
    return "\n".join(lines).rstrip()


def _against_majority(row: TargetRow) -> str:
    """A system's final score next to the majority class, read by ``transfer_is_clear``'s rule."""
    final = Point(row.final_updates, 0.0, row.final_v100_days, row.final_score, row.final_std)
    margin = row.final_score - row.majority
    verdict = ("clearly above" if transfer_is_clear(final, row.majority)
               else "below" if margin < 0 else "not clearly above")
    return f"{row.system} {row.final_score:.1f} +- {row.final_std:.1f} ({margin:+.1f}, {verdict})"


def own_scores(results: Results) -> dict[tuple[str, str, str], Point]:
    """{(task, lang, primary): mean +- std over seeds of the finetuned primary with its own embeddings}."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in results.source_test:
        groups.setdefault((r.task, r.lang, r.primary), []).append(r.score)
    return {k: Point(0, 0, 0, statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
            for k, v in groups.items()}


def diagnostics(results: Results, all_curves: dict[tuple[str, str, str], list[Point]],
                relearn_curves: dict[tuple[str, str, str], list[Point]], metrics: dict[str, str]) -> str:
    """Where transfer is lost (issue 16's rows): the trivial baselines, each primary with its own source embeddings,
    the source-relearn control's curve and the share of the primary's own score it keeps, then each target
    language's final scores against its baselines, and against its update 0 where Step 2 ended below it."""
    trivial, own = trivial_scores(results), own_scores(results)
    lines = []
    for task in sorted({k[0] for k in all_curves} | {k[0] for k in own} | {k[0] for k in relearn_curves}):
        metric = metrics.get(task, "accuracy")
        lines.append(f"Diagnostics ({task}, {metric}, mean +- std over seeds)")
        for (t, lang, split), values in sorted(trivial.items()):
            if t == task:
                lines.append(f"  {lang:<11} {split:<5} " + ", ".join(f"{TRIVIAL[k]} {v:.1f}"
                                                                      for k, v in values.items()))
        for (t, lang, primary), p in sorted(own.items()):
            if t == task:
                lines.append(f"  {lang:<11} test  primary {primary} finetuned, its own embeddings: "
                             f"{p.score:.1f} +- {p.std:.1f}")
        for (t, lang, system), curve in sorted(relearn_curves.items()):
            if t == task:
                lines.append(f"  {lang:<11} test  {system} source embeddings relearned by Step 2 (no language gap; "
                             "anchored if the config names a relearn_anchor): "
                             + ", ".join(f"{p.updates:.0f}: {p.score:.1f}" for p in curve)
                             + f" (final +- {curve[-1].std:.1f})")
                primary = get_system(system).primary if is_system(system) else system
                mine = own.get((task, lang.removesuffix(RELEARN_SUFFIX), primary))
                if mine is not None and mine.score > 0:
                    lines.append(f"{'':20}it keeps {curve[-1].score / mine.score:.0%} of primary {primary}'s "
                                 f"own {mine.score:.1f}: what Step 2 loses with no language gap, which bounds every "
                                 "target; far below, with Step 2's MLM loss still falling, Step 2 is short "
                                 "(README, Step 2, \"How long\")")
        for (t, lang, system), curve in sorted(all_curves.items()):
            if t == task and system == BASELINE:
                majority = trivial.get((task, lang, "test"), {}).get("majority")
                gap = "" if majority is None else f", {curve[-1].score - majority:+.1f} over the majority class"
                start = curve[0] if curve[0].updates == 0 and len(curve) > 1 else None
                if start is not None and curve[-1].score < start.score:  # the rows as initialised read better
                    gap += (f"; below its update 0, {start.score:.1f} +- {start.std:.1f} (the initialised rows, "
                            "before any Step-2 update)")
                lines.append(f"  {lang:<11} test  BL_BASE final {curve[-1].score:.1f} +- {curve[-1].std:.1f}{gap}")
        lines.append("")
    return "\n".join(lines).rstrip()


def same_start(rows: list[TargetRow], task: str) -> list[str]:
    """A line for each group of systems that adapt the same primary and score alike at update 0 (BL_BASE and
    MiniPost): the same rows plugged into the same finetuned model, before either trains a row."""
    lines = []
    by_primary: dict[str, list[TargetRow]] = {}
    for r in rows:
        if r.task == task and r.start_score is not None:
            primary = get_system(r.system).primary if is_system(r.system) else r.system
            by_primary.setdefault(primary, []).append(r)
    for primary, group in sorted(by_primary.items()):
        systems = ordered_systems({r.system for r in group})
        langs = sorted({r.lang for r in group})
        same = len(systems) > 1 and all(len({r.start_score for r in group if r.lang == lang}) == 1
                                        for lang in langs)
        if same:
            lines.append(f"{', '.join(systems)} score alike at update 0, as they should: each starts from the same "
                         f"rows (the initialisation copies them from primary {primary}'s) in the same model "
                         f"finetuned from {primary}; they part at the first Step-2 update")
    return lines

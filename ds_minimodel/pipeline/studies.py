"""The paper's analyses beyond Tables 2-3, from the same results: the mini-model depth study (section 5.2: Table 4,
Table A3, Figure 4), English performance (section 5.3, Table 5) and the variance over pretraining runs (appendix
A.5, Table A5).

- **Depth study.** A pipeline config lists MiniJoint at several depths as systems ``minijoint@N`` (the second head
  after layer N; ``systems.depth_of``) beside ``bl_base``. Each is its own Step-1 model, Step 2 runs over its bottom N
  layers, and the near-maximal target is 95% of BL_BASE's final score, as in section 4.2. Table 4 gives the
  V100-days each depth needs per task and language with the lower and upper bounds of appendix A.4 (Table A4), Table
  A3 the final scores per depth, Figure 4 the curves per depth averaged over the target languages.
- **English performance.** Each finetuned primary scored with its own source embeddings (``source_test`` in
  results.json), and, for the systems a config lists under ``source_minis``, their mini-models finetuned and scored
  the same way: MiniJoint's full model against BL_BASE, its mini-model against BL_SMALL (Table 5).
- **Pretraining runs.** With ``pretrain_seeds``, results.json's ``pretrain_runs`` holds the final scores of every
  pretraining run; Table A5 sets the spread over those runs beside the spread over finetuning seeds.
- **Step-2 runs** (ours: the paper has one Step-2 run per system). With ``step2_seeds``, results.json's
  ``step2_runs`` holds every further Step-2 run's scores; each run is analysed as Table 3 analyses the main one, its
  target 95% of its own BL_BASE's final score, and each system's speedup is given per run, with the bounds its
  checkpoints prove, and as a mean and sample standard deviation over the runs.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ds_minimodel.pipeline.analysis import (
    AVERAGE,
    NEAR_MAXIMAL,
    Point,
    TargetRow,
    analyse,
    average_speedups,
    curves,
    own_scores,
)
from ds_minimodel.pipeline.figures import plot_curves
from ds_minimodel.pipeline.records import Results
from ds_minimodel.systems import (
    BASELINE,
    SYSTEMS,
    depth_of,
    get_system,
    is_system,
    mini_system,
    order_key,
)


def depth_systems(names: set[str] | list[str]) -> list[str]:
    """The depth study's systems among ``names`` (``minijoint@N``), by N."""
    return sorted((n for n in names if depth_of(n) is not None), key=depth_of)


def _days(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def table4(rows: list[TargetRow]) -> str:
    """V100-days to near-maximal performance per depth N, task and language, with (lower - upper) bounds: the
    paper's Table 4 with the bounds of Table A4. '∞': never reached; 'no transfer': BL_BASE itself is not clearly
    above the majority class there, so there is no target."""
    lines: list[str] = []
    for task in sorted({r.task for r in rows}):
        mine = [r for r in rows if r.task == task]
        depths = depth_systems({r.system for r in mine})
        if not depths:
            continue
        langs = sorted({r.lang for r in mine})
        by_key = {(r.lang, r.system): r for r in mine}
        columns = [*depths, BASELINE]
        lines += [(f"Table 4 ({task}): V100-days to near-maximal performance (95% of BL_BASE's final score) for "
                   "MiniJoint with its second head after layer N; (lower - upper) bounds as in Table A4"),
                  f"{'lang':<6} " + " ".join(f"{_column(s):>26}" for s in columns)]
        for lang in langs:
            cells = []
            for system in columns:
                r = by_key.get((lang, system))
                if r is None:
                    cells.append(f"{'-':>26}")
                elif not r.transfer:
                    cells.append(f"{'no transfer':>26}")
                elif r.never:
                    cells.append(f"{'∞':>26}")
                else:
                    cells.append(f"{_days(r.v100_days)} ({_days(r.lower_v100_days)} - "
                                 f"{_days(r.upper_v100_days)})".rjust(26))
            lines.append(f"{lang:<6} " + " ".join(cells))
        lines += ["∞: never reached the target within Step 2", ""]
    return "\n".join(lines).rstrip()


def _column(system: str) -> str:
    return f"N={depth_of(system)}" if depth_of(system) is not None else "BL_BASE"


def table_a3(all_curves: dict[tuple[str, str, str], list[Point]]) -> str:
    """Final Step-2 checkpoint's score per depth N and language, and their mean (the paper's Table A3), with BL_BASE
    below."""
    lines: list[str] = []
    for task in sorted({k[0] for k in all_curves}):
        depths = depth_systems({k[2] for k in all_curves if k[0] == task})
        if not depths:
            continue
        langs = sorted({k[1] for k in all_curves if k[0] == task and k[1] != AVERAGE})
        lines += [f"Table A3 ({task}): final score of MiniJoint per depth N of its second head (mean over seeds)",
                  f"{'N':<8} " + " ".join(f"{lang:>7}" for lang in langs) + f" {'avg':>7}"]
        for system in [*depths, BASELINE]:
            finals = [all_curves[(task, lang, system)][-1].score if (task, lang, system) in all_curves else None
                      for lang in langs]
            known = [f for f in finals if f is not None]
            if not known:
                continue
            lines.append(f"{_column(system).removeprefix('N='):<8} "
                         + " ".join(f"{f:7.1f}" if f is not None else f"{'-':>7}" for f in finals)
                         + f" {statistics.mean(known):7.1f}")
        lines.append("")
    return "\n".join(lines).rstrip()


def plot_depths(all_curves: dict[tuple[str, str, str], list[Point]],
                averaged: dict[tuple[str, str, str], list[Point]], metrics: dict[str, str], out: Path,
                source_score: dict[str, float]) -> list[Path]:
    """Figure 4: the curves of every depth N and BL_BASE, averaged over the target languages (a task with one
    target language: that language's), one file per task: ``figure4_<task>_<avg or language>.png``."""
    chosen = {}
    for task in sorted({k[0] for k in all_curves if depth_of(k[2]) is not None}):
        langs = {k[1] for k in all_curves if k[0] == task}
        source = averaged if len(langs) > 1 else all_curves
        chosen.update({k: c for k, c in source.items() if k[0] == task and (depth_of(k[2]) is not None
                                                                             or k[2] == BASELINE)})
    return plot_curves(chosen, [], metrics, out, source_score=source_score, prefix="figure4") if chosen else []


def model_label(name: str) -> str:
    """What a finetuned model in ``source_test`` is, in the paper's words: a primary by the systems that use it
    whole (BL_BASE, BL_SMALL) or as a dual-head model (MiniJoint (full)); ``mini-<system>`` as that system's
    mini-model."""
    if mini_system(name) is not None:
        return f"{get_system(mini_system(name)).paper_name} (mini-model)"
    is_system(name)  # registers minijoint@N, whose primary has the same name
    whole = [s.paper_name for s in SYSTEMS.values() if s.primary == name and s.whole_primary]
    dual = [f"{s.paper_name} (full)" for s in SYSTEMS.values() if s.primary == name and s.dual_head]
    return ", ".join(whole + dual) or name


def table5(results: Results) -> str:
    """Each finetuned model on the source language's test files with its own embeddings, mean +- std over seeds
    (the paper's Table 5: MiniJoint's full model against BL_BASE, its mini-model against BL_SMALL). Empty when the
    pipeline finetuned no mini-model (no ``source_minis``)."""
    own = own_scores(results)
    if not any(mini_system(name) for _, _, name in own):
        return ""
    lines: list[str] = []
    for task, lang in sorted({k[:2] for k in own}):
        metric = next(r.metric for r in results.source_test if r.task == task)
        lines += [(f"Table 5 ({task}, {lang} test, {metric}): finetuned on {lang}, scored with its own embeddings, "
                   "mean +- std over seeds"), f"{'model':<40} {'finetuned':<22} {metric:>12}"]
        for (t, l, name), p in sorted(own.items(), key=lambda kv: (mini_system(kv[0][2]) is not None, kv[0][2])):
            if (t, l) == (task, lang):
                lines.append(f"{model_label(name):<40} {name:<22} {p.score:6.1f} +- {p.std:4.1f}")
        lines.append("")
    return "\n".join(lines).rstrip()


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def table_a5(results: Results) -> str:
    """Appendix A.5 (Table A5): the final score of every pretraining run (``pretrain_seeds`` beside the main run),
    mean +- std over its finetuning seeds; then the mean and spread of those means over the pretraining runs, next
    to the mean spread over finetuning seeds within one run. Empty without further pretraining runs."""
    groups: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    metrics: dict[str, str] = {}
    for r in results.pretrain_runs:
        metrics[r.task] = r.metric
        groups.setdefault((r.task, r.system, r.lang), {}).setdefault(r.pretrain_seed, []).append(r.score)
    lines: list[str] = []
    for task in sorted(metrics):
        seeds = sorted({k for (t, _, _), runs in groups.items() if t == task for k in runs})
        lines += [(f"Table A5 ({task}, {metrics[task]}): final score per pretraining run (Step-1 seed), mean +- std "
                   "over finetuning seeds; then over pretraining runs"),
                  f"{'system':<12} {'lang':<6} " + " ".join(f"{f'seed {k}':>12}" for k in seeds)
                  + f" {'over runs':>14} {'finetuning std':>15}"]
        for (t, system, lang), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], order_key(kv[0][1]),
                                                                               kv[0][2])):
            if t != task:
                continue
            means = [statistics.mean(runs[k]) for k in seeds if k in runs]
            cells = [f"{statistics.mean(runs[k]):6.1f}+-{_spread(runs[k]):4.1f}" if k in runs else f"{'-':>12}"
                     for k in seeds]
            lines.append(f"{system:<12} {lang:<6} " + " ".join(cells)
                         + f" {statistics.mean(means):7.1f}+-{_spread(means):4.1f}"
                         + f" {statistics.mean(_spread(v) for v in runs.values()):15.1f}")
        lines.append("")
    return "\n".join(lines).rstrip()


MAIN_RUN = "main"
"""The main Step-2 run's column (the config's ``seed``) beside the further runs' (``seed <k>``)."""


def step2_runs(results: Results, majority: dict[tuple[str, str], float], where: str) -> tuple[str, dict[str, Any]]:
    """The speedup over Step-2 runs (``step2_seeds`` beside the main run): each run analysed on its own (``analyse``:
    its target 95% of its own BL_BASE's final score), then per task, system and language (and ``avg``, the mean over
    languages of footnote 6) every run's speedup with the range its checkpoints prove, and the mean +- sample std
    over the runs that have one. The table and the JSON record (every run's Table-3 rows and the summary); both empty
    without further Step-2 runs. ``where``: the results file, for errors."""
    if not results.step2_runs_over_seeds:
        return "", {}
    grouped: dict[int | None, list] = {None: results.zero_shot_over_seeds}
    for row in results.step2_runs_over_seeds:
        grouped.setdefault(row.step2_seed, []).append(row)
    runs = {k: analyse(curves(rows, f"{where}: {'zero_shot' if k is None else 'step2_runs'}_over_seeds")[0], majority)
            for k, rows in grouped.items()}
    labels = {k: MAIN_RUN if k is None else f"seed {k}" for k in runs}
    rows = {(r.task, r.system, r.lang, k): r for k, analysed in runs.items() for r in analysed}
    averages = {(task, system, AVERAGE, k): v for k, analysed in runs.items()
                for (task, system), v in average_speedups(analysed).items()}
    summary, lines = [], []
    for task in sorted({key[0] for key in rows}):
        langs = sorted({key[2] for key in rows if key[0] == task})
        starred = False
        lines += [(f"Table 3 over Step-2 runs ({task}): speedup over BL_BASE to 95% of each run's own BL_BASE final "
                   "score, (at least - at most) by its checkpoints; then the mean +- std over the runs"),
                  f"{'system':<12} {'lang':<6} " + " ".join(f"{labels[k]:>24}" for k in runs) + f" {'over runs':>22}"]
        for system in sorted({key[1] for key in rows if key[0] == task and key[1] != BASELINE}, key=order_key):
            for lang in [*langs, *([AVERAGE] if len(langs) > 1 else [])]:
                cells, values = [], []
                for k in runs:
                    r = rows.get((task, system, lang, k))
                    value = averages.get((task, system, lang, k)) if lang == AVERAGE else r and r.speedup
                    left_out = lang == AVERAGE and value is not None and any(
                        getattr(rows.get((task, system, other, k)), "speedup", None) is None for other in langs)
                    starred |= left_out
                    cells.append(_speedup_cell(r, value, "*" if left_out else ""))
                    values.append(value)
                known = [v for v in values if v is not None]
                mean = statistics.mean(known) if known else None
                std = statistics.stdev(known) if len(known) > 1 else None  # none from one run
                spread = "-" if mean is None else f"{mean:.2f}" + ("" if std is None else f" +- {std:.2f}") + (
                    f" ({len(known)} of {len(values)})" if len(known) < len(values) else "")
                lines.append(f"{system:<12} {lang:<6} " + " ".join(cells) + f" {spread:>22}")
                summary.append({"task": task, "system": system, "lang": lang, "speedups": values, "mean": mean,
                                "std": std, "runs": len(known)})
        finals = [f"{lang} " + ", ".join(f"{rows[(task, BASELINE, lang, k)].final_score:.1f}" for k in runs
                                         if (task, BASELINE, lang, k) in rows) for lang in langs]
        lines += [f"BL_BASE's final score per run ({', '.join(labels.values())}): " + "; ".join(finals),
                  *(["*: that run's average leaves out the languages where it has no speedup"] if starred else []),
                  (f"{MAIN_RUN}: the Step-2 runs with the config's seed; seed k: the further runs of step2_seeds. "
                   "∞: never reached; no transfer: that run's BL_BASE is not clearly above the majority class"), ""]
    record = {"near_maximal": NEAR_MAXIMAL, "baseline": BASELINE, "summary": summary,
              "runs": [{"step2_seed": k, "rows": [asdict(r) for r in analysed]} for k, analysed in runs.items()]}
    return "\n".join(lines).rstrip(), record


def _speedup_cell(row: TargetRow | None, value: float | None, mark: str = "") -> str:
    """One run's speedup for a language (``row``: its Table-3 row) or the average over languages (``row`` None;
    ``mark``: after it)."""
    if row is not None and not row.transfer:
        return f"{'no transfer':>24}"
    if row is not None and row.never:
        return f"{'∞':>24}"
    if value is None:
        return f"{'-':>24}"
    if row is None or row.speedup_at_least is None:
        return f"{value:.2f}x{mark}".rjust(24)
    most = "unbounded" if row.speedup_at_most is None else f"{row.speedup_at_most:.2f}"
    return f"{value:.2f}x ({row.speedup_at_least:.2f}-{most})".rjust(24)

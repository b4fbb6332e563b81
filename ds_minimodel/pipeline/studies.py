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
"""
from __future__ import annotations

import statistics
from pathlib import Path

from ds_minimodel.pipeline.analysis import (
    AVERAGE,
    Point,
    TargetRow,
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

"""The paper's figures from the analysis's curves and rows: Figure 3 (score against Step-2 compute per system, with
the trivial baselines and the source-language score as reference lines) and Figure 1 (average speedup over BL_BASE).
matplotlib is imported on first use, on its file-only backend."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ds_minimodel.pipeline.analysis import (
    AVERAGE,
    Point,
    TargetRow,
    average_speedups,
    never_reached,
    ordered_systems,
)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display on cluster nodes), imported on first use."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_curves(all_curves: dict[tuple[str, str, str], list[Point]], rows: list[TargetRow],
                metrics: dict[str, str], out: Path, *, majority: dict[tuple[str, str], float] | None = None,
                bag_of_words: dict[tuple[str, str], float] | None = None, source_score: dict[str, float] | None = None,
                prefix: str = "figure3") -> list[Path]:
    """Figure 3: score against Step-2 V100-days per system, one file per task and language, with the majority
    class, the bag of words (Table 2's trivial baselines) and the source-language score (BL_BASE's primary, its own
    embeddings) as reference lines."""
    plt = _pyplot()
    majority, bag_of_words, source_score = majority or {}, bag_of_words or {}, source_score or {}
    targets = {(r.task, r.lang): r.target for r in rows}
    written = []
    for task, lang in sorted({k[:2] for k in all_curves}):
        fig, ax = plt.subplots(figsize=(6, 4))
        for system in ordered_systems({k[2] for k in all_curves if k[:2] == (task, lang)}):
            curve = all_curves[(task, lang, system)]
            ax.plot([p.v100_days for p in curve], [p.score for p in curve], marker="o", label=system)
        if targets.get((task, lang)) is not None:
            ax.axhline(targets[(task, lang)], color="grey", linestyle="--", label="95% of BL_BASE final")
        if (task, lang) in majority:
            ax.axhline(majority[(task, lang)], color="black", linestyle=":", label="majority class")
        # colours outside matplotlib's default cycle, which the systems' curves take theirs from
        if (task, lang) in bag_of_words:
            ax.axhline(bag_of_words[(task, lang)], color="slategray", linestyle=(0, (1, 3)),
                       label="bag of words, trained on the source language")
        if task in source_score:
            ax.axhline(source_score[task], color="darkgoldenrod", linestyle="-.",
                       label="source language: BL_BASE's primary, own embeddings")
        ax.set(xlabel="Step-2 compute (V100-days)", ylabel=f"{metrics[task]} (mean over seeds)",
               title=f"{task}, {'mean over target languages' if lang == AVERAGE else lang}: zero-shot score")
        ax.legend()
        fig.tight_layout()
        path = out / f"{prefix}_{task}_{lang}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def plot_speedups(rows: list[TargetRow], out: Path) -> Path | None:
    """Figure 1: average speedup over BL_BASE per task and system (missing bar: the target was never reached, or
    "no transfer": BL_BASE transfers to none of the task's languages, so there is no target; a bar whose average
    leaves out languages never reached names them, as Table 3 stars it). Not drawn, None, when
    no task has a target: Table 3 says why."""
    if not any(r.transfer and r.target is not None for r in rows):
        return None
    plt = _pyplot()
    speedups = average_speedups(rows)
    transfers = {r.task for r in rows if r.transfer and r.target is not None}
    tasks = sorted({t for t, _ in speedups})
    systems = ordered_systems({s for _, s in speedups})
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, system in enumerate(systems):
        values = [speedups.get((task, system)) for task in tasks]
        xs = [t + i * width for t in range(len(tasks))]
        ax.bar(xs, [v or 0.0 for v in values], width, label=system)
        for x, v, task in zip(xs, values, tasks):
            if v is None:  # no bar: say why
                ax.text(x, 0.02, "never" if task in transfers else "no transfer", rotation=90, ha="center",
                        va="bottom", fontsize=8)
            elif left_out := never_reached(rows, task, system):  # Table 3's "*"
                ax.text(x, 0.97 * v, "without " + ", ".join(left_out), rotation=90, ha="center", va="top", fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks([t + width * (len(systems) - 1) / 2 for t in range(len(tasks))], tasks)
    ax.set(ylabel="average speedup over BL_BASE", title="Time to near-maximal performance (Step 2)")
    ax.legend()
    fig.tight_layout()
    path = out / "figure1_speedup.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

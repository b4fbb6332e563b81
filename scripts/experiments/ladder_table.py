"""The table of a dev ladder's folder (scripts/experiments/init_ladder.sh, scripts/experiments/gpu_ladder.sh): English dev with the body's
own embeddings, then every variant's Step-2 checkpoints on its language's dev set, as mean and standard deviation
over the finetuning seeds found, with the alignment probe's top-1 (layer 0, top layer, best layer), and how well
the probe predicts the scores: Pearson's r between its top-1 and the mean dev accuracy / macro-F1 over every
checkpoint it probed, across languages and within each.

    python scripts/experiments/ladder_table.py results/gpu_ladder_forgetting/plain
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def variant_of(embeddings: str) -> str:
    return embeddings.split("/checkpoints/")[0].rsplit("/", 1)[-1].removeprefix("step2-")


def spread(values: list[float]) -> str:
    sd = f" +- {statistics.stdev(values):4.1f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):5.1f}{sd}"


def table(folder: Path) -> list[str]:
    english = [json.loads(p.read_text()) for p in sorted(folder.glob("en-seed*.json"))]
    lines = [f"English dev, own embeddings: accuracy {spread([r['accuracy'] for r in english])}, macro-F1 "
             f"{spread([r['macro_f1'] for r in english])} ({len(english)} seed(s))"] if english else []
    rows: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for line in (folder / "dev_scores.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows[variant_of(r["embeddings"]), r["step2_update"]].append(r)
    aligned = {}
    probe_file = folder / "align.jsonl"
    for line in (probe_file.read_text().splitlines() if probe_file.is_file() else []):
        r = json.loads(line)
        aligned[variant_of(r["embeddings"]), r["step2_update"]] = r["top1"]
    for (variant, update), rs in sorted(rows.items()):
        top1 = aligned.get((variant, update))
        probe = f"  probe top-1 layer 0 / top / best {top1[0]:.3f} / {top1[-1]:.3f} / {max(top1):.3f}" if top1 else ""
        lines.append(f"{variant:<22} update {update:>4}: accuracy {spread([r['accuracy'] for r in rs])}  macro-F1 "
                     f"{spread([r['macro_f1'] for r in rs])}  ({len(rs)} seed(s)){probe}")
    return lines + probe_correlations(rows, aligned)


def probe_correlations(rows: dict[tuple[str, int], list[dict]],
                       aligned: dict[tuple[str, int], list[float]]) -> list[str]:
    """Pearson's r between the probe's top-1 (layer 0, top, best layer) and the mean dev score, one point per probed
    checkpoint; all languages together, then each language's own."""
    points = [(rs[0]["lang"], aligned[key], rs) for key, rs in sorted(rows.items()) if key in aligned]
    groups = {"all": points} | {lang: [p for p in points if p[0] == lang] for lang in sorted({p[0] for p in points})}
    lines = []
    for name, group in groups.items():
        if len(group) < 3:
            continue
        cells = []
        for layer, pick in (("layer 0", lambda t: t[0]), ("top", lambda t: t[-1]), ("best", max)):
            probe = [pick(top1) for _, top1, _ in group]
            try:
                r = [f"{statistics.correlation(probe, [statistics.mean(x[m] for x in rs) for _, _, rs in group]):.2f}"
                     for m in ("accuracy", "macro_f1")]
            except statistics.StatisticsError:  # a constant column: no correlation to speak of
                r = ["-", "-"]
            cells.append(f"{layer} {r[0]} / {r[1]}")
        lines.append(f"probe against dev, Pearson r (accuracy / macro-F1), {name} ({len(group)} checkpoints): "
                     + ", ".join(cells))
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "dev_scores.jsonl").is_file():
        sys.exit("usage: ladder_table.py FOLDER (a ladder's output folder, with dev_scores.jsonl)")
    print("\n".join(table(Path(sys.argv[1]))))

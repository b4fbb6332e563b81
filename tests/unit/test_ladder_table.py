"""scripts/experiments/ladder_table.py: a dev ladder's table and how well the label-free probe predicts its dev scores."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/experiments/ladder_table.py"
spec = importlib.util.spec_from_file_location("ladder_table", SCRIPT)
ladder_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ladder_table)


def test_the_probe_is_correlated_with_the_mean_dev_scores_per_language_and_overall(tmp_path: Path) -> None:
    # The best layer's top-1 rises with accuracy exactly (r = 1); the top layer's falls in German, rises in French.
    scores, probes = [], []
    for lang, sign in (("de", 1), ("fr", -1)):
        for update, acc in ((0, 30.0), (100, 40.0), (200, 45.0), (300, 60.0)):
            emb = f"runs/x/step2-{lang}-focus/checkpoints/step_{update:08d}"
            for seed, noise in ((1, -1.0), (2, 1.0)):  # the mean over seeds is what is correlated
                scores.append({"embeddings": emb, "lang": lang, "step2_update": update, "seed": seed,
                               "accuracy": acc + noise, "macro_f1": acc / 2})
            layers = [0.1, 0.5 + acc / 100, 0.3 - sign * acc / 1000]  # layer 0, the best layer, the top layer
            probes.append({"embeddings": emb, "step2_update": update, "top1": layers})
    (tmp_path / "dev_scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
    (tmp_path / "align.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probes))
    lines = ladder_table.table(tmp_path)
    assert any(line.startswith("de-focus") and "update  100: accuracy  40.0 +-  1.4" in line for line in lines)
    rows = {line.split("), ")[1].split(" (")[0]: line for line in lines if line.startswith("probe against dev")}
    assert set(rows) == {"all", "de", "fr"} and "(8 checkpoints)" in rows["all"]
    assert "best 1.00 / 1.00" in rows["de"] and "top -1.00 / -1.00" in rows["de"]
    assert "top 1.00 / 1.00" in rows["fr"] and "best 1.00 / 1.00" in rows["all"]
    assert "layer 0 - / -" in rows["all"]  # a constant layer predicts nothing

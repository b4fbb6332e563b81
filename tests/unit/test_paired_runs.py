"""scripts/experiments/paired_runs.py: two runs read by the same classifiers, compared seed by seed at each run's last
Step-2 checkpoint (or a given one of the new run)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.records import Results, Score
from ds_minimodel.pipeline.results import over_seeds

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/experiments/paired_runs.py"
spec = importlib.util.spec_from_file_location("paired_runs", SCRIPT)
paired_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paired_runs)


def run(scores: dict[tuple[str, str, int], dict[int, float]]) -> Results:
    """{(system, lang, update): {seed: accuracy}} as a results.json's records (macro-F1 half the accuracy)."""
    zero = [Score.from_dict({"task": "t", "system": system, "lang": lang, "step2_update": update, "seed": seed,
                             "step2_flops": float(update), "v100_days": float(update), "accuracy": acc,
                             "macro_f1": acc / 2}, "test")
            for (system, lang, update), by_seed in scores.items() for seed, acc in by_seed.items()]
    return Results.from_dict({"zero_shot": [r.to_dict() for r in zero],
                              "zero_shot_over_seeds": [m.to_dict() for m in over_seeds(zero)]}, "test")


SHORT = run({("bl_base", "de", 0): {1: 30.0, 2: 34.0}, ("bl_base", "de", 600): {1: 50.0, 2: 54.0}})
LONG = run({("bl_base", "de", 0): {1: 30.0, 2: 34.0}, ("bl_base", "de", 600): {1: 51.0, 2: 57.0},
            ("bl_base", "de", 1800): {1: 53.0, 2: 53.0}, ("minipost", "de", 1800): {1: 60.0, 2: 60.0}})


def test_each_seed_is_compared_with_itself_at_each_runs_last_checkpoint():
    lines = paired_runs.compare(SHORT, LONG, "t", None)
    # MiniPost is in one run only: left out, not compared with nothing
    assert lines == [("bl_base    de   accuracy 52.0 -> 53.0 (seeds 1 2: +3.0, -1.0); "
                      "macro_f1 26.0 -> 26.5 (seeds 1 2: +1.5, -0.5)"),
                     "bl_base    mean accuracy 52.0 -> 53.0; macro_f1 26.0 -> 26.5"]


def test_the_new_run_can_be_read_at_the_old_runs_length():
    assert paired_runs.compare(SHORT, LONG, "t", 600)[0].startswith(
        "bl_base    de   accuracy 52.0 -> 54.0 (seeds 1 2: +1.0, +3.0)")


def test_runs_with_nothing_in_common_are_refused():
    with pytest.raises(InputError, match="share no .system, language. with scores for task 't' at update 300"):
        paired_runs.compare(SHORT, LONG, "t", 300)
    with pytest.raises(InputError, match="bl_base de: the two runs share no finetuning seed"):
        paired_runs.compare(SHORT, run({("bl_base", "de", 600): {3: 50.0}}), "t", None)

"""The Step-2 checkpoint a target language's dev file chooses (pipeline/dev_choice.py), from Step 4's records alone:
the highest mean over seeds of macro-F1 on dev, the earliest of equals, test read at it and at the last checkpoint."""
from __future__ import annotations

import csv
import json

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.dev_choice import choose, said, table
from ds_minimodel.pipeline.records import Results, Score
from ds_minimodel.pipeline.report import run
from ds_minimodel.pipeline.results import write_results


def score(system: str, update: int, seed: int, accuracy: float, macro_f1: float | None = None,
          lang: str = "hi") -> Score:
    metrics = {"accuracy": accuracy, **({} if macro_f1 is None else {"macro_f1": macro_f1})}
    return Score(task="lohelp", lang=lang, seed=seed, metrics=metrics, system=system, step2_update=update,
                 embeddings=f"step2/{lang}/{system}/checkpoints/step_{update:08d}", step2_flops=1e15 * update,
                 task_model=f"step3/lohelp/base/seed{seed}/checkpoints/step_00000279",
                 v100_days=1e15 * update / 2.592e18)


def curve(system: str, dev: dict[int, tuple[float, float]], lang: str = "hi") -> list[Score]:
    """Two seeds a point apart around each (accuracy, macro-F1)."""
    return [score(system, update, seed, acc + (seed - 1.5) * 2, f1 + (seed - 1.5) * 2, lang)
            for update, (acc, f1) in dev.items() for seed in (1, 2)]


def test_the_choice_is_the_best_mean_macro_f1_on_dev_and_test_is_read_at_it_and_at_the_end():
    """Hindi's shape (RESULTS.md): Step 2 peaks early on dev, then falls below its update 0 by macro-F1 while accuracy
    rises; the choice follows macro-F1, not accuracy, and test is reported where dev chose and where Step 2 ended."""
    dev = curve("bl_base", {0: (44.5, 33.8), 50: (50.4, 41.4), 100: (49.6, 38.2), 150: (52.0, 33.2)})
    test = curve("bl_base", {0: (49.0, 41.5), 50: (47.0, 39.0), 100: (44.4, 33.2), 150: (42.8, 32.7)})
    (choice,) = choose(dev, test)
    assert (choice.system, choice.lang, choice.selected_on, choice.step2_update) == ("bl_base", "hi", "macro_f1", 50)
    assert choice.dev == pytest.approx(41.4) and choice.dev_last == pytest.approx(33.2) and choice.last_update == 150
    assert choice.embeddings == "step2/hi/bl_base/checkpoints/step_00000050"
    # The classifier to use with it: the seed that reads dev best there (seed 2, 2 points above seed 1).
    assert (choice.seed, choice.task_model) == (2, "step3/lohelp/base/seed2/checkpoints/step_00000279")
    assert choice.metric == "accuracy" and choice.test_mean == pytest.approx(47.0)
    assert choice.test_std == pytest.approx(2 ** 0.5) and choice.test_last == pytest.approx(42.8)
    assert choice.test_selected == pytest.approx(39.0) and choice.test_selected_last == pytest.approx(32.7)
    assert said(choice) == ("lohelp hi dev bl_base: update 50 chosen of 150 (macro_f1 41.4, at the last 33.2; test "
                            "47.0 (39.0) there, 42.8 (32.7) at the last, as accuracy (macro_f1); means over seeds)")


def test_equal_dev_scores_choose_the_earliest_and_a_kind_without_macro_f1_selects_on_its_headline():
    """Tagging scores accuracy alone; two checkpoints level on dev: the cheaper one. No test file in the language:
    the choice stands, its test columns are None."""
    dev = [score("minipost", u, s, 60.0 if u else 50.0) for u in (0, 100, 200) for s in (1, 2)]
    (choice,) = choose(dev, [])
    assert (choice.selected_on, choice.step2_update, choice.last_update) == ("accuracy", 100, 200)
    assert choice.seed == 1  # both seeds level there: the lowest
    assert choice.test_mean is None and choice.test_std is None and choice.test_last is None
    assert choice.test_selected is None and choice.test_selected_last is None
    assert said(choice).endswith("update 100 chosen of 200 (accuracy 60.0, at the last 60.0; means over seeds)")
    rows = table(Results(zero_shot=[], zero_shot_over_seeds=[], chosen_on_dev=[choice])).splitlines()
    assert rows[0].endswith("test at it and at the last checkpoint, accuracy, means over seeds")
    assert rows[2].split() == ["hi", "minipost", "100", "60.0", "200", "60.0", "-", "-"]
    (tested,) = choose(dev, [score("minipost", u, s, 70.0 + u / 100) for u in (0, 100, 200) for s in (1, 2)])
    assert said(tested).endswith("(accuracy 60.0, at the last 60.0; test 71.0 there, 72.0 at the last, as accuracy; "
                                 "means over seeds)")


def test_one_choice_per_system_and_language_in_the_systems_order():
    dev = [*curve("minipost", {0: (40, 30), 100: (45, 35)}), *curve("bl_base", {0: (40, 36), 100: (45, 35)}),
           *curve("bl_base", {0: (40, 30), 100: (45, 35)}, lang="de")]
    got = [(c.lang, c.system, c.step2_update) for c in choose(dev, [])]
    assert got == [("de", "bl_base", 100), ("hi", "bl_base", 0), ("hi", "minipost", 100)]


def test_results_json_keeps_the_dev_scores_and_choices_and_the_analysis_prints_them(tmp_path):
    """Written by Step 4's writer, read back by ``Results.load`` to the same records, printed by the analysis; a
    run with no target dev file writes neither list (its results.json is as before)."""
    dev = curve("bl_base", {0: (49.0, 41.5), 300: (45.0, 35.0)})
    test = curve("bl_base", {0: (48.0, 40.0), 300: (44.0, 33.0)})
    write_results(tmp_path, test, [], on_dev=dev)
    results = Results.load(tmp_path / "results.json")
    assert results.zero_shot_dev == dev and results.chosen_on_dev == choose(dev, test)
    summary = run(tmp_path / "results.json", tmp_path / "analysis", plots=False)
    lines = summary["chosen_on_dev"].splitlines()
    assert lines[0] == ("The Step-2 checkpoint chosen on each target language's dev file (lohelp): the highest "
                        "mean over seeds of macro_f1 on dev; test at it and at the last checkpoint, accuracy "
                        "(macro_f1), means over seeds")
    assert lines[2].split() == ["hi", "bl_base", "0", "41.5", "300", "35.0", "48.0", "+-", "1.4", "(40.0)", "44.0",
                                "(33.0)"]
    assert lines[3] == "1 of 1 choose a checkpoint before the last: hi bl_base (update 0)"
    # The command that writes the chosen model (seed 2's classifier, the update-0 rows) beside results.json.
    assert lines[5:] == [("Each chosen model as a Hugging Face folder (the classifier of the seed that reads dev best "
                          "there, the chosen embeddings and tokenizer swapped in):"),
                         ("  hi bl_base (seed 2): ds-minimodel hf export --model "
                          "step3/lohelp/base/seed2/checkpoints/step_00000279 --embeddings "
                          f"step2/hi/bl_base/checkpoints/step_00000000 --out {tmp_path / 'export/lohelp-hi-bl_base'}")]
    assert (tmp_path / "analysis" / "chosen_on_dev.txt").read_text() == summary["chosen_on_dev"] + "\n"
    with open(tmp_path / "results_dev.csv", newline="") as f:  # the dev readings, as results.csv has test's
        rows = list(csv.DictReader(f))
    assert [(r["system"], int(r["step2_update"]), int(r["seed"]), float(r["macro_f1"])) for r in rows] == [
        (r.system, r.step2_update, r.seed, r.metrics["macro_f1"]) for r in dev]
    write_results(tmp_path, test, [])
    assert not (tmp_path / "results_dev.csv").exists()  # not left from the run before, which had a dev file
    kept = json.loads((tmp_path / "results.json").read_text())
    assert "zero_shot_dev" not in kept and "chosen_on_dev" not in kept
    assert run(tmp_path / "results.json", tmp_path / "again", plots=False)["chosen_on_dev"] == ""
    assert not (tmp_path / "again" / "chosen_on_dev.txt").exists()


def test_a_choice_record_missing_a_field_is_refused_naming_the_file_and_the_place(tmp_path):
    dev = curve("bl_base", {0: (49.0, 41.5), 300: (45.0, 35.0)})
    write_results(tmp_path, curve("bl_base", {0: (48.0, 40.0)}), [], on_dev=dev)
    data = json.loads((tmp_path / "results.json").read_text())
    # A file written before the choice kept its classifier reads as it was, with no command to write the model.
    older = json.loads(json.dumps(data))
    del older["chosen_on_dev"][0]["seed"], older["chosen_on_dev"][0]["task_model"]
    (tmp_path / "results.json").write_text(json.dumps(older))
    text = table(Results.load(tmp_path / "results.json"), tmp_path / "export")
    assert "update 0" in text and "hf export" not in text
    del data["chosen_on_dev"][0]["embeddings"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"results\.json: chosen_on_dev\[0\]: missing key 'embeddings'"):
        Results.load(tmp_path / "results.json")


def test_each_step2_run_gets_its_own_choice_read_against_its_own_test_scores(tmp_path):
    """A further Step-2 run (``step2_seeds``) of the same system and language is chosen apart from the main one, its
    test columns from its own records, named as its jobs are in the table, the Step-4 line and the export folder."""
    from dataclasses import replace

    def run(records, step2_seed):
        return [replace(r, step2_seed=step2_seed, embeddings=r.embeddings.replace("step2/", f"step2-seed{step2_seed}/"))
                if step2_seed else r for r in records]
    dev = [*curve("minipost", {0: (40, 30), 100: (45, 35)}), *run(curve("minipost", {0: (40, 36), 100: (45, 35)}), 2)]
    test = [*curve("minipost", {0: (50, 40), 100: (60, 50)}), *run(curve("minipost", {0: (55, 45), 100: (70, 60)}), 2)]
    main, further = choose(dev, test)
    assert (main.step2_seed, main.step2_update, main.test_mean) == (None, 100, pytest.approx(60.0))
    assert (further.step2_seed, further.step2_update, further.test_mean, further.test_last) == (
        2, 0, pytest.approx(55.0), pytest.approx(70.0))
    assert further.embeddings == "step2-seed2/hi/minipost/checkpoints/step_00000000"
    assert said(further).startswith("lohelp hi dev minipost.step2-seed2: update 0 chosen of 100")
    write_results(tmp_path, test[:4], [], step2_runs=test[4:], on_dev=dev)
    results = Results.load(tmp_path / "results.json")
    assert results.chosen_on_dev == [main, further]
    lines = table(results, tmp_path / "export").splitlines()
    assert [line.split()[:3] for line in lines[2:4]] == [["hi", "minipost", "100"], ["hi", "minipost.step2-seed2", "0"]]
    assert lines[4] == "1 of 2 choose a checkpoint before the last: hi minipost.step2-seed2 (update 0)"
    assert lines[-1].endswith(f"--out {tmp_path / 'export/lohelp-hi-minipost.step2-seed2'}")

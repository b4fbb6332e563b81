"""scripts/experiments/readings_results.py: Step 4's results.json from committed checkpoint readings and Step-2
training logs, for a run whose checkpoints are gone."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.flops import to_gpu_days
from ds_minimodel.pipeline import report
from ds_minimodel.pipeline.analysis import curves, time_to_target
from ds_minimodel.pipeline.records import Results

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/experiments/readings_results.py"
spec = importlib.util.spec_from_file_location("readings_results", SCRIPT)
readings_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readings_results)

PER_UPDATE = {"bl_base": 3.0e11, "minipost": 2.0e11}
ACCURACY = {("bl_base", 0): (20.0, 22.0), ("bl_base", 300): (50.0, 54.0), ("bl_base", 600): (60.0, 62.0),
            ("minipost", 0): (20.0, 22.0), ("minipost", 300): (58.0, 60.0), ("minipost", 600): (59.0, 61.0)}


def lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_run(folder: Path, test_file: Path, accuracy=ACCURACY) -> None:
    """A run folder as minilm_long_test.sh's README commits it: readings and training logs per (lang, system)."""
    folder.mkdir(parents=True, exist_ok=True)
    for system, per_update in PER_UPDATE.items():
        (folder / f"step2-de-{system}.metrics.jsonl").write_text(lines(
            [{"step": s, "flops": s * per_update, "loss": 3.0} for s in (25, 50, 600)]))
        (folder / f"step2-de-{system}.test_readings.jsonl").write_text(lines(
            [{"task_model": f"runs/r/step3/t/base/seed{seed}/checkpoints/step_00001158", "file": str(test_file),
              "lang": "de", "embeddings": f"runs/r/step2/de/{system}/checkpoints/step_{update:08d}",
              "accuracy": scores[seed - 1], "macro_f1": scores[seed - 1] / 2, "best_constant": 40.0}
             for (s, update), scores in accuracy.items() if s == system for seed in (1, 2)]))
    (folder / "step3-base-seed1.dev_scores.json").write_text(json.dumps(
        {"accuracy": 75.0, "macro_f1": 60.0, "file": "dev.en.jsonl", "language": "en"}))


@pytest.fixture
def task(tmp_path):
    rows = [{"id": str(i), "text": f"{w} word {i}", "label": w} for i, w in enumerate(["alpha", "beta"] * 6)]
    for name in ("train.en.jsonl", "test.en.jsonl", "test.de.jsonl"):
        (tmp_path / name).write_text(lines(rows))
    return readings_results.TaskSettings(name="t", format="generic", train=str(tmp_path / "train.en.jsonl"),
                                         test={"en": str(tmp_path / "test.en.jsonl"),
                                               "de": str(tmp_path / "test.de.jsonl")})


def test_each_reading_becomes_a_step4_record_with_its_seed_update_and_flops(tmp_path, task):
    write_run(tmp_path / "run", Path(task.test["de"]))
    records = readings_results.zero_shot_scores(tmp_path / "run", task)
    assert len(records) == 12
    r = next(r for r in records if r.system == "minipost" and r.step2_update == 300 and r.seed == 2)
    assert (r.task, r.lang, r.metrics) == ("t", "de", {"accuracy": 60.0, "macro_f1": 30.0})
    assert r.step2_flops == 300 * 2.0e11 and r.v100_days == to_gpu_days(300 * 2.0e11)
    # what the analysis makes of them: BL_BASE's target 95% of 61 = 57.95, crossed at 300 + 300 * 3.95 / 9 updates
    out = tmp_path / "out"
    out.mkdir()
    readings_results.write_results(out, records, readings_results.dev_scores(tmp_path / "run", task))
    results = Results.load(out / "results.json")
    assert [(d.primary, d.seed, d.metrics["accuracy"]) for d in results.source_dev] == [("base", 1, 75.0)]
    by_key, _ = curves(results.zero_shot_over_seeds, "test")
    reached = time_to_target(by_key[("t", "de", "bl_base")], 0.95 * 61.0)
    assert reached.updates == pytest.approx(300 + 300 * (0.95 * 61.0 - 52.0) / (61.0 - 52.0))


def test_the_flops_per_update_must_be_one_constant(tmp_path, task):
    write_run(tmp_path, Path(task.test["de"]))
    log = tmp_path / "step2-de-minipost.metrics.jsonl"
    log.write_text(lines([{"step": 25, "flops": 25 * 2.0e11}, {"step": 50, "flops": 51 * 2.0e11}]))
    with pytest.raises(InputError, match="step2-de-minipost.metrics.jsonl: FLOPs per update vary"):
        readings_results.zero_shot_scores(tmp_path, task)
    log.unlink()
    with pytest.raises(InputError, match="step2-de-minipost.metrics.jsonl: no such file"):
        readings_results.zero_shot_scores(tmp_path, task)


@pytest.mark.parametrize("change, problem", [
    (lambda r: r.update(file="other.jsonl"), "reads 'other.jsonl' .de., not task 't''s de test file"),
    (lambda r: r.update(embeddings="runs/r/step2/fr/bl_base/checkpoints/step_00000300"),
     "are not bl_base's de Step 2"),
    (lambda r: r.update(task_model="runs/r/step3/t/base/checkpoints/step_1"), "the finetuning seed not found"),
    (lambda r: r.pop("task_model"), "the finetuning seed not found in 'None'"),
    (lambda r: [r.pop("accuracy"), r.pop("macro_f1")], "needs numbers among accuracy, macro_f1, f1, exact_match"),
    (lambda r: r.update(accuracy="high"), "needs numbers among"),
])
def test_a_reading_of_something_else_is_refused_naming_its_line(tmp_path, task, change, problem):
    write_run(tmp_path, Path(task.test["de"]))
    path = tmp_path / "step2-de-bl_base.test_readings.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    change(rows[2])
    path.write_text(lines(rows))
    with pytest.raises(InputError, match=f"step2-de-bl_base.test_readings.jsonl:3: .*{problem}"):
        readings_results.zero_shot_scores(tmp_path, task)


def test_a_checkpoint_read_twice_with_one_classifier_is_refused(tmp_path, task):
    write_run(tmp_path, Path(task.test["de"]))
    path = tmp_path / "step2-de-bl_base.test_readings.jsonl"
    path.write_text(path.read_text() + path.read_text().splitlines()[0] + "\n")
    with pytest.raises(InputError, match=r"jsonl:7: bl_base de seed 1 update 0 read twice \(first at line 1\)"):
        readings_results.zero_shot_scores(tmp_path, task)


def test_a_folder_without_readings_or_with_bad_json_is_refused(tmp_path, task):
    with pytest.raises(InputError, match="no step2-<lang>-<system>.test_readings.jsonl"):
        readings_results.zero_shot_scores(tmp_path, task)
    write_run(tmp_path, Path(task.test["de"]))
    (tmp_path / "step2-de-minipost.test_readings.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match="step2-de-minipost.test_readings.jsonl:1: bad JSON"):
        readings_results.zero_shot_scores(tmp_path, task)


def test_a_committed_step4_turned_into_readings_gives_its_analysis_back(tmp_path):
    """The 600-update continued-MiniLM run's Step 4 records, written out as readings beside its Step-2 logs, give
    the tables its analysis committed (the speedup bounds are newer than those tables: compared without them)."""
    run = SCRIPT.parents[2] / "results/reference-minilm-continued"
    committed = Results.load(run / "results.json")
    folder = tmp_path / "readings"
    folder.mkdir()
    for z in committed.zero_shot:
        with (folder / f"step2-{z.lang}-{z.system}.test_readings.jsonl").open("a") as f:
            f.write(json.dumps({"task_model": z.task_model, "file": z.test_file, "lang": z.lang,
                                "embeddings": z.embeddings, **z.metrics}) + "\n")
        log = folder / f"step2-{z.lang}-{z.system}.metrics.jsonl"
        if not log.exists():
            log.write_text((run / f"step2-{z.lang}-{z.system}/metrics.jsonl").read_text())
    task = readings_results.TaskSettings(name="lohelp", format="generic", train="unused",
                                         test={z.lang: z.test_file for z in committed.zero_shot})
    records = readings_results.zero_shot_scores(folder, task)
    # every field but the number of examples scored, which readings do not keep
    assert (sorted(sorted(r.to_dict().items()) for r in records)
            == sorted(sorted((k, v) for k, v in r.to_dict().items() if k != "n") for r in committed.zero_shot))
    readings_results.write_results(tmp_path, records, committed.source_dev, baselines=committed.baselines,
                                   source_model=committed.source_model)
    report.run(tmp_path / "results.json", tmp_path / "analysis", plots=False)
    for name in ("table2.txt", "curves_over_languages.json"):
        assert (tmp_path / "analysis" / name).read_text() == (run / "analysis" / name).read_text()
    bounds = {"speedup_at_least", "speedup_at_most"}
    ours = json.loads((tmp_path / "analysis/time_to_target.json").read_text())
    ours["rows"] = [{k: v for k, v in row.items() if k not in bounds} for row in ours["rows"]]
    assert ours == json.loads((run / "analysis/time_to_target.json").read_text())

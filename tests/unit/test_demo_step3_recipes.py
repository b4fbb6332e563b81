"""scripts/experiments/demo_step3_recipes.py: each variant's DeepSpeed file and spec, resuming, and its table read
back from the committed scores (RESULTS.md, "The demo's English classifier")."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("demo_step3_recipes", REPO / "scripts/experiments/demo_step3_recipes.py")
recipes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipes)


def test_the_committed_scores_give_the_committed_table():
    rows = [json.loads(line) for line in (REPO / "results/demo-step3-recipes/scores.jsonl").read_text().splitlines()]
    printed = (REPO / "results/demo-step3-recipes/table.txt").read_text().splitlines()
    assert recipes.table(rows) == printed[1:]  # the first line names the run
    assert printed[2].split()[:3] == ["lr0.001-ep3", "47.1", "(21.8)"]  # the demo's own recipe, as RESULTS.md says


def test_a_variant_trains_the_demo_spec_at_its_rate_and_length_in_one_micro_batch_once(tmp_path, monkeypatch):
    run, out = tmp_path / "run", tmp_path / "out"
    (run / "specs").mkdir(parents=True)
    out.mkdir()
    demo_spec = {"ds_config": "ds_configs/cpu_finetune.json", "epochs": 3.0, "seed": 2, "out": "runs/demo/x",
                 "model": "runs/demo/step1/base/checkpoints/step_00001500", "run_name": "step3-lohelp-base-seed2"}
    (run / "specs/step3-lohelp-base-seed2.json").write_text(json.dumps(demo_spec))
    calls = []
    monkeypatch.setattr(recipes.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    folder = recipes.finetune(run, out, 3e-4, 10.0, 2, env={})
    assert folder == out / "lr0.0003-ep10" / "seed2"
    written = json.loads(Path(calls[0][-1]).read_text())
    assert written["epochs"] == 10.0 and written["out"] == str(folder) and written["resume"] is False
    assert written["model"] == demo_spec["model"] and written["seed"] == 2
    ds = json.loads(Path(written["ds_config"]).read_text())
    assert ds["optimizer"]["params"]["lr"] == ds["scheduler"]["params"]["warmup_max_lr"] == 3e-4
    assert ds["train_micro_batch_size_per_gpu"] == ds["train_batch_size"] == 32
    assert calls[0][1] == "run_finetune.py"
    # A folder without a run's run.json starts afresh, one with it resumes (the stages' rule: only --resume may
    # continue a run), a finished one (its summary.json) is left alone.
    folder.mkdir(parents=True)
    recipes.finetune(run, out, 3e-4, 10.0, 2, env={})
    assert json.loads(Path(calls[1][-1]).read_text())["resume"] is False
    (folder / "run.json").write_text("{}")
    recipes.finetune(run, out, 3e-4, 10.0, 2, env={})
    assert json.loads(Path(calls[2][-1]).read_text())["resume"] is True
    (folder / "summary.json").write_text("{}")
    recipes.finetune(run, out, 3e-4, 10.0, 2, env={})
    assert len(calls) == 3

"""The system registry (``ds_minimodel.systems``): a fifth system added in one place, a plugin module, runs through
the whole method like the paper's four.

The system is MiniJoint with its second head after layer 3 instead of the config's N: a primary with that head and
a system adapting the layers below it. It is registered by a module named in DS_MINIMODEL_PLUGINS, so every launched
stage (pretraining, Step 2, finetuning, the analysis) sees it too; nothing in the package names it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ds_minimodel import flops, systems
from ds_minimodel.pipeline.settings import PipelineConfig
from tests.integration.conftest import REPO, run_cmd

PLUGIN = '''
from ds_minimodel.systems import Primary, System, register

register(Primary("dual3", num_layers=lambda d: d.layers, aux_head_layer=lambda d: 3))
register(System("minijoint3", "MiniJoint-3", "dual3", "mini", step2_layers=lambda d: 3,
                description="MiniJoint with its second head after layer 3"))
'''


def head(source: Path, out: Path, lines: int) -> str:
    out.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8")
    return str(out)


def test_a_registered_fifth_system_runs_through_step2_flops_and_analysis(tmp_path, monkeypatch):
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin/my_systems.py").write_text(PLUGIN)
    env_path = str(tmp_path / "plugin")
    monkeypatch.setenv("PYTHONPATH", env_path)
    monkeypatch.setenv(systems.PLUGINS_ENV, "my_systems")

    config = json.loads((REPO / "configs/demo.json").read_text())
    config.update(out=str(tmp_path / "out"), ranks=1, preset="tiny", vocab_size=500, systems=["bl_base", "minijoint3"])
    for corpus in [config["source"], *config["targets"]]:
        corpus["corpus"] = head(REPO / corpus["corpus"], tmp_path / f"{corpus['lang']}.txt", 3000)
    for section, steps in (("step1", 4), ("step2", 4)):
        config[section].update(steps=steps, save_every=2, log_every=2)
    del config["step1b"]
    config["step3"].update(epochs=0.05, seeds=[1])
    task = config["tasks"][0]
    task["train"] = head(REPO / task["train"], tmp_path / "train.jsonl", 2000)
    task["dev"] = {"en": head(REPO / task["dev"]["en"], tmp_path / "dev.en.jsonl", 100)}
    task["test"] = {lang: head(REPO / path, tmp_path / f"test.{lang}.jsonl", 100)
                    for lang, path in task["test"].items()}
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(config))

    run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path)], timeout=600)

    out = tmp_path / "out"
    assert (out / "step1/dual3").is_dir() and not (out / "step1/minijoint").exists()
    meta = json.loads(next((out / "step2/de/minijoint3/checkpoints").glob("step_*/meta.json")).read_text())
    assert meta["system"] == "minijoint3" and meta["body_layers"] == 3  # the layers below the head after layer 3
    results = json.loads((out / "results.json").read_text())
    assert {r["system"] for r in results["zero_shot"]} == {"bl_base", "minijoint3"}
    # Its Step-2 FLOPs are those of a 3-layer body: A3 at l=3 for the run's shape.
    record = next(r for r in results["zero_shot"] if r["system"] == "minijoint3" and r["step2_update"] == 4)
    base = next(r for r in results["zero_shot"] if r["system"] == "bl_base" and r["step2_update"] == 4)
    assert 0 < record["step2_flops"] < base["step2_flops"]
    assert "minijoint3" in (out / "analysis/table3.txt").read_text()  # the analysis's tables list it

    # The same entry in this process: the FLOP table and the pipeline config know it.
    sys.path.insert(0, env_path)
    monkeypatch.setattr(systems, "_plugins_loaded", False)
    try:
        systems.load_plugins()
        costs = flops.system_costs(**flops.PAPER)
        assert costs["minijoint3"]["step2"] == flops.adapt_flops(l=3, **flops.PAPER)
        assert costs["minijoint3"]["step1"] == flops.dual_head_pretrain_flops(l=12, aux_layer=3, **flops.PAPER)
        assert PipelineConfig.load(path).primaries() == ["base", "dual3"]
    finally:
        systems.SYSTEMS.pop("minijoint3", None)
        systems.PRIMARIES.pop("dual3", None)
        sys.path.remove(env_path)
        sys.modules.pop("my_systems", None)

"""Systems beyond the paper's four, and the paper's studies beyond Tables 2-3, through one pipeline run on the tiny
preset (12 layers, as the paper's depth study needs):

- a fifth system added in one place, a plugin module: MiniJoint with its second head after layer 3, registered by a
  module named in DS_MINIMODEL_PLUGINS, so every launched stage sees it too; nothing in the package names it;
- in the same module, a MiniPost of another depth than the config's (its own Step-1b shape: 3 layers kept, 1 new)
  and a Step-2 initialiser of its own (every new row the mean of the source rows), which the pipeline's
  ``step2.init`` then names;
- the depth study's ``minijoint@12`` (both heads on the top layer, section 5.2), which needs no registration;
- the plugin system's mini-model finetuned and scored on English beside the primaries (``source_minis``, Table 5);
- extractive QA end to end (a SQuAD-format task: F1 and exact match through Step 4 and the tables).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ds_minimodel import flops, systems
from ds_minimodel.pipeline.settings import PipelineConfig
from tests.integration.conftest import REPO, run_cmd

PLUGIN = '''
import dataclasses

from ds_minimodel.model.embedding_init import NUM_SPECIAL, Initialiser
from ds_minimodel.model.embedding_init import register as register_initialiser
from ds_minimodel.systems import Primary, System, register

register(Primary("dual3", num_layers=lambda d: d.layers, aux_head_layer=lambda d: 3))
register(System("minijoint3", "MiniJoint-3", "dual3", "mini", step2_layers=lambda d: 3,
                description="MiniJoint with its second head after layer 3"))
register(System("minipost31", "MiniPost (3 + 1)", "base", "step1b", step2_layers=lambda d: d.keep + d.new,
                depths_of=lambda d: dataclasses.replace(d, keep=3, new=1)))


def mean_rows(inp):
    new = inp.src_ids < 0
    inp.embeddings[new] = inp.source_embeddings[NUM_SPECIAL:].mean(0).to(inp.embeddings.dtype)
    return {"mixed": int(new.sum())}


register_initialiser(Initialiser("mean", copies="shared", mix=mean_rows))
'''
SYSTEMS = ["bl_base", "minijoint3", "minijoint@12", "minipost31"]
# The module's pipeline run (a module fixture) is made once, in one xdist worker.
pytestmark = pytest.mark.xdist_group("systems")


def squad_file(corpus: Path, out: Path, questions: int) -> str:
    """A SQuAD v1.1 file from a corpus: each question is a line's opening words, its answer the line's fifth word
    (in that line, at its offset). Enough to train and score the span head; not a task a model learns."""
    data = []
    for i, line in enumerate(l for l in corpus.read_text(encoding="utf-8").splitlines() if len(l.split()) >= 8):
        if i == questions:
            break
        context = " ".join(line.split()[:40])
        words = context.split()
        answer_start = len(" ".join(words[:4])) + 1
        data.append({"title": f"t{i}", "paragraphs": [{"context": context, "qas": [{
            "id": f"q{i}", "question": " ".join(words[:3]) + "?",
            "answers": [{"text": words[4], "answer_start": answer_start}]}]}]})
    out.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return str(out)


def head(source: Path, out: Path, lines: int) -> str:
    out.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8")
    return str(out)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    tmp_path = tmp_path_factory.mktemp("systems")
    mp = pytest.MonkeyPatch()
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin/my_systems.py").write_text(PLUGIN)
    env_path = str(tmp_path / "plugin")
    mp.setenv("PYTHONPATH", env_path)
    mp.setenv(systems.PLUGINS_ENV, "my_systems")

    config = json.loads((REPO / "configs/demo.json").read_text())
    config.update(out=str(tmp_path / "out"), ranks=1, preset="tiny", vocab_size=500, systems=SYSTEMS,
                  source_minis=["minijoint3"])
    for corpus in [config["source"], *config["targets"]]:
        corpus["corpus"] = head(REPO / corpus["corpus"], tmp_path / f"{corpus['lang']}.txt", 3000)
    config["step1"].update(steps=4, save_every=2, log_every=2)
    config["step2"].update(steps=4, save_every=4, log_every=2, init="mean")  # checkpoints at updates 0 and 4
    config["step1b"].update(steps=4, save_every=4, log_every=2)
    config["step3"].update(seeds=[1])
    # One task, in the QA format: the other parts of this run (systems, studies) are the same for every format.
    squad_en = squad_file(REPO / "demo_data/corpus/en.txt", tmp_path / "qa.en.json", 64)
    squad_de = squad_file(REPO / "demo_data/corpus/de.txt", tmp_path / "qa.de.json", 24)
    config["tasks"] = [{"name": "qa", "format": "squad", "train": squad_en, "dev": {"en": squad_en},
                        "test": {"en": squad_en, "de": squad_de},
                        "finetune": {"max_len": 128, "doc_stride": 32, "epochs": 1}}]
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(config))
    # One rank: the shared launch is one plain process whatever --launcher names (pipeline.workers.launch_command).
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--launcher", "torchrun"],
                   timeout=600)
    yield {"out": tmp_path / "out", "config": path, "env_path": env_path, "stdout": proc.stdout}
    mp.undo()


def test_a_registered_fifth_system_runs_through_step2_flops_and_analysis(run, monkeypatch):
    out = run["out"]
    assert (out / "step1/dual3").is_dir() and not (out / "step1/minijoint").exists()
    meta = json.loads(next((out / "step2/de/minijoint3/checkpoints").glob("step_*/meta.json")).read_text())
    assert meta["system"] == "minijoint3" and meta["body_layers"] == 3  # the layers below the head after layer 3
    results = json.loads((out / "results.json").read_text())
    assert {r["system"] for r in results["zero_shot"]} == set(SYSTEMS)
    # Its Step-2 FLOPs are those of a 3-layer body: A3 at l=3 for the run's shape.
    record = next(r for r in results["zero_shot"] if r["system"] == "minijoint3" and r["step2_update"] == 4)
    base = next(r for r in results["zero_shot"] if r["system"] == "bl_base" and r["step2_update"] == 4)
    assert 0 < record["step2_flops"] < base["step2_flops"]
    assert "minijoint3" in (out / "analysis/table3.txt").read_text()  # the analysis's tables list it
    # The MiniPost of its own depth: Step 1b kept 3 of the 12 layers and trained 1; Step 2 ran over those 4. The
    # plugin's initialiser started every system's rows (no other initialiser's record).
    mini = json.loads(next((out / "step1b/minipost31/checkpoints").glob("step_*/meta.json")).read_text())
    assert (mini["keep_layers"], mini["new_layers"], mini["model_config"]["num_layers"]) == (3, 1, 4)
    meta = json.loads(next((out / "step2/de/minipost31/checkpoints").glob("step_*/meta.json")).read_text())
    assert meta["system"] == "minipost31" and meta["body_layers"] == 4
    for system in SYSTEMS:
        ran = json.loads((out / f"step2/de/{system}/run.json").read_text())
        assert ran["init"] == "mean" and ran["spec"]["init"] == "mean", system

    # The same entry in this process: the FLOP table and the pipeline config know it.
    monkeypatch.syspath_prepend(run["env_path"])
    monkeypatch.setenv(systems.PLUGINS_ENV, "my_systems")
    monkeypatch.setattr(systems, "_plugins_loaded", False)
    try:
        systems.load_plugins()
        costs = flops.system_costs(**flops.PAPER)
        assert costs["minijoint3"]["step2"] == flops.adapt_flops(l=3, **flops.PAPER)
        assert costs["minijoint3"]["step1"] == flops.dual_head_pretrain_flops(l=12, aux_layer=3, **flops.PAPER)
        assert PipelineConfig.load(run["config"]).primaries() == ["base", "dual3", "minijoint@12"]
    finally:
        from ds_minimodel.model.embedding_init import INITIALISERS

        systems.SYSTEMS.pop("minijoint3", None)
        systems.SYSTEMS.pop("minipost31", None)
        systems.PRIMARIES.pop("dual3", None)
        INITIALISERS.pop("mean", None)
        sys.modules.pop("my_systems", None)


def test_depth_study_with_both_heads_on_the_top_layer(run):
    """Section 5.2's N=12: a dual-head primary whose heads both read layer 12, Step 2 over all 12 layers under the
    second head; the analysis writes Table 4 (with the bounds of Table A4), Table A3 and Figure 4."""
    out = run["out"]
    step1 = json.loads(next((out / "step1/minijoint@12/checkpoints").glob("step_*/meta.json")).read_text())
    assert step1["model_config"]["aux_head_layer"] == step1["model_config"]["num_layers"] == 12
    step2 = json.loads(next((out / "step2/de/minijoint@12/checkpoints").glob("step_*/meta.json")).read_text())
    assert step2["system"] == "minijoint@12" and step2["body_layers"] == 12
    analysis = out / "analysis"
    for name in ("table4.txt", "table_a3.txt"):
        text = (analysis / name).read_text()
        assert "N=12" in text or "\n12 " in text, text
        assert text.strip() in run["stdout"]
    assert (analysis / "figure4_qa_de.png").read_bytes()[:4] == b"\x89PNG"


def test_a_mini_model_is_finetuned_and_scored_in_english_beside_the_primaries(run):
    """Table 5 (section 5.3): the plugin system's mini-model (layers 1-3 and its second head) cut out once,
    finetuned per task and seed, and scored on the English test files with its own embeddings."""
    out = run["out"]
    mini = json.loads((out / "minis/minijoint3/meta.json").read_text())
    assert mini["kind"] == "minijoint-mini" and mini["model_config"]["num_layers"] == 3
    finetuned = json.loads(next((out / "step3/qa/mini-minijoint3/seed1/checkpoints").glob(
        "step_*/meta.json")).read_text())
    assert finetuned["model_config"]["num_layers"] == 3
    results = json.loads((out / "results.json").read_text())
    scored = {(r["task"], r["primary"]) for r in results["source_test"]}
    assert scored == {("qa", p) for p in ("base", "dual3", "minijoint@12", "mini-minijoint3")}
    table5 = (out / "analysis/table5.txt").read_text()
    assert "MiniJoint-3 (mini-model)" in table5 and "MiniJoint-3 (full)" in table5 and "BL_BASE" in table5


def test_extractive_qa_runs_through_step4_and_the_tables(run):
    """Item 5 of issue 19: a SQuAD-format task (the MLQA/XQuAD format) finetuned at its own settings, scored
    zero-shot with F1 and exact match for every system and checkpoint, and tabulated by F1."""
    out = run["out"]
    run_json = json.loads((out / "step3/qa/base/seed1/run.json").read_text())
    assert (run_json["task"]["max_len"], run_json["task"]["doc_stride"]) == (128, 32)  # its own settings
    results = json.loads((out / "results.json").read_text())
    qa = [r for r in results["zero_shot"] if r["task"] == "qa"]
    assert {(r["system"], r["step2_update"]) for r in qa} == {(s, u) for s in SYSTEMS for u in (0, 4)}
    assert all(0.0 <= r["f1"] <= 100.0 and 0.0 <= r["exact_match"] <= r["f1"] + 1e-9 for r in qa)
    assert {m["metric"] for m in results["zero_shot_over_seeds"] if m["task"] == "qa"} == {"f1"}
    assert "Table 2 (qa, f1)" in (out / "analysis/table2.txt").read_text()
    assert (out / "analysis/figure3_qa_de.png").is_file()


def test_further_pretraining_and_step2_runs_are_scored_beside_the_main_one(tmp_path):
    """Appendix A.5: ``pretrain_seeds`` repeats Steps 1-3 with another Step-1 seed in its own folder; Step 4 scores
    its final Step-2 checkpoint, and Table A5 sets the runs side by side. ``step2_seeds`` repeats Step 2 alone over
    the main run's body; Step 4 scores each of its checkpoints, and the analysis tabulates each run's speedup. A
    Step-2 seed added to the finished run trains its own Step 2 alone and scores only its checkpoints."""
    config = json.loads((REPO / "configs/demo.json").read_text())
    config.update(out=str(tmp_path / "out"), ranks=1, preset="tiny", vocab_size=500, systems=["bl_base"],
                  pretrain_seeds=[5], step2_seeds=[4])
    for corpus in [config["source"], *config["targets"]]:
        corpus["corpus"] = head(REPO / corpus["corpus"], tmp_path / f"{corpus['lang']}.txt", 3000)
    for section, steps in (("step1", 2), ("step2", 2)):
        config[section].update(steps=steps, save_every=2, log_every=2)
    config["step2"]["init"] = "overlap"  # not the demo's FOCUS: its static vectors took 14 of this run's 40 s
    del config["step1b"]
    config["step3"].update(epochs=0.02, seeds=[1])
    task = config["tasks"][0]
    task["train"] = head(REPO / task["train"], tmp_path / "train.jsonl", 2000)
    task["dev"] = {"de": head(REPO / task["dev"]["de"], tmp_path / "dev.de.jsonl", 50)}  # each Step-2 run's choice
    task["test"] = {"de": head(REPO / task["test"]["de"], tmp_path / "test.de.jsonl", 50)}
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(config))
    run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--launcher", "torchrun"],
            timeout=600)

    out = tmp_path / "out"
    main, extra = (json.loads((folder / "step1/base/run.json").read_text()) for folder in (out, out / "pretrain-seed5"))
    assert (main["seed"], extra["seed"]) == (1, 5)
    assert not (out / "pretrain-seed5/data").exists()  # the prepared data are shared
    results = json.loads((out / "results.json").read_text())
    assert sorted((r["pretrain_seed"], r["system"], r["step2_update"]) for r in results["pretrain_runs"]) == [
        (1, "bl_base", 2), (5, "bl_base", 2)]
    assert {r["pretrain_seed"] for r in results["pretrain_runs"]} == {1, 5}
    table = (out / "analysis/table_a5.txt").read_text().splitlines()
    assert table[1].split()[2:6] == ["seed", "1", "seed", "5"] and table[2].split()[:2] == ["bl_base", "de"]
    further = json.loads((out / "step2-seed4/de/bl_base/run.json").read_text())
    assert further["seed"] == 4 and further["body"] == json.loads((out / "step2/de/bl_base/run.json").read_text())[
        "body"]
    assert sorted((r["step2_seed"], r["step2_update"]) for r in results["step2_runs"]) == [(4, 0), (4, 2)]
    assert {r["step2_seed"] for r in results["step2_runs_over_seeds"]} == {4}
    assert all("step2_seed" not in r for r in results["zero_shot"])
    assert "BL_BASE's final score per run (main, seed 4): de " in (out / "analysis/table3_step2_runs.txt").read_text()
    # German dev chooses a checkpoint of each Step-2 run, its test read from that run's own scores.
    assert sorted((r.get("step2_seed", 0), r["step2_update"]) for r in results["zero_shot_dev"]) == [
        (0, 0), (0, 2), (4, 0), (4, 2)]
    chosen = {c.get("step2_seed"): c for c in results["chosen_on_dev"]}
    assert list(chosen) == [None, 4] and all(c["system"] == "bl_base" for c in chosen.values())
    test = {(r["step2_seed"], r["step2_update"]): r["accuracy"] for r in results["step2_runs"]}
    assert chosen[4]["test_mean"] == pytest.approx(test[(4, chosen[4]["step2_update"])])
    assert chosen[4]["embeddings"].startswith(str(out / "step2-seed4/de/bl_base/checkpoints/"))
    assert f"--out {out / 'export/lohelp-de-bl_base.step2-seed4'}" in (out / "analysis/chosen_on_dev.txt").read_text()
    listed = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"]).stdout
    assert "step2-bl_base.step2-seed4" in listed and "to run" not in listed  # Step 4 counts the further runs too

    # A Step-2 seed added to the finished run: only its Step 2 trains and only its checkpoints are scored
    def stamps() -> dict[str, int]:
        kept = [p for p in out.iterdir() if p.is_dir() and p.name not in ("specs", "logs", "analysis", "workers")]
        return {str(p.relative_to(out)): p.stat().st_mtime_ns for folder in kept for p in folder.rglob("*")
                if p.is_file()}

    before = stamps()
    path.write_text(json.dumps({**config, "step2_seeds": [4, 6]}))
    listed = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"]).stdout
    assert [line.split()[0] for line in listed.splitlines() if "to run" in line] == ["step2-bl_base.step2-seed6",
                                                                                     "step4"]
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--launcher", "torchrun"],
                   timeout=600)
    jobs = [line for line in proc.stdout.splitlines() if line.startswith("$ ") and "--config" in line]
    assert len(jobs) == 1 and "step2-de-bl_base.step2-seed6" in jobs[0], jobs
    after = stamps()
    assert [name for name, stamp in before.items() if after.get(name) != stamp] == []  # nothing finished rewritten
    new = set(after) - set(before)
    assert {name.split("/")[0] for name in new} == {"step2-seed6", "step4", "tensorboard"}, new
    assert all("seed6" in name for name in new), new
    results = json.loads((out / "results.json").read_text())
    assert sorted((r["step2_seed"], r["step2_update"]) for r in results["step2_runs"]) == [(4, 0), (4, 2), (6, 0),
                                                                                          (6, 2)]
    assert "(main, seed 4, seed 6)" in (out / "analysis/table3_step2_runs.txt").read_text()
    assert [c.get("step2_seed") for c in results["chosen_on_dev"]] == [None, 4, 6]

    # A Step-1 seed added to the finished run: only its Steps 1-3 train, in its own folder, and Table A5 gains it
    before = stamps()
    path.write_text(json.dumps({**config, "step2_seeds": [4, 6], "pretrain_seeds": [5, 8]}))
    listed = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"]).stdout
    to_run = [line.split()[0] for line in listed.splitlines() if "to run" in line]
    assert "step4" in to_run and len(to_run) > 1, listed
    assert all(name.endswith(".seed8") for name in to_run if name != "step4"), listed
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--launcher", "torchrun"],
                   timeout=600)
    jobs = [line for line in proc.stdout.splitlines() if line.startswith("$ ") and "--config" in line]
    assert len(jobs) == 3 and all(job.endswith(".seed8.json") for job in jobs), jobs  # Steps 1, 2, 3
    after = stamps()
    assert [name for name, stamp in before.items() if after.get(name) != stamp] == []
    new = set(after) - set(before)
    assert {name.split("/")[0] for name in new} == {"pretrain-seed8", "tensorboard"}, new  # its Step 4 cache too
    assert any(name.startswith("pretrain-seed8/step4/") for name in new) and not (out / "pretrain-seed8/data").exists()
    assert json.loads((out / "pretrain-seed8/step1/base/run.json").read_text())["seed"] == 8
    results = json.loads((out / "results.json").read_text())
    assert sorted(r["pretrain_seed"] for r in results["pretrain_runs"]) == [1, 5, 8]
    assert len(results["step2_runs"]) == 4  # the further Step-2 runs are read as before, not again
    table = (out / "analysis/table_a5.txt").read_text().splitlines()
    assert table[1].split()[2:8] == ["seed", "1", "seed", "5", "seed", "8"]

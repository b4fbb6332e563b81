"""The user's case end to end (issue 45): the pipeline started from an existing English model (a tiny random bare
BERT folder with a WordPiece tokenizer: its MLM head trained first, no pretraining), then a target language added to
the finished run with the same command: only that language's Step 2 and Step 4 run, nothing finished is retrained
or re-scored, and the results and tables include it. One CPU rank, torchrun, stages of a few updates."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import DEMO, run_cmd
from tests.unit.test_source_model import tiny_bert

TEST_LINES = 60
pytestmark = pytest.mark.xdist_group("source_model")  # one worker: the tests share the first run's folder


def _head(path: Path, folder: Path) -> Path:
    """The first lines of a task file (Step 4 scores every checkpoint: a few suffice here)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / path.name
    out.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:TEST_LINES]))
    return out


def _pipeline(config: Path, *, check: bool = True):
    return run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(config), "--launcher",
                    "torchrun"], timeout=600, check=check)


def _stamps(out: Path) -> dict[str, int]:
    """Every file a finished run holds, with its modification time (ns): what must not change when a language is
    added. The pipeline's own specs, logs, results and analysis are rewritten; the controls' scores are re-read."""
    kept = [out / "step1", out / "step1b", out / "step2", out / "step3", out / "step4", out / "data"]
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for root in kept for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("given")
    model = tiny_bert(root / "bert", head=False)
    tasks = root / "tasks"
    stage = {"ds_config": "ds_configs/cpu_fp32.json", "log_every": 2}
    cfg = {
        "out": str(root / "out"), "ranks": 1, "seq_len": 64, "vocab_size": 500, "keep_layers": 1, "new_layers": 1,
        "seed": 1, "systems": ["bl_base", "minipost"],
        "source": {"lang": "en", "corpus": str(DEMO / "corpus/en.txt"), "model": str(model)},
        "targets": [{"lang": "de", "corpus": str(DEMO / "corpus/de.txt")}],
        "head": {**stage, "steps": 4, "save_every": 4}, "step1b": {**stage, "steps": 4, "save_every": 4},
        "step2": {**stage, "steps": 4, "save_every": 2, "init": "overlap"},
        "step3": {"ds_config": "ds_configs/cpu_finetune.json", "epochs": 0.05, "seeds": [1], "max_len": 64},
        "tasks": [{"name": "lohelp", "format": "generic", "train": str(DEMO / "tasks/lohelp/train.en.jsonl"),
                   "test": {lang: str(_head(DEMO / f"tasks/lohelp/test.{lang}.jsonl", tasks))
                            for lang in ("en", "de")}}],
    }
    path = root / "pipeline.json"
    path.write_text(json.dumps(cfg))
    proc = _pipeline(path)
    return {"root": root, "config": cfg, "path": path, "out": Path(cfg["out"]), "model": model, "stdout": proc.stdout}


def test_a_given_bare_encoder_is_bl_base_primary_with_its_head_trained_and_named_in_every_record(first_run):
    out, model = first_run["out"], first_run["model"]
    given = json.loads((out / "step1" / "source_model.json").read_text())
    assert given["path"] == str(model.resolve()) and given["kind"] == "hf-import" and given["mlm_head"] == "initialised"
    results = json.loads((out / "results.json").read_text())
    assert results["source_model"] == given
    # Step 1 pretrained nothing: its one run trained the MLM head over the given body
    assert sorted(p.name for p in (out / "step1").iterdir()) == ["base", "source_model.json"]
    head_run = json.loads((out / "step1/base/run.json").read_text())
    assert head_run["spec"]["stage"] == "head" and head_run["spec"]["from_"] == str(model.resolve())
    # every model trained from it carries its weights hash (the lineage): Step 1b, Step 2, Step 3
    metas = [*out.glob("step1b/minipost/checkpoints/*/meta.json"), *out.glob("step2/de/*/checkpoints/*/meta.json"),
             *out.glob("step3/lohelp/base/seed1/checkpoints/*/meta.json")]
    assert len(metas) >= 5 and all(json.loads(m.read_text())["primary_sha256"] == given["weights_sha256"]
                                   for m in metas)
    assert json.loads((out / "step3/lohelp/base/seed1/run.json").read_text())["source"] == given["weights_sha256"]
    # the source data were read with the model's own tokenizer; the German one case-folds, as the model does
    assert (out / "data/en/hf_tokenizer").is_dir()
    assert "[pipeline] de: its tokenizer case-folds text, as source.model's does" in first_run["stdout"]
    table2 = (out / "analysis/table2.txt").read_text()
    assert table2.startswith(f"Step 1 of BL_BASE's primary: given, not trained here (no FLOPs charged): "
                             f"{model.resolve()}, weights {given['weights_sha256'][:12]} (its MLM head trained here")


def test_a_language_added_to_a_finished_run_runs_only_its_own_steps(first_run):
    root, out = first_run["root"], first_run["out"]
    before = _stamps(out)
    cfg = json.loads(json.dumps(first_run["config"]))
    # another target language: the demo's German text and test file under another name (the mechanism is the same)
    shutil.copy(DEMO / "corpus/de.txt", root / "xx.txt")
    cfg["targets"].append({"lang": "xx", "corpus": str(root / "xx.txt")})
    test_xx = root / "tasks/test.xx.jsonl"
    test_xx.write_text((root / "tasks/test.de.jsonl").read_text().replace('"lang": "de"', '"lang": "xx"'))
    cfg["tasks"][0]["test"]["xx"] = str(test_xx)
    path = root / "pipeline-xx.json"
    path.write_text(json.dumps(cfg))
    listed = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"]).stdout
    status = {line.split()[0]: line.rsplit("[", 1)[1].rstrip("]") for line in listed.splitlines() if "[" in line}
    assert status == {"prepare": "to run", "step1-base": "done", "step1b-minipost": "done",
                      "step2-bl_base": "done: de; to run: xx", "step2-minipost": "done: de; to run: xx",
                      "step3-base": "done", "step4": "to run"}  # what the user will see run: xx's steps only
    proc = _pipeline(path)
    after = _stamps(out)
    changed = sorted(name for name, stamp in before.items() if after.get(name) != stamp)
    assert changed == [], f"finished work rewritten: {changed[:10]}"
    new = {name.split("/")[0] + "/" + name.split("/")[1] for name in set(after) - set(before)}
    assert new == {"data/xx", "step2/xx", "step4/lohelp"}
    assert sorted(p.name for p in (out / "step4/lohelp/xx").iterdir()) == ["bl_base", "minipost"]
    jobs = [line for line in proc.stdout.splitlines() if line.startswith("$ ") and " job " in line]
    assert len(jobs) == 2 and all("step2-xx-" in line for line in jobs)  # its two Step-2 runs, nothing else
    results = json.loads((out / "results.json").read_text())
    assert {r["lang"] for r in results["zero_shot"]} == {"de", "xx"}
    assert len([r for r in results["zero_shot"] if r["lang"] == "xx"]) == 2 * 3  # 2 systems x updates 0, 2, 4
    header = next(line for line in (out / "analysis/table2.txt").read_text().splitlines() if line.startswith("system"))
    assert header.split()[-3:] == ["de", "xx", "avg"]
    listed = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"]).stdout
    assert all(line.endswith(("[done]", "[done: de, xx]")) for line in listed.splitlines() if "[" in line)

    # A German dev file added: Step 4 alone is to run, and the rerun trains nothing and re-scores nothing it had; it
    # scores each Step-2 checkpoint on dev and says which one dev chooses per system (pipeline.dev_choice).
    cfg["tasks"][0]["dev"] = {"de": str(_head(DEMO / "tasks/lohelp/dev.de.jsonl", root / "tasks"))}
    path.write_text(json.dumps(cfg))
    listed = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"]).stdout
    assert [line.split()[0] for line in listed.splitlines() if "[to run]" in line] == ["step4"], listed
    before = _stamps(out)
    proc = _pipeline(path)
    after = _stamps(out)
    assert [name for name, stamp in before.items() if after.get(name) != stamp] == []
    assert {"/".join(name.split("/")[:4]) for name in set(after) - set(before)} == {"step4/lohelp/de/dev"}
    assert not [line for line in proc.stdout.splitlines() if line.startswith("$ ")]  # no launch
    chosen = {c["system"]: c for c in json.loads((out / "results.json").read_text())["chosen_on_dev"]}
    assert list(chosen) == ["bl_base", "minipost"] and {c["lang"] for c in chosen.values()} == {"de"}
    assert all(f"[step4] lohelp de dev {system}: update {c['step2_update']} chosen of 4 (macro_f1 " in proc.stdout
               for system, c in chosen.items())

    # A setting that would invalidate finished work is still refused, naming it, and nothing is written (another
    # source model is refused the same way: tests/unit/test_source_model.py)
    cfg["step2"]["steps"] = 6
    path.write_text(json.dumps(cfg))
    stamps = _stamps(out)
    refused = _pipeline(path, check=False)
    assert refused.returncode == 2 and "steps 4 there, 6 now" in refused.stderr
    assert _stamps(out) == stamps


def test_the_head_section_can_continue_the_whole_given_model_with_mlm(first_run):
    """``head.train_body``: for a model whose upper layers never served an MLM head (a sentence-embedding encoder,
    RESULTS.md's MiniLM runs), the head job trains body and head together; the result is a primary of its own (its
    weights the lineage every descendant carries), and a finished run is not reused for the other setting."""
    from ds_minimodel.data.streams import TokenShards
    from ds_minimodel.model import hf
    from ds_minimodel.model.loading import load_mlm
    from ds_minimodel.pipeline.ownership import own_output
    from ds_minimodel.stages.pretrain import minipost_model
    from ds_minimodel.stages.specs import MiniPostSpec
    from ds_minimodel.train import checkpoint

    root = first_run["root"]
    cfg = json.loads(json.dumps(first_run["config"]))
    cfg["out"] = str(root / "continued")
    cfg["head"]["train_body"] = True
    path = root / "continued.json"
    path.write_text(json.dumps(cfg))
    out = Path(cfg["out"])
    own_output(out, str(path))
    (out / "data").symlink_to(first_run["out"] / "data")  # the first run's prepared data: the same settings
    run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--only", "step1-base",
             "--launcher", "torchrun"], timeout=600)
    latest = checkpoint.latest_checkpoint(out / "step1/base")
    meta = json.loads((latest / "meta.json").read_text())
    assert meta["mlm_head"] == "trained" and meta["continued_from"] == str(first_run["model"].resolve())
    assert "primary_sha256" not in meta and "kind" not in meta  # a Step-1 model of its own
    continued, record = load_mlm(latest)
    imported, given = hf.import_folder(first_run["model"])
    assert meta["continued_from_sha256"] == given.weights_sha256 != record.lineage == record.weights_sha256
    assert not torch_equal(continued.layers[0].attention.qkv.weight, imported.layers[0].attention.qkv.weight)
    # MiniPost (Step 1b) cut from it carries its lineage
    shards = TokenShards.open(out / "data/en")
    _, provenance = minipost_model(MiniPostSpec(from_=latest, data=out / "data/en", ds_config=Path("x.json"),
                                                out=root / "unused", keep_layers=1, new_layers=1), shards)
    assert provenance["primary_sha256"] == record.weights_sha256
    cfg["head"]["train_body"] = False
    path.write_text(json.dumps(cfg))
    refused = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--only",
                       "step1-base", "--launcher", "torchrun"], check=False)
    assert refused.returncode == 2 and "train_body True there, False now" in refused.stderr


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)

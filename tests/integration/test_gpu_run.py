"""The GPU machine's command cannot rot: ``ds-minimodel gpu-run --tiny`` runs every part on a CPU at a size of seconds
(the same code as on a GPU, other sizes), skips only what needs CUDA (each skip with its reason), and writes the
figures, the summary and the archives it brings back. The reference part runs one of the four systems (BL_BASE;
the pipeline code is the same for every system, and the demo pipeline test runs all four)."""
from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
import zipfile

import pytest

from ds_minimodel.data.tokenizer import load_tokenizer
from ds_minimodel.model.loading import load
from ds_minimodel.train import checkpoint
from tests.integration.conftest import REPO, run_cmd

pytestmark = pytest.mark.slow


def test_the_gpu_command_runs_every_part_on_a_cpu_and_reports_each_figure(tmp_path):
    out = tmp_path / "out"
    run_cmd([sys.executable, "-m", "ds_minimodel", "gpu-run", "--tiny", "--out", str(out), "--work",
             str(tmp_path / "work"), "--systems", "bl_base", "--parts", "env,tests,bench,profile,reference", "--body"],
            timeout=900)
    figures = json.loads((out / "gpu_run.json").read_text())
    parts = figures["parts"]
    assert set(parts) == {"env", "tests", "bench", "profile", "reference"} and figures["cuda"] is False
    assert {name: part["status"] for name, part in parts.items()} == {
        "env": "ok", "tests": "ok", "bench": "ok", "profile": "ok", "reference": "ok"}
    env = parts["env"]
    assert env["imports"]["ok"] and env["gemm"]["tflops"] > 0 and env["deepspeed"][0].isdigit()
    # pytest -m gpu: every GPU test collected and skipped here, with the reason.
    tests = parts["tests"]
    assert tests["counts"]["skipped"] == len(tests["cases"]) >= 3
    assert all("CUDA" in case["detail"] for case in tests["cases"])
    assert any("test_fp16" in case["test"] for case in tests["cases"])
    bench = parts["bench"]
    assert bench["micro_batch"] == 4 and bench["max_batch"]["stopped_by"] == "--max 4"
    rows = {(r["label"], r["stage"]): r for r in bench["rows"]}
    for stage in ("step1", "step1-dual", "step2-bl_base", "step2-minijoint"):
        row = rows["bf16", stage]
        assert row["status"] == "ok" and row["median_s"] > 0 and row["tokens_per_s"] > 0 and row["mfu"] > 0
    assert rows["fp16", "step1"]["status"] == "skipped" and "CUDA" in rows["fp16", "step1"]["reason"]
    assert rows["bf16 --compile", "step1"]["status"] == "skipped"
    assert set(bench["ratios"]) == {"step2_body_over_mini", "dual_head_over_plain"}
    assert bench["hf"]["status"] == "ok" and bench["hf"]["speedup"] > 0
    assert bench["sizing"]["status"] == "skipped"  # the tiny run plans from its caps
    # The profile: Step 1 at the bench's micro-batch, its time by kernel class; the classes and idle add up to the
    # profiled updates' wall clock (here aten operators' self time on a CPU).
    profiled, unchecked, views, compiled = parts["profile"]["rows"]
    assert profiled["status"] == "ok" and profiled["micro_batch"] == 4 and compiled["status"] == "skipped"
    for lever in (unchecked, views):  # --tiny: one row
        assert lever["status"] == "skipped" and "one setting changed" in lever["reason"]
    classes = profiled["profile"]
    assert classes["seconds"]["matmul"] > 0 and classes["seconds"]["attention"] > 0
    assert sum(classes["seconds"].values()) == pytest.approx(max(classes["wall_s"], classes["busy_s"]))
    assert any(name.startswith("aten::") for name in classes["top"]["matmul"])
    # The reference run: planned (here from the --tiny caps), run through the pipeline, packed.
    ref = parts["reference"]
    assert ref["pipeline"]["status"] == "ok" and ref["plan"]["steps"] == {"step1": 1, "step1b": 1, "step2": 2}
    # Its jobs share one launch; the share of the pipeline's wall clock they spent in updates is recorded.
    assert 0 < ref["pipeline"]["update_share"] < 1 and "step1-base" in ref["pipeline"]["job_updates_s"]
    with tarfile.open(out / "reference_gpu.tar.gz") as tar:
        names = tar.getnames()
        results = json.load(tar.extractfile("reference_gpu/results.json"))
    assert {"reference_gpu/config.json", "reference_gpu/analysis/table2.txt"} <= set(names)
    assert {r["system"] for r in results["zero_shot"]} == {"bl_base"}
    # Each dev and test file cut to 400 lines spread through it (the files are grouped by label): every label is in
    # them, so the majority class reads above 0 everywhere, and so does a Step-4 reading.
    assert all(b["majority"] > 0 for b in results["baselines"])
    assert max(r["accuracy"] for r in results["zero_shot"]) > 0
    assert "table2" in ref["results"]["tables"]
    # The body comes back in parts that make a model folder any stage can load.
    body = ref["body"]
    assert body["status"] == "ok" and body["packed"] and body["step"] == 2
    pieces = sorted(out.glob("body.tar.part-*"))
    assert len(pieces) == body["parts"] and all(p.stat().st_size <= 15 * 2**20 for p in pieces)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in pieces))) as tar:
        tar.extractall(tmp_path / "back", filter="data")
    folder = tmp_path / "back/body/model"
    assert checkpoint.verify(folder) is None
    model, meta = load(folder)
    assert meta.weights_sha256 == body["weights_sha256"] and model.cfg.hidden_size == 64
    # Its tokenizer travels inside it, found there by hash once the GPU machine's path is gone.
    moved = {**meta.tokenizer_dict, "path": "/gone/en/spm.model"}
    assert load_tokenizer(moved, folder).path == folder / "spm.model"
    # At most 8 files come back from the GPU machine; the summary names every part.
    assert len(list(out.iterdir())) <= 8
    summary = (out / "gpu_run.md").read_text()
    assert all(f"| {name} | ok |" in summary for name in parts) and "## Benchmarks" in summary
    assert "## Profile" in summary and "| matmul |" in summary


def _prepare_script():
    spec = importlib.util.spec_from_file_location("gpu_prepare", REPO / "scripts/gpu_prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_preparation_reads_the_requirements_that_apply_on_the_gpu_machine(tmp_path):
    prepare = _prepare_script()
    # The package's own: every name setup.cfg installs (a fifth lease failed at import when a hand-kept list had
    # missed tyro), by name only, so that the image's own versions of what it has stay.
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    installed = [line.split(">")[0].split("=")[0].split("<")[0].strip()
                 for line in cfg["options"]["install_requires"].splitlines() if line.strip()]
    own = prepare.own_requirements()
    assert set(installed) <= set(own) and {"tyro", "psutil", "transformers", "pytest"} <= set(own)
    assert all(name.replace("-", "_").isidentifier() for name in own)  # names, no version bounds
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo-1.0.dist-info/METADATA", "\n".join([
            "Metadata-Version: 2.1", "Name: demo", "Version: 1.0", "Requires-Dist: pydantic>=2.0.0",
            "Requires-Dist: torch>=2.0.0", "Requires-Dist: sphinx; extra == \"docs\"",
            "Requires-Dist: pywin32; sys_platform == \"win32\"", "Requires-Dist: tomli; python_version < \"3.11\"",
            "Requires-Dist: hjson", ""]))
    assert [str(r) for r in prepare.requirements_of(wheel)] == ["pydantic>=2.0.0", "torch>=2.0.0", "hjson"]
    assert "torch" in prepare.DEVICE_PACKAGES and "pydantic" not in prepare.DEVICE_PACKAGES
    assert "torch" in prepare.NEVER_CARRY
    total, sizes = prepare.travelling_bytes()
    assert total == sum(size for size, _ in sizes) and any(name == "README.md" for _, name in sizes)
    assert not any(name.startswith((".venv/", "runs/")) for _, name in sizes)


def test_a_folder_it_did_not_make_is_refused_before_any_work(tmp_path):
    foreign = tmp_path / "results"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "gpu-run", "--tiny", "--out", str(foreign)], check=False)
    assert proc.returncode == 2 and f"{foreign}: not empty and not a gpu-run folder" in proc.stderr
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"] and not (tmp_path / "results-work").exists()
    # An earlier gpu-run's results (a body took GPU minutes to train) are replaced only when asked.
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in ("gpu_run.json", "body.tar.part-00", "gpu_run.log"):
        (earlier / name).write_text("{}")
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "gpu-run", "--tiny", "--out", str(earlier), "--parts", "env"],
                   check=False)
    assert proc.returncode == 2 and "holds an earlier gpu-run's results (gpu_run.json, body.tar.part-00)" in proc.stderr
    assert sorted(p.name for p in earlier.iterdir()) == ["body.tar.part-00", "gpu_run.json", "gpu_run.log"]
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "gpu-run", "--tiny", "--out", str(tmp_path / "o"),
                    "--systems", "bl_base,bl_huge"], check=False)
    assert proc.returncode == 2 and "--systems: bl_huge not among configs/reference_gpu.json's" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_the_reference_part_plans_from_an_earlier_runs_jobs_and_builds_batches_in_a_process(tmp_path):
    from ds_minimodel.tools.gpu_common import device_name

    # The seventh lease's figures as if measured on this machine: the plan comes from them (here clamped by the
    # --tiny caps), no bench process is timed, and this run's record of its jobs is one a later plan can read.
    figures = json.loads((REPO / "benchmarks/gpu_h200_lease7.json").read_text())
    figures["parts"]["env"]["device"] = device_name(False)
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(figures))
    out = tmp_path / "out"
    run_cmd([sys.executable, "-m", "ds_minimodel", "gpu-run", "--tiny", "--out", str(out), "--work",
             str(tmp_path / "work"), "--systems", "bl_base", "--parts", "reference", "--plan-from", str(earlier),
             "--prefetch-in", "process"], timeout=600)
    ref = json.loads((out / "gpu_run.json").read_text())["parts"]["reference"]
    assert ref["status"] == "ok" and ref["sizing"]["from"] == str(earlier) and ref["device"] == device_name(False)
    assert ref["plan"]["steps"] == {"step1": 1, "step1b": 1, "step2": 2} and ref["plan"]["jobs"] == 3
    # Step 3 planned at each primary's own rate, its lease-7 count read from that lease's plan and this run's
    # updates per epoch (the seventh lease recorded its jobs' seconds only).
    assert set(ref["sizing"]["reference step3"]["median_s"]) == {"step3-base", "step3-minijoint", "step3-small"}
    # The recipe the CPU runs chose (init auto: FOCUS, anchored by the help lexicon): --tiny's cut German has no
    # carried vectors, and gensim here trains them.
    assert ref["step2_init"] == {"de": "focus + word anchors"}
    assert "### sizing" not in (out / "gpu_run.log").read_text()
    assert ref["sized_by"] == "stored" and "sizing_here" not in ref
    assert f"Seconds per update from the jobs of {earlier}.\n" in (out / "gpu_run.md").read_text()
    jobs = ref["pipeline"]["job_updates"]
    assert jobs["step1-base"]["updates"] == 1 and jobs["step2-de-bl_base"]["updates"] == 2
    assert all(job["seconds"] > 0 for job in jobs.values())
    # Each job's whole seconds hold its updates and its checkpoints (Step 2 saves its start, then every fifth), and
    # the pipeline's seconds hold the jobs'.
    assert all(job["job_seconds"] > job["seconds"] + job["save_seconds"] for job in jobs.values())
    assert jobs["step2-de-bl_base"]["save_seconds"] > 0 and ref["pipeline"]["save_seconds"] > 0
    assert 0 < ref["pipeline"]["outside_jobs_s"] < ref["pipeline"]["seconds"]
    # --prefetch-in process: the MLM stages' jobs built their batches in a process of their own (2 ahead, on a CPU
    # too)
    runs = tmp_path / "work/reference_gpu"
    for stage in ("step1/base", "step2/de/bl_base"):
        assert json.loads((runs / stage / "run.json").read_text())["train"]["prefetch_process"] is True

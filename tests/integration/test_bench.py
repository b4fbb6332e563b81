"""Smoke runs of the benchmark command on a tiny configuration: it runs and reports every figure. No timing is
asserted (the figures are for BENCHMARKS.md, measured on a quiet machine)."""
from __future__ import annotations

import json
import sys

import pytest

from tests.integration.conftest import DEMO, run_cmd

pytestmark = pytest.mark.slow


def test_stages_report_time_throughput_flops_utilisation_and_memory(tmp_path):
    out = tmp_path / "stages.json"
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "stages", "--preset", "tiny", "--vocab", "300",
                    "--seq-len", "16", "--micro-batch", "2", "--warmup", "0", "--updates", "2",
                    "--stages", "step1,step1-dual,step2-bl_base,step2-minijoint", "--json", str(out)])
    result = json.loads(out.read_text())
    assert [r["stage"] for r in result["rows"]] == ["step1", "step1-dual", "step2-bl_base", "step2-minijoint"]
    for row in result["rows"]:
        assert row["median_s"] > 0 and row["tokens_per_s"] > 0 and row["analytic_flops"] > 0
        assert 0 < row["mfu"] and row["peak_memory_mb"] > 0
    rows = {r["stage"]: r for r in result["rows"]}
    assert rows["step2-minijoint"]["layers"] == 4 and rows["step2-bl_base"]["trainable_parameters"] == 300 * 64 + 300
    assert set(result["ratios"]) == {"step2_body_over_mini", "dual_head_over_plain"}
    assert result["peak_source"].startswith("measured fp32 GEMM") and "| step1-dual |" in proc.stdout


def test_hf_comparison_and_preprocessing(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "hf.json"
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "hf", "--preset", "tiny", "--vocab", "300",
                    "--seq-len", "16", "--micro-batch", "2", "--warmup", "0", "--updates", "2", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["ours"]["parameters"] > 0 and result["speedup"] > 0 and "as fast" in proc.stdout
    corpus = tmp_path / "small.txt"
    corpus.write_text("".join((DEMO / "corpus/en.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:3000]))
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "prepare", "--corpus", str(corpus), "--vocab", "300",
                    "--repeats", "1", "--json", str(tmp_path / "prepare.json")])
    runs = json.loads((tmp_path / "prepare.json").read_text())["runs"]
    assert runs[0]["workers"] == 1 and all(r["mb_per_s"] > 0 for r in runs)


def test_loader_reports_the_wait_for_data_with_and_without_prefetching(tmp_path, en_data):
    out = tmp_path / "loader.json"
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "loader", "--data", str(en_data), "--seq-len", "64",
                    "--micro-batch", "4", "--warmup", "1", "--updates", "5", "--compute-ms", "2", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["compute_ms"] == 2 and [r["prefetch"] for r in result["runs"]] == [0, 2]
    for run in result["runs"]:
        assert 0 < run["mean_wait_ms"] <= run["max_wait_ms"] and 0 < run["stall_share"] < 1
    assert result["runs"][0]["tokens_per_s_when_built_on_demand"] > 0 and "prefetch 2: waits" in proc.stdout

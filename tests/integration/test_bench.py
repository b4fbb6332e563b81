"""Smoke runs of the benchmark command on a tiny configuration: it runs and reports every figure. No timing is
asserted (the figures are for BENCHMARKS.md, measured on a quiet machine). The stage timings, the micro-batch search
and the Hugging Face comparison run in ``test_gpu_run.py``, as parts of the GPU command at its tiny size."""
from __future__ import annotations

import json
import sys

import pytest

from tests.integration.conftest import DEMO, run_cmd

pytestmark = pytest.mark.slow


def test_preprocessing_throughput(tmp_path):
    corpus = tmp_path / "small.txt"
    corpus.write_text("".join((DEMO / "corpus/en.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:3000]))
    run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "prepare", "--corpus", str(corpus), "--vocab", "300",
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

"""scripts/experiments/masked_rows_memory.py (BENCHMARKS.md, "Memory: the masked rows"): its run prints one line per
reported update, with the masked counts met and the process's memory; tiny here, its figures are the benchmark's."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/experiments/masked_rows_memory.py"
spec = importlib.util.spec_from_file_location("masked_rows_memory", SCRIPT)
masked_rows_memory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(masked_rows_memory)


def test_a_run_reports_the_counts_met_and_the_memory(capsys):
    assert masked_rows_memory.main(["--multiple", "64", "--updates", "3", "--every", "2", "--batch", "2",
                                    "--seq-len", "16", "--dtype", "float32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [int(re.search(r"update +(\d+)", line).group(1)) for line in lines] == [1, 2]
    for line in lines:
        assert re.fullmatch(r"multiple 64  update +\d+  masked counts so far +\d+  RSS +[\d,]+ MB", line), line

"""``--cpu-report``: a test's CPU, its child processes' included, one line per test, and the run's summary."""
from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]


def test_each_test_gets_its_own_cpu_and_that_of_the_processes_it_waited_for(pytester, tmp_path):
    pytester.makepyfile(test_work="""
        import subprocess, sys, time

        def test_child():
            busy = "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass"
            subprocess.run([sys.executable, "-c", busy], check=True)

        def test_quiet():
            time.sleep(0.2)
        """)
    report = tmp_path / "cpu.jsonl"
    report.write_text('{"left": "from an earlier run"}\n')
    result = pytester.runpytest_inprocess("-p", "tests.cpu_report", f"--cpu-report={report}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    records = {r["test"].split("::")[-1]: r for r in map(json.loads, report.read_text().splitlines())}
    assert set(records) == {"test_child", "test_quiet"}  # the earlier run's line is gone
    assert records["test_child"]["children_cpu_s"] >= 0.3
    assert records["test_quiet"]["children_cpu_s"] == 0 and records["test_quiet"]["wall_s"] >= 0.2
    assert records["test_quiet"]["cpu_s"] < 0.2  # sleeping is not CPU
    result.stdout.fnmatch_lines(["*CPU by test*", "2 tests: * s of CPU*", "*test_work.py::test_child"])


def test_the_file_given_apart_from_the_option_is_refused_in_one_line(pytester, tmp_path):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    report = tmp_path / "cpu.jsonl"
    result = pytester.runpytest_inprocess("-p", "tests.cpu_report", "--cpu-report", str(report),
                                          "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and not report.exists()
    result.stderr.fnmatch_lines([f"*--cpu-report {report}: write --cpu-report={report} *"])

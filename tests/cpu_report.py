"""``--cpu-report=FILE``: where the suite's CPU goes, test by test.

One JSON line per test: the CPU seconds of the process that ran it (setup, call and teardown, so a session fixture
counts in the first test that uses it) and of the child processes it waited for (every launcher and rank a test
starts and ends), with the test's wall clock. Under pytest-xdist each worker appends its own lines; the run's end
prints the totals and the tests that took the most. Processes a test did not wait for (daemons such as the Slurm
test's slurmd and the jobs they run) are not counted.

    bash scripts/test.sh --cpu-report=runs/cpu.jsonl
    python -m pytest -p tests.cpu_report --cpu-report=runs/cpu.jsonl tests/unit     # without scripts/test.sh

With ``=``: pytest chooses its rootdir and ini file before it loads this plugin, reading a separate FILE that exists
as a test path (a second run with ``--cpu-report /tmp/cpu.jsonl`` gave the xdist workers /tmp as their rootdir and
no setup.cfg), so the other form is refused.
"""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", metavar="FILE", type=Path,
                     help="write one JSON line per test to FILE (emptied first): CPU seconds of its process and of "
                          "the child processes it waited for, and wall seconds; the run's end prints the largest")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("cpu_report")
    if path is not None and "--cpu-report" in config.invocation_params.args:
        raise pytest.UsageError(f"--cpu-report {path}: write --cpu-report={path} (pytest would read a separate "
                                "file name as a test path when it chooses its rootdir and ini file)")
    if path is not None and not hasattr(config, "workerinput"):  # the controller (or the only process) starts it
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    path = item.config.getoption("cpu_report")
    if path is None:
        yield
        return
    own, children, start = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    yield
    record = {"test": item.nodeid, "cpu_s": round(_cpu(resource.RUSAGE_SELF) - own, 3),
              "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - children, 3),
              "wall_s": round(time.monotonic() - start, 3), "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
    with path.open("a") as f:  # one short write in append mode: lines from two workers do not interleave
        f.write(json.dumps(record) + "\n")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    path = config.getoption("cpu_report")
    if path is None or hasattr(config, "workerinput") or not path.is_file():
        return
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def total(r: dict) -> float:
        return r["cpu_s"] + r["children_cpu_s"]

    terminalreporter.section("CPU by test")
    children, wall = sum(r["children_cpu_s"] for r in records), sum(r["wall_s"] for r in records)
    terminalreporter.write_line(f"{len(records)} tests: {sum(map(total, records)):.0f} s of CPU ({children:.0f} s in "
                                f"child processes), {wall:.0f} s of wall clock summed; {path}")
    for r in sorted(records, key=total, reverse=True)[:15]:
        terminalreporter.write_line(f"{total(r):8.1f} s CPU {r['wall_s']:8.1f} s wall  {r['test']}")

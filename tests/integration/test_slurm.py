"""The Slurm path on a real Slurm: Debian's slurmctld and slurmd started on this machine, the batch scripts that
``python -m ds_minimodel submit`` writes submitted with sbatch, ranks started by srun.

One pipeline (BL_BASE, English -> German, one finetuning seed) runs as its chain of jobs. Step 1's job has a one-minute
time limit and asks for SIGUSR1 50 s before it. The signal arrives mid-training (from slurmctld's timer, or from the
test if the job would finish before that coarse timer fires), every rank saves and exits, the job requeues itself,
and the rerun resumes from that checkpoint. Step 4 runs last and writes the results.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import DEMO, REPO, run_cmd, seeded_pipeline_folder
from tests.integration.hosts import Slurm, why_no_slurm

# Timing-bound (peers lost within a timeout, Slurm's timers): in one xdist worker, one after another.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

STEP1_UPDATES = 60


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = why_no_slurm()
    if reason:
        pytest.skip(reason)
    cluster = Slurm(tmp_path_factory.mktemp("slurm")).start()
    yield cluster
    cluster.stop()


def small_task(folder: Path, source: Path, lines: int) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / source.name
    every = source.read_text(encoding="utf-8").splitlines(keepends=True)
    # Evenly spaced, not the first lines: the task files are grouped by label, and a training file needs two.
    path.write_text("".join(every[::max(1, len(every) // lines)][:lines]), encoding="utf-8")
    return str(path)


def job_fields(slurm: Slurm, job_id: str) -> list[dict[str, str]]:
    """``scontrol show job -o``: one dict per job (per array task)."""
    text = slurm.command("scontrol", "show", "job", "-o", job_id).stdout
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in text.splitlines() if line.strip()]


def test_submitted_chain_runs_in_order_and_a_signalled_job_requeues_and_resumes(slurm, en_data, de_data, tmp_path):
    out = tmp_path / "runs" / "chain"
    # The session's prepared data, so the prepare job finds it done (same corpora, same tokenizer arguments).
    seeded_pipeline_folder(out, {"en": en_data, "de": de_data})
    tasks = DEMO / "tasks" / "lohelp"
    config = tmp_path / "chain.json"
    config.write_text(json.dumps({
        "out": str(out), "ranks": 2, "preset": "tiny", "seq_len": 64, "vocab_size": 2000, "systems": ["bl_base"],
        "source": {"lang": "en", "corpus": str(DEMO / "corpus/en.txt")},
        "targets": [{"lang": "de", "corpus": str(DEMO / "corpus/de.txt")}],
        "step1": {"ds_config": "ds_configs/cpu_fp32.json", "steps": STEP1_UPDATES, "save_every": 10, "log_every": 5},
        "step2": {"ds_config": "ds_configs/cpu_fp32.json", "steps": 6, "save_every": 6, "log_every": 1},
        "step3": {"ds_config": "ds_configs/cpu_finetune.json", "epochs": 1, "seeds": [1], "max_len": 64},
        "tasks": [{"name": "lohelp", "format": "generic",
                   "train": small_task(tmp_path / "task", tasks / "train.en.jsonl", 256),
                   "test": {"de": small_task(tmp_path / "task", tasks / "test.de.jsonl", 200)}}],
        "slurm": {"time": "10", "signal_seconds": 60, "jobs": {"step1": {"time": "1", "signal_seconds": 50}}},
    }))
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "submit", "--config", str(config)],
                   env={"SLURM_CONF": str(slurm.conf)})
    ids = dict(re.findall(r"^(\S+): job (\d+)", proc.stdout, flags=re.M))
    assert list(ids) == ["prepare", "step1-base", "step2-bl_base", "step3-base", "step4"], proc.stdout
    assert f"step4: job {ids['step4']} (after {ids['step2-bl_base']}, {ids['step3-base']})" in proc.stdout

    # Step 1 gets SIGUSR1 before its one-minute limit and requeues itself. slurmctld sends that signal from a
    # timer with a 30-s period (it came 18-27 s into such a job here), so a job on a quick machine can finish before
    # it fires. If it has not come by update 20, the test sends what slurmctld sends at that moment, SIGUSR1 to the
    # job's steps (scancel --signal=USR1); either way the job's handling is the same. The rerun gets a longer limit
    # so that the test needs one requeue, not three.
    start, seen, extended, signalled_by_test = time.monotonic(), None, False, False
    step1_log = out / "slurm" / "logs" / f"chain-step1-base-{ids['step1-base']}.out"
    while time.monotonic() < start + 400:
        states = {name: job_fields(slurm, job_id) for name, job_id in ids.items()}
        now = {name: [(j.get("JobState"), j.get("Reason"), j.get("Restarts")) for j in jobs]
               for name, jobs in states.items()}
        if now != seen:  # the chain's timeline (pytest -s; shown with a failure): state, reason, restarts per job
            print(f"{time.monotonic() - start:6.1f} s {now}", flush=True)
            seen = now
        step1 = states["step1-base"][0]
        text = step1_log.read_text(errors="replace") if step1_log.exists() else ""
        if (not signalled_by_test and int(step1.get("Restarts", 0)) == 0 and "update 20 loss" in text
                and "SIGUSR1" not in text):
            slurm.command("scancel", "--signal=USR1", ids["step1-base"])
            signalled_by_test = True
        if not extended and int(step1.get("Restarts", 0)) >= 1:
            slurm.command("scontrol", "update", f"JobId={ids['step1-base']}", "TimeLimit=10")
            extended = True
        finished = [all(j.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for j in jobs)
                    for jobs in states.values()]
        if all(finished):
            break
        time.sleep(2)
    logs = {p.name: p.read_text(errors="replace") for p in (out / "slurm" / "logs").glob("*.out")}
    everything = "\n".join(f"=== {name}\n{text[-3000:]}" for name, text in logs.items())
    assert all(j.get("JobState") == "COMPLETED" for jobs in states.values() for j in jobs), (
        {n: [j.get("JobState") for j in jobs] for n, jobs in states.items()}, everything)

    print(f"step 1's SIGUSR1 came from {'the test (scancel)' if signalled_by_test else 'slurmctld (--signal)'}")
    step1_text = logs[step1_log.name]
    assert extended and "requeueing job" in step1_text, step1_text[-3000:]
    assert "SIGUSR1: saved" in step1_text and "restart 1" in step1_text
    resumed_at = int(re.search(r"resumed from \S+ at update (\d+)", step1_text).group(1))
    assert 0 < resumed_at < STEP1_UPDATES
    metrics = [json.loads(line) for line in (out / "step1" / "base" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(5, STEP1_UPDATES + 1, 5))

    # The dependency chain: no job started before the jobs it needs had ended.
    def times(name: str) -> tuple[str, str]:
        jobs = states[name]
        return min(j["StartTime"] for j in jobs), max(j["EndTime"] for j in jobs)
    for name, after in (("step1-base", "prepare"), ("step2-bl_base", "step1-base"), ("step3-base", "step1-base"),
                        ("step4", "step2-bl_base"), ("step4", "step3-base")):
        assert times(name)[0] >= times(after)[1], (name, times(name), after, times(after))

    results = json.loads((out / "results.json").read_text())
    assert {r["step2_update"] for r in results["zero_shot"]} == {0, 6}  # the initial rows and the end
    assert (out / "tensorboard" / "step1-base").is_dir() and (out / "tensorboard" / "step2-de-bl_base").is_dir()
    assert str(REPO) in (out / "slurm" / "step1-base.sbatch").read_text()

"""Slurm rank discovery, batch-script text and the submit settings (the real sbatch/srun path is in
tests/integration/test_slurm.py)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ds_minimodel.cluster import slurm
from ds_minimodel.pipeline.plan import Pipeline
from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.pipeline.submit import SlurmSettings, batch_jobs
from ds_minimodel.pipeline.submit import main as submit_main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("nodelist, first", [
    ("vm", "vm"), ("gpu[007-010,012],cpu1", "gpu007"), ("node[3,1]", "node3"), ("a[1-2]-b[03-04]", "a1-b03"),
    ("n1,n2", "n1"), ("rack[2-3]n[01-02].cluster", "rack2n01.cluster")])
def test_first_host_of_a_host_list(nodelist, first):
    assert slurm.first_host(nodelist) == first


def test_first_host_refuses_a_broken_list():
    with pytest.raises(ValueError, match="not a Slurm host list"):
        slurm.first_host("gpu[1-2")


def test_rank_env_inside_an_srun_step_only():
    step = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "1234",
            "SLURM_STEP_ID": "2", "SLURM_STEP_NODELIST": "gpu[05-06]"}
    env = slurm.rank_env(step)
    assert env["RANK"] == "3" and env["WORLD_SIZE"] == "8" and env["LOCAL_RANK"] == "1"
    assert env["MASTER_ADDR"] == "gpu05" and 15_000 <= int(env["MASTER_PORT"]) < 55_000
    assert slurm.rank_env({**step, "SLURM_STEP_ID": "3"})["MASTER_PORT"] != env["MASTER_PORT"]
    assert slurm.rank_env({**step, "MASTER_PORT": "29500"})["MASTER_PORT"] == "29500"
    # A batch script's own shell has SLURM_PROCID too, but no step: a plain `python` there is one rank.
    assert slurm.rank_env({"SLURM_PROCID": "0", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "vm"}) == {}


def test_batch_script_requeues_after_a_save_and_stop(tmp_path):
    job = slurm.BatchJob(name="x-step2-minijoint", command=["/venv/bin/python", "-m", "ds_minimodel", "pipeline",
                                                            "--lang", slurm.ARRAY_VALUE, "--out", "a b"],
                         workdir="/work dir", log_dir="/logs", nodes=2, tasks_per_node=8, gpus_per_node=8,
                         time="2-00:00:00", signal_seconds=600, array=["de", "fr"], setup=["module load cuda"],
                         sbatch_args=["--qos=high"])
    text = slurm.batch_script(job)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --signal=USR1@600", "#SBATCH --requeue", "#SBATCH --array=0-1", "#SBATCH --qos=high",
                 "#SBATCH --output=/logs/%x-%A_%a.out", "cd '/work dir'", "module load cuda", "VALUES=(de fr)",
                 f"if [ $rc -eq {slurm.EXIT_REQUEUE} ]; then", '  scontrol requeue "$SLURM_JOB_ID" && exit 0'):
        assert line in text.splitlines(), line
    assert "--lang \"$VALUE\" --out 'a b'" in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # valid shell


def test_sbatch_command_chains_with_afterok():
    assert slurm.sbatch_command("a.sbatch", []) == ["sbatch", "--parsable", "a.sbatch"]
    assert slurm.sbatch_command("a.sbatch", ["12", "13"]) == [
        "sbatch", "--parsable", "--dependency=afterok:12:13", "--kill-on-invalid-dep=yes", "a.sbatch"]


def demo(tmp_path: Path, slurm_section: dict) -> tuple[Pipeline, Path]:
    base = json.loads((REPO / "configs/demo.json").read_text())
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**base, "out": str(tmp_path / "out"), "slurm": slurm_section}))
    return Pipeline(PipelineConfig.load(path), str(path)), path


def test_settings_overrides_per_step_and_per_job(tmp_path):
    settings = SlurmSettings(gpus_per_node=8, time="24:00:00", jobs={
        "step1": {"nodes": 8, "time": "3-00:00:00"}, "step1-small": {"nodes": 1}})
    pipeline, path = demo(tmp_path, {})
    jobs = {job.name: batch for job, batch in
            batch_jobs(pipeline, settings, python="/py", workdir=tmp_path, config=path)}
    assert (jobs["step1-base"].nodes, jobs["step1-base"].time) == (8, "3-00:00:00")
    assert (jobs["step1-small"].nodes, jobs["step1-small"].time) == (1, "3-00:00:00")
    assert (jobs["step2-minijoint"].nodes, jobs["step2-minijoint"].array) == (1, ["de"])
    assert jobs["step1-base"].tasks_per_node == 2 and jobs["prepare"].tasks_per_node == 1
    assert "--launcher" in jobs["step3-base"].command and "--launcher" not in jobs["step4"].command


@pytest.mark.parametrize("section, problem", [
    ({"nodez": 2}, r"slurm: unknown key\(s\) nodez"),
    ({"nodes": 0}, "nodes must be at least 1"),
    ({"jobs": {"step9": {"nodes": 2}}}, "slurm.jobs names no job or step of this pipeline: step9"),
    ({"jobs": {"step1": {"nodes": "eight"}}}, r"slurm.jobs.step1: nodes must be int"),
    ({"jobs": {"step1": {"jobs": {}}}}, "overrides cannot nest 'jobs'"),
])
def test_bad_slurm_settings_name_the_file(tmp_path, capsys, section, problem):
    _, path = demo(tmp_path, section)
    assert submit_main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and re.search(problem, err), err


def test_dry_run_writes_and_prints_every_job(tmp_path, capsys):
    _, path = demo(tmp_path, {"partition": "gpu", "gpus_per_node": 8})
    assert submit_main(["--config", str(path), "--dry-run", "--scripts", str(tmp_path / "scripts")]) == 0
    printed = capsys.readouterr().out
    scripts = sorted(p.name for p in (tmp_path / "scripts").glob("*.sbatch"))
    assert len(scripts) == 13 and "step2-minipost.sbatch" in scripts
    assert "--dependency=afterok:<step1b-minipost>" in printed and printed.count("#SBATCH --partition=gpu") == 13


def test_submit_without_sbatch_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch on it
    _, path = demo(tmp_path, {})
    assert submit_main(["--config", str(path)]) == 1
    assert "sbatch not found" in capsys.readouterr().err

"""The GPU command's planner: step counts from measured seconds per update that fit the time left."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.tools.gpu_common import GPU, REPO, TINY
from ds_minimodel.tools.gpu_reference import JOB_SETUP_S, RESERVE_S, SAVE_S, SHARES, STEP2_SAVES, plan_reference

SECONDS = {"step1": 0.06, "step1-dual": 0.07, "step1b": 0.015, "step2-bl_base": 0.03, "step2-bl_small": 0.012,
           "step2-minijoint": 0.011, "step2-minipost": 0.016}
SIZING = {"reference": {"median_s": SECONDS}, "reference step3": {"median_s": {"step3": 0.04}},
          "body": {"median_s": {"step1": 0.03}}, "startup_s": 20.0}


def config(tmp_path, systems, languages=("de",)):
    train = tmp_path / "train.jsonl"
    train.write_text("x\n" * 3200)  # 100 updates of 32 per epoch
    ds3 = tmp_path / "ds3.json"
    ds3.write_text(json.dumps({"train_batch_size": 32}))
    base = PipelineConfig.load(REPO / "configs/reference_gpu.json")
    return dataclasses.replace(
        base, preset="reference_gpu", vocab_size=8000, seq_len=128, small_layers=4, systems=systems,
        targets=[dataclasses.replace(base.targets[0], lang=lang) for lang in languages], source_relearn=[],
        step3=dataclasses.replace(base.step3, seeds=[1], ds_config=str(ds3)), tasks=[dataclasses.replace(base.tasks[0], train=str(train))])


def fake_run(left, sizes=GPU):
    return SimpleNamespace(left=lambda: left, sizes=sizes)


def test_the_plan_fits_the_time_left_after_the_launch_and_each_jobs_set_up(tmp_path):
    cfg = config(tmp_path, ["bl_base", "bl_small", "minijoint", "minipost"])
    plan = plan_reference(fake_run(600), cfg, SIZING)
    # 3 primaries, Step 1b, 4 Step-2 runs, 3 Step-3 runs: 11 jobs in one launch that starts in 20 s, each job's own
    # set-up, and their checkpoints: one per job, STEP2_SAVES per Step-2 job.
    saves = SAVE_S * (11 + 4 * (STEP2_SAVES - 1))
    assert plan["jobs"] == 11 and plan["launches"] == 1
    assert plan["train_s"] == 0.8 * (600 - RESERVE_S - 20 - 11 * JOB_SETUP_S - saves)
    steps, train_s = plan["steps"], plan["train_s"]
    # Every stage's update costs its own time plus the body's beside it (0.03 s): the GPU is time-sliced.
    body = 0.03
    small = SECONDS["step1"] * plan_small_ratio() + body
    step1 = steps["step1"] * (SECONDS["step1"] + SECONDS["step1-dual"] + 2 * body + small)
    step2 = steps["step2"] * sum(SECONDS[f"step2-{s}"] + body for s in cfg.systems)
    step1b = steps["step1b"] * (SECONDS["step1b"] + body)
    for used, share in ((step1, "step1"), (step1b, "step1b"), (step2, "step2")):
        assert SHARES[share] * train_s * 0.95 <= used <= SHARES[share] * train_s
    # Step 3: its share in epochs of 100 updates of 32 for 3 primaries, at most the paper's 3 epochs.
    assert plan["epochs"] == min(round(SHARES["step3"] * train_s / (3 * 100 * (0.04 + body)), 3), 3.0)
    # The body's update beside the run: its own and the quickest stage's.
    assert plan["body_steps"] == int(0.6 * (600 - RESERVE_S - 20) / (body + SECONDS["step2-minijoint"]))


def plan_small_ratio() -> float:
    from ds_minimodel import flops
    from ds_minimodel.config import get_preset
    from ds_minimodel.systems import Step

    cfg = get_preset("reference_gpu").replace(vocab_size=8000)
    shape = {"seq_len": 128, "batch": 1, "mask_prob": 0.15}
    return (flops.per_update_flops(Step.PRETRAIN, cfg.replace(num_layers=4), **shape)
            / flops.per_update_flops(Step.PRETRAIN, cfg, **shape))


def test_a_subset_of_systems_plans_only_their_jobs_and_caps_hold(tmp_path):
    cfg = config(tmp_path, ["bl_base"], languages=("de", "fr"))
    plan = plan_reference(fake_run(600), cfg, SIZING)
    assert plan["jobs"] == 1 + 2 + 1  # BL_BASE's Step 1, Step 2 in two languages, Step 3
    assert plan["steps"]["step1"] == int(SHARES["step1"] * plan["train_s"] / (SECONDS["step1"] + 0.03))
    tiny = plan_reference(fake_run(600, TINY), cfg, SIZING)
    assert tiny["steps"] == {"step1": 1, "step1b": 1, "step2": 2} and tiny["epochs"] == 0.01
    assert tiny["body_steps"] == 2
    # Too little time: no training time left, and the floors say so (the part then runs no pipeline).
    short = plan_reference(fake_run(100, dataclasses.replace(GPU)), cfg, SIZING)
    assert short["train_s"] < 0 and short["steps"] == {"step1": 1, "step1b": 1, "step2": 2}


def test_with_the_gpu_to_itself_the_stages_are_planned_at_their_own_times(tmp_path):
    cfg = config(tmp_path, ["bl_base"])
    alone = plan_reference(fake_run(600), cfg, SIZING, body_beside=False)
    beside = plan_reference(fake_run(600), cfg, SIZING)
    assert alone["steps"]["step1"] == int(SHARES["step1"] * alone["train_s"] / SECONDS["step1"])
    assert alone["steps"]["step1"] > beside["steps"]["step1"] and alone["body_steps"] == 0


def test_without_a_body_the_sizing_times_two_processes_and_the_launch_cost_comes_from_step_3s(tmp_path):
    from ds_minimodel.tools.gpu_reference import startup_seconds, time_reference_shapes

    timed = []

    def fake_timed(name, cmd, limit, end):
        timed.append((name.removeprefix("sizing: "), cmd[cmd.index("one-stage") + 1]))
        return [{"stage": stage, "median_s": 0.05} for stage in cmd[cmd.index("one-stage") + 1].split(",")], \
            {"status": "ok", "seconds": 18.0}

    for body, names in ((False, ["reference", "reference step3"]), (True, ["reference", "reference step3", "body"])):
        timed.clear()
        run = SimpleNamespace(spec=SimpleNamespace(config="configs/reference_gpu.json", body=body), sizes=GPU,
                              work=tmp_path, cuda=False, timed=fake_timed)
        sizing = time_reference_shapes(run, end=0.0)
        assert [name for name, _ in timed] == names and list(sizing) == names
        assert sizing["reference step3"]["median_s"] == {"step3": 0.05}
    # One launch's fixed cost: the Step-3 process's 18 s less its timed updates, with a fifth and 3 s of room.
    updates = (GPU.warmup + GPU.updates) * 0.05
    assert startup_seconds(run, sizing["reference step3"]) == 1.2 * (18.0 - updates) + 3


LEASE7 = REPO / "benchmarks/gpu_h200_lease7.json"  # the seventh lease's call: its jobs' times, no Step-3 count


def test_a_plan_from_an_earlier_lease_uses_what_its_jobs_took_and_its_seconds_outside_them(tmp_path):
    from ds_minimodel.tools.gpu_reference import PACK_S, STORED_MARGIN, stored_sizing

    sizing = stored_sizing(LEASE7, "NVIDIA H200")
    t = sizing["reference"]["median_s"]
    # Each stage's seconds per update as the jobs took them: the lease's job times over its planned step counts.
    assert t["step1"] == 10.75 / 95 and t["step1-dual"] == 10.66 / 95 and t["step1-small"] == 5.62 / 95
    assert t["step1b"] == 4.3 / 90 and t["step2-bl_base"] == 8.79 / 154 and t["step2-minipost"] == 6.86 / 154
    # Step 3's count was not recorded then: the bench's median times the other stages' mean job/bench ratio.
    bench = json.loads(LEASE7.read_text())["parts"]["reference"]["sizing"]
    ratios = [t[k] / bench["reference"]["median_s"][k] for k in t if k in bench["reference"]["median_s"]]
    assert len(ratios) == 7 and 1.3 < min(ratios) and max(ratios) < 3.5  # the gap BENCHMARKS.md records
    step3 = sizing["reference step3"]["median_s"]["step3"]
    assert step3 == bench["reference step3"]["median_s"]["step3"] * sum(ratios) / 7
    # Outside the updates: the measured start-up, and the rest of the pipeline's seconds shared over its 11 jobs.
    assert sizing["startup_s"] == bench["startup_s"]
    assert sizing["per_job_s"] == (168.34325938100002 - 69.09 - bench["startup_s"]) / 11
    cfg = config(tmp_path, ["bl_base", "bl_small", "minijoint", "minipost"])
    plan = plan_reference(fake_run(480), cfg, sizing)
    assert plan["train_s"] == STORED_MARGIN * (480 - PACK_S - sizing["startup_s"] - 11 * sizing["per_job_s"])
    assert plan["steps"]["step1"] == int(SHARES["step1"] * plan["train_s"] / (t["step1"] + t["step1-dual"]
                                                                              + t["step1-small"]))
    assert plan["epochs"] == round(SHARES["step3"] * plan["train_s"] / (3 * 100 * step3), 3)


def test_a_plan_from_an_earlier_lease_reads_step3_counts_where_recorded_and_refuses_what_cannot_serve(tmp_path):
    from ds_minimodel.errors import InputError
    from ds_minimodel.tools.gpu_common import GpuRunSpec, device_name
    from ds_minimodel.tools.gpu_reference import argument_problem, stored_sizing

    figures = json.loads(LEASE7.read_text())
    pipeline = figures["parts"]["reference"]["pipeline"]
    pipeline["job_updates"] = {"step1-base": {"updates": 95, "seconds": 10.75},
                               "step3-lohelp-base-seed1": {"updates": 42, "seconds": 5.25}}
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(figures))
    sizing = stored_sizing(newer, "NVIDIA H200")
    assert sizing["reference step3"]["median_s"]["step3"] == 5.25 / 42
    assert sizing["per_job_s"] == (pipeline["seconds"] - pipeline["update_seconds"] - sizing["startup_s"]) / 2
    with pytest.raises(InputError, match=r"--plan-from .*gpu_h200_lease7.json: measured on NVIDIA H200, not on this "
                                         r"NVIDIA H100 80GB HBM3"):
        stored_sizing(LEASE7, "NVIDIA H100 80GB HBM3")
    pipeline["status"] = "timed out"
    newer.write_text(json.dumps(figures))
    with pytest.raises(InputError, match=r"newer.json: its reference pipeline did not finish .*'timed out'"):
        stored_sizing(newer, "NVIDIA H200")
    newer.write_text("{not json")
    with pytest.raises(InputError, match=r"newer.json: not a gpu-run's gpu_run.json"):
        stored_sizing(newer, "NVIDIA H200")
    # A Step-2 job in a language whose code holds a hyphen (the ladder's fi-small) is still its system's.
    figures = json.loads(LEASE7.read_text())
    jobs = figures["parts"]["reference"]["pipeline"]["job_updates_s"]
    jobs["step2-fi-small-bl_base"] = jobs.pop("step2-de-bl_base")
    del jobs["step2-de-minipost"]
    figures["parts"]["env"]["device"] = device = device_name(False)
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps(figures))
    timed = stored_sizing(subset, device)["reference"]["median_s"]
    assert timed["step2-bl_base"] == 8.79 / 154 and "step2-minipost" not in timed
    # ...and a run that would need what it did not time is refused before any work, the stages named.
    spec = GpuRunSpec(out=tmp_path / "out", work=tmp_path / "work", parts=("reference",), plan_from=subset)
    assert argument_problem(spec) == (f"--plan-from {subset}: its jobs time no step2-minipost, which this run needs; "
                                      "plan without it, or from a run of these systems")
    assert argument_problem(dataclasses.replace(spec, systems=("bl_base", "bl_small"))) is None
    # Before any work: the command line's check names the file and the problem (here: this machine has no H200).
    spec = GpuRunSpec(out=tmp_path / "out", work=tmp_path / "work", parts=("reference",), plan_from=LEASE7)
    problem = argument_problem(spec)
    assert problem is not None and problem.startswith(f"--plan-from {LEASE7}: measured on NVIDIA H200, not on this")


def test_the_command_refuses_a_plan_from_another_device_before_any_work(tmp_path, capsys):
    from ds_minimodel.tools import gpu_run

    with pytest.raises(SystemExit) as stop:
        gpu_run.main(["--out", str(tmp_path / "out"), "--parts", "reference", "--plan-from", str(LEASE7)])
    assert stop.value.code == 2 and "measured on NVIDIA H200, not on this" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

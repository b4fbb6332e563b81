"""The GPU command's planner (``tools.gpu_plan``): step counts from measured seconds per update that fit the time
left."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.systems import Step
from ds_minimodel.tools.gpu_common import GPU, REPO, TINY
from ds_minimodel.tools.gpu_plan import JOB_SETUP_S, RESERVE_S, SAVE_S, SHARES, STEP2_SAVES, plan_reference

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
        step3=dataclasses.replace(base.step3, seeds=[1], ds_config=str(ds3)),
        tasks=[dataclasses.replace(base.tasks[0], train=str(train))])


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
    # Step 3: its share in epochs of 100 updates of 32 for 3 primaries (BL_SMALL's 4 layers at the analytic FLOPs'
    # share of the 12-layer update), at most the config's 3 epochs; Steps 1, 1b and 2 share what it leaves.
    per_epoch = 100 * (2 * (0.04 + body) + 0.04 * plan_small_ratio(Step.FINETUNE) + body)
    assert SHARES["step3"] * train_s > 3 * per_epoch and plan["epochs"] == 3.0 and plan["step3_batch"] == 32
    rest = (train_s - 3 * per_epoch) / (1 - SHARES["step3"])
    for used, share in ((step1, "step1"), (step1b, "step1b"), (step2, "step2")):
        assert SHARES[share] * rest * 0.95 <= used <= SHARES[share] * rest
    # The body's update beside the run: its own and the quickest stage's.
    assert plan["body_steps"] == int(0.6 * (600 - RESERVE_S - 20) / (body + SECONDS["step2-minijoint"]))


def plan_small_ratio(step=Step.PRETRAIN) -> float:
    from ds_minimodel import flops
    from ds_minimodel.config import get_preset

    cfg = get_preset("reference_gpu").replace(vocab_size=8000)
    shape = {"seq_len": 128, "batch": 1, "mask_prob": 0.15}
    return (flops.per_update_flops(step, cfg.replace(num_layers=4), **shape)
            / flops.per_update_flops(step, cfg, **shape))


@pytest.mark.parametrize("left, epochs", [(600, "share"), (300, "floor"), (200, "most")])
def test_step_3_gets_an_epoch_before_the_other_steps_share_the_rest_unless_that_is_most_of_the_time(
        tmp_path, left, epochs):
    from ds_minimodel.tools.gpu_plan import STEP3_EPOCHS, STEP3_MOST

    cfg = config(tmp_path, ["bl_base"])
    slow = {**SIZING, "reference step3": {"median_s": {"step3": 0.5}}}  # an epoch: 100 updates of 0.5 s
    plan = plan_reference(fake_run(left), cfg, slow, body_beside=False)
    train_s, per_epoch = plan["train_s"], 100 * 0.5
    expected = {"share": SHARES["step3"] * train_s / per_epoch, "floor": STEP3_EPOCHS,
                "most": STEP3_MOST * train_s / per_epoch}[epochs]
    assert plan["epochs"] == round(expected, 3)
    # (the regimes as named: its share gives more than an epoch; less, and an epoch fits in STEP3_MOST; neither)
    assert (SHARES["step3"] * train_s > per_epoch) == (epochs == "share")
    assert (STEP3_MOST * train_s < per_epoch) == (epochs == "most")
    assert abs(plan["steps"]["step1"] - int(SHARES["step1"] * shared(plan, per_epoch) / SECONDS["step1"])) <= 1


def shared(plan, per_epoch):
    """The seconds Steps 1, 1b and 2 share in their SHARES' proportions: what Step 3's epochs leave."""
    return (plan["train_s"] - plan["epochs"] * per_epoch) / (1 - SHARES["step3"])


def test_a_subset_of_systems_plans_only_their_jobs_and_caps_hold(tmp_path):
    cfg = config(tmp_path, ["bl_base"], languages=("de", "fr"))
    plan = plan_reference(fake_run(600), cfg, SIZING)
    assert plan["jobs"] == 1 + 2 + 1  # BL_BASE's Step 1, Step 2 in two languages, Step 3
    assert plan["epochs"] == 3.0  # its share gives more: 100 updates of 0.04 s and the body's 0.03 an epoch
    assert abs(plan["steps"]["step1"] - int(SHARES["step1"] * shared(plan, 7.0) / (SECONDS["step1"] + 0.03))) <= 1
    tiny = plan_reference(fake_run(600, TINY), cfg, SIZING)
    assert tiny["steps"] == {"step1": 1, "step1b": 1, "step2": 2} and tiny["epochs"] == 0.001
    assert tiny["body_steps"] == 2
    # Too little time: no training time left, and the floors say so (the part then runs no pipeline).
    short = plan_reference(fake_run(100, dataclasses.replace(GPU)), cfg, SIZING)
    assert short["train_s"] < 0 and short["steps"] == {"step1": 1, "step1b": 1, "step2": 2}


def test_with_the_gpu_to_itself_the_stages_are_planned_at_their_own_times(tmp_path):
    cfg = config(tmp_path, ["bl_base"])
    alone = plan_reference(fake_run(600), cfg, SIZING, body_beside=False)
    beside = plan_reference(fake_run(600), cfg, SIZING)
    assert abs(alone["steps"]["step1"] - int(SHARES["step1"] * shared(alone, 4.0) / SECONDS["step1"])) <= 1
    assert alone["steps"]["step1"] > beside["steps"]["step1"] and alone["body_steps"] == 0


def test_without_a_body_the_sizing_times_two_processes_and_the_launch_cost_comes_from_step_3s(tmp_path):
    from ds_minimodel.tools.gpu_plan import startup_seconds
    from ds_minimodel.tools.gpu_reference import time_reference_shapes

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
    from ds_minimodel.tools.gpu_plan import PACK_S, STORED_MARGIN, stored_sizing

    sizing = stored_sizing(LEASE7, "NVIDIA H200")
    t = sizing["reference"]["median_s"]
    # Each stage's seconds per update as the jobs took them: the lease's job times over its planned step counts.
    assert t["step1"] == 10.75 / 95 and t["step1-dual"] == 10.66 / 95 and t["step1-small"] == 5.62 / 95
    assert t["step1b"] == 4.3 / 90 and t["step2-bl_base"] == 8.79 / 154 and t["step2-minipost"] == 6.86 / 154
    # Step 3's count was not recorded then: without this run's updates per epoch, the bench's median times the
    # other stages' mean job/bench ratio...
    bench = json.loads(LEASE7.read_text())["parts"]["reference"]["sizing"]
    ratios = [t[k] / bench["reference"]["median_s"][k] for k in t if k in bench["reference"]["median_s"]]
    assert len(ratios) == 7 and 1.3 < min(ratios) and max(ratios) < 3.5  # the gap BENCHMARKS.md records
    assert sizing["reference step3"]["median_s"] == {
        "step3": bench["reference step3"]["median_s"]["step3"] * sum(ratios) / 7}
    # ...and with them, each primary's own: its job's seconds over the lease's plan (0.111 of an epoch of 386
    # updates: 42, as its Step-3 runs logged). BL_SMALL's 4 layers finetune in a quarter of BL_BASE's time.
    sizing = stored_sizing(LEASE7, "NVIDIA H200", step3=(12374, 32))
    step3 = sizing["reference step3"]["median_s"]
    assert step3 == {"step3-base": 5.23 / 42, "step3-minijoint": 2.73 / 42, "step3-small": 1.19 / 42}
    assert sizing["reference"]["median_s"] == t
    # Outside the updates: the measured start-up, and the rest of the pipeline's seconds shared over its 11 jobs.
    assert sizing["startup_s"] == bench["startup_s"]
    assert sizing["per_job_s"] == (168.34325938100002 - 69.09 - bench["startup_s"]) / 11
    cfg = config(tmp_path, ["bl_base", "bl_small", "minijoint", "minipost"])
    plan = plan_reference(fake_run(480), cfg, sizing)
    assert plan["train_s"] == STORED_MARGIN * (480 - PACK_S - sizing["startup_s"] - 11 * sizing["per_job_s"])
    per_epoch = 100 * sum(step3.values())
    assert plan["epochs"] == min(round(SHARES["step3"] * plan["train_s"] / per_epoch, 3), 3.0)
    assert abs(plan["steps"]["step1"] - int(SHARES["step1"] * shared(plan, per_epoch)
                                            / (t["step1"] + t["step1-dual"] + t["step1-small"]))) <= 1
    # This run's Step 3 at 128 rows an update: the lease's times at 32 scaled by the rows, an upper bound; the
    # lease's counts still read at its own batch. A smaller batch keeps the stored time.
    wider = stored_sizing(LEASE7, "NVIDIA H200", step3=(12374, 128))["reference step3"]["median_s"]
    assert wider == {key: 4 * seconds for key, seconds in step3.items()}
    assert stored_sizing(LEASE7, "NVIDIA H200", step3=(12374, 16))["reference step3"]["median_s"] == step3


def test_a_plan_from_an_earlier_lease_reads_step3_counts_where_recorded_and_refuses_what_cannot_serve(tmp_path):
    from ds_minimodel.errors import InputError
    from ds_minimodel.tools.gpu_common import GpuRunSpec, device_name
    from ds_minimodel.tools.gpu_plan import stored_sizing
    from ds_minimodel.tools.gpu_reference import argument_problem

    figures = json.loads(LEASE7.read_text())
    pipeline = figures["parts"]["reference"]["pipeline"]
    pipeline["job_updates"] = {"step1-base": {"updates": 95, "seconds": 10.75},
                               "step3-lohelp-base-seed1": {"updates": 42, "seconds": 5.25}}
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(figures))
    sizing = stored_sizing(newer, "NVIDIA H200")
    assert sizing["reference step3"]["median_s"] == {"step3-base": 5.25 / 42}
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
    # Another device's run serves where it holds the bench medians to scale its jobs by (this machine has no H200)...
    spec = GpuRunSpec(out=tmp_path / "out", work=tmp_path / "work", parts=("reference",), plan_from=LEASE7)
    assert argument_problem(spec) is None
    # A body beside the run: the stored jobs had the GPU to themselves, so no plan from them leaves it its turns.
    assert argument_problem(dataclasses.replace(spec, body=True)) == (
        f"--plan-from {LEASE7} with --body: that run's jobs were timed without a body sharing the GPU, so a plan from "
        "them would not leave the body its turns; drop one of the two")
    # ...and without them the command line's check names the file and the problem, before any work.
    unbenched = without_bench(tmp_path)
    problem = argument_problem(dataclasses.replace(spec, plan_from=unbenched))
    assert problem == (f"--plan-from {unbenched}: measured on NVIDIA H200, not on this {device}, and it holds no bench "
                       "medians to scale its jobs' times to this device by")


def without_bench(tmp_path):
    """The seventh lease's file with its jobs' updates recorded (Step 3's too) and its bench medians gone."""
    figures = json.loads(LEASE7.read_text())
    ref = figures["parts"]["reference"]
    steps = {**ref["plan"]["steps"], "step3": 42}
    ref["pipeline"]["job_updates"] = {name: {"seconds": seconds, "updates": steps[name.split("-")[0]]}
                                      for name, seconds in ref["pipeline"]["job_updates_s"].items()}
    del ref["sizing"]["reference"], ref["sizing"]["reference step3"]
    path = tmp_path / "unbenched.json"
    path.write_text(json.dumps(figures))
    return path


def test_the_command_refuses_a_plan_it_cannot_move_to_this_device_before_any_work(tmp_path, capsys):
    from ds_minimodel.tools import gpu_run

    unbenched = without_bench(tmp_path)
    with pytest.raises(SystemExit) as stop:
        gpu_run.main(["--out", str(tmp_path / "out"), "--parts", "reference", "--plan-from", str(unbenched)])
    assert stop.value.code == 2 and "measured on NVIDIA H200, not on this" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


H100 = REPO / "benchmarks/gpu_h100_reference.json"  # the third lease's H100: the reference shapes benched there


def test_a_plan_from_another_devices_lease_scales_its_jobs_by_this_devices_bench(tmp_path):
    from ds_minimodel.errors import InputError
    from ds_minimodel.tools.gpu_plan import stored_sizing

    here = json.loads(H100.read_text())["parts"]["reference"]["sizing"]
    there = json.loads(LEASE7.read_text())["parts"]["reference"]["sizing"]
    stored = stored_sizing(LEASE7, "NVIDIA H200", (12374, 128))
    moved = stored_sizing(LEASE7, "NVIDIA H100 80GB HBM3", (12374, 128), here=here)
    # Each stage's job time times this device's bench median over the stored run's at the same shapes: the stored
    # run's job-to-bench ratio carries over. BL_SMALL's Step 1 (never benched) moves as Step 1 does, every
    # primary's Step 3 as the full-depth Step-3 bench.
    def factor(table, name):
        return here[table]["median_s"][name] / there[table]["median_s"][name]
    for stage, seconds in stored["reference"]["median_s"].items():
        bench = "step1" if stage == "step1-small" else stage
        assert moved["reference"]["median_s"][stage] == pytest.approx(seconds * factor("reference", bench))
        assert moved["reference"]["median_s"][stage] / here["reference"]["median_s"][bench] == pytest.approx(
            seconds / there["reference"]["median_s"][bench])
    for stage, seconds in stored["reference step3"]["median_s"].items():
        assert moved["reference step3"]["median_s"][stage] == pytest.approx(seconds * factor("reference step3",
                                                                                              "step3"))
    assert moved["scaled_by"]["step2-bl_base"] == round(factor("reference", "step2-bl_base"), 4)
    # The launch's start-up is this device's; the seconds outside the updates per job, the host's, are kept.
    assert moved["startup_s"] == here["startup_s"] and moved["per_job_s"] == stored["per_job_s"]
    # A stage this device's bench did not time moves by the mean of the others' factors.
    partial = {**here, "reference": {"median_s": {k: v for k, v in here["reference"]["median_s"].items()
                                                  if k != "step1b"}}}
    moved = stored_sizing(LEASE7, "NVIDIA H100 80GB HBM3", (12374, 128), here=partial)
    factors = moved["scaled_by"].values()  # rounded to 4 places in the record
    assert "step1b" not in moved["scaled_by"]
    assert moved["reference"]["median_s"]["step1b"] == pytest.approx(
        stored["reference"]["median_s"]["step1b"] * sum(factors) / len(factors), rel=1e-4)
    # This config benches Step 3 at its own batch (128 rows; the seventh lease's and the third's at 32): compared per
    # row, so a device whose update at 128 takes 3.5 times the H200's at 32 gives Step 3 the stored job-to-bench
    # ratio times that update, not the stored time scaled by the rows twice.
    wide = {**here, "reference step3": {"micro_batch": 128,
                                         "median_s": {"step3": 3.5 * there["reference step3"]["median_s"]["step3"]}}}
    moved = stored_sizing(LEASE7, "NVIDIA H100 80GB HBM3", (12374, 128), here=wide)
    narrow = stored_sizing(LEASE7, "NVIDIA H200", (12374, 32))["reference step3"]["median_s"]
    for stage, seconds in moved["reference step3"]["median_s"].items():
        assert seconds == pytest.approx(narrow[stage] * 3.5)
    with pytest.raises(InputError, match=r"gpu_h200_lease7.json: no bench median of a stage both it and this "):
        stored_sizing(LEASE7, "NVIDIA H100 80GB HBM3", here={"startup_s": 20.0})


def test_the_summary_says_where_the_plans_seconds_per_update_came_from():
    from ds_minimodel.tools.gpu_run import summary_markdown

    def summary(reference):
        figures = {"command": "gpu-run", "minutes": 8, "cuda": True, "parts": {"reference": {
            "status": "ok", "plan": {"steps": {"step1": 388}}, **reference}}}
        return [line for line in summary_markdown(figures).splitlines() if line.startswith("Seconds per update")]

    scaled = {"sized_by": "scaled", "sizing": {"from": "lease7.json", "scaled_by": {"step1": 0.9855}}}
    line = ("Seconds per update from the jobs of lease7.json times this device's bench over that run's, by stage "
            '{"step1": 0.9855}.')
    assert summary(scaled) == [line]
    assert summary({"sized_by": "bench"}) == ["Seconds per update from this device's bench."]
    assert summary({}) == []  # a run from before it was recorded


def test_where_the_reference_part_takes_its_seconds_per_update_from(tmp_path):
    from ds_minimodel.tools.gpu_common import GpuRunSpec
    from ds_minimodel.tools.gpu_reference import sizing_source

    spec = GpuRunSpec(out=tmp_path / "out", work=tmp_path / "work", parts=("reference",))
    benched = {"reference": {"status": "ok"}, "reference step3": {"status": "ok"}}
    # Its own bench: timed first, unless the bench part timed the shapes (and the body's, with --body) already.
    assert sizing_source(spec, "NVIDIA H200", {}) == ("bench", True)
    assert sizing_source(spec, "NVIDIA H200", benched) == ("bench", False)
    assert sizing_source(dataclasses.replace(spec, body=True), "NVIDIA H200", benched) == ("bench", True)
    assert sizing_source(dataclasses.replace(spec, tiny=True), "cpu", {}) == ("caps", False)
    # An earlier run on this device: its jobs' times, nothing timed; on another device, this one's bench first.
    spec = dataclasses.replace(spec, plan_from=LEASE7)
    assert sizing_source(spec, "NVIDIA H200", {}) == ("stored", False)
    assert sizing_source(dataclasses.replace(spec, tiny=True), "NVIDIA H200", {}) == ("stored", False)
    assert sizing_source(spec, "NVIDIA H100 80GB HBM3", {}) == ("scaled", True)
    assert sizing_source(spec, "NVIDIA H100 80GB HBM3", benched) == ("scaled", False)
    assert sizing_source(dataclasses.replace(spec, tiny=True), "cpu", {}) == ("scaled", True)


def test_the_plan_a_lease_would_train_is_printed_without_a_gpu(tmp_path, capsys):
    from ds_minimodel.tools import gpu_plan

    raw = json.loads((REPO / "configs/reference_gpu.json").read_text())
    train = tmp_path / "train.jsonl"
    train.write_text("x\n" * 12374)  # the lohelp training file's rows: 96 updates of 128 an epoch
    raw["tasks"][0]["train"] = str(train)
    raw["step3"]["ds_config"] = str(REPO / raw["step3"]["ds_config"])
    path = tmp_path / "reference_gpu.json"
    path.write_text(json.dumps(raw))
    assert gpu_plan.main(["--plan-from", str(LEASE7), "--seconds", "470", "--config", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    # The seventh lease's H200, its jobs' times (Step 3's at 128 rows: 4 times its 32's), German, seed 1, no relearn.
    assert shown["device"] == "NVIDIA H200" and shown["plan"]["jobs"] == 11 and shown["plan"]["step3_batch"] == 128
    whole = PipelineConfig.load(path)
    cfg = dataclasses.replace(whole, targets=whole.targets[:1], source_relearn=[],
                              step3=dataclasses.replace(whole.step3, seeds=[1]))
    sizing = gpu_plan.stored_sizing(LEASE7, "NVIDIA H200", (12374, 128))
    assert shown["plan"] == json.loads(json.dumps(plan_reference(fake_run(470), cfg, sizing, body_beside=False)))
    assert shown["plan"]["epochs"] == 1.0  # its fifth gives less than an epoch: raised to one
    # On an H100, as the third lease benched the reference shapes: the seventh lease's jobs scaled by them.
    assert gpu_plan.main(["--plan-from", str(LEASE7), "--seconds", "470", "--config", str(path),
                          "--bench-from", str(H100)]) == 0
    moved = json.loads(capsys.readouterr().out)
    here = json.loads(H100.read_text())["parts"]["reference"]["sizing"]
    assert moved["sizing"] == json.loads(json.dumps(gpu_plan.stored_sizing(LEASE7, None, (12374, 128), here=here)))
    assert moved["plan"]["startup_s"] == here["startup_s"] and moved["plan"]["epochs"] == 1.0
    unbenched = tmp_path / "unbenched.json"
    unbenched.write_text(json.dumps({"parts": {"reference": {"status": "skipped"}}}))
    none = tmp_path / "none.json"
    for bad, message in ((["--languages", "xx"], "--languages: xx not among"),
                         (["--systems", "bl_huge"], "--systems: bl_huge not among"),
                         (["--plan-from", str(none)], "not a gpu-run's gpu_run.json"),
                         (["--bench-from", str(none)], f"--bench-from {none}: not a gpu-run's gpu_run.json"),
                         (["--bench-from", str(unbenched)], f"--bench-from {unbenched}: its reference part timed no")):
        args = ["--plan-from", str(LEASE7), "--seconds", "470", "--config", str(path), *bad]
        assert gpu_plan.main(args) == 2 and message in capsys.readouterr().err

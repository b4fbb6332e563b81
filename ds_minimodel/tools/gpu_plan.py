"""How long each step of the GPU reference run trains (``ds-minimodel gpu-run``'s ``reference`` part): step counts
from measured seconds per update, the bench's or an earlier run's jobs' (``--plan-from``), that fit the time left."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ds_minimodel import flops
from ds_minimodel.config import get_preset, read_json
from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.systems import Step, get_primary, get_system
from ds_minimodel.tools.gpu_common import GPU, REPO, Run

# The reference run's shares of its training time (after the measured start-up of every launch): most to Step 1, as
# in the paper, where pretraining is most of the compute.
SHARES = {"step1": 0.45, "step1b": 0.05, "step2": 0.3, "step3": 0.2}
STEP3_EPOCHS = 1.0
STEP3_MOST = 0.4
"""Step 3's share is raised to this many epochs (the config's where fewer) where it gives fewer, to at most
STEP3_MOST of the training time: the English classifiers must read English before anything transfers. Over the CPU
reference body English dev read 51.7 after the seventh lease's 0.11 of an epoch, 65.2 after 0.41, 70.3-71.1 after
one (the bag of words: 71.7; RESULTS.md, "What Step 3 needs")."""
LEASE_STEP3_BATCH = 32
"""The Step-3 batch of every gpu-run before plans recorded theirs (``gpu_bf16_finetune.json`` until 2026-12-05)."""
RESERVE_S = 60
"""Seconds kept for Step 4, the analysis and packing after the reference run's training."""
SAVE_S = 2.0
STEP2_SAVES = 6
"""Seconds per checkpoint written (the weights and their consolidated copy; about 1.5 s measured on the H200 at stop
33), and how many a Step-2 launch writes (``run_pipeline`` saves every fifth of its updates, and at the end)."""
PACK_S = 10.0
"""Seconds kept after a pipeline planned from an earlier run's jobs (``stored_sizing``, whose per-job seconds include
Step 4 and the analysis): packing the results."""
STORED_MARGIN = 0.9
"""The share of what is left that a plan from an earlier run's jobs gives its updates: the rest absorbs a lease's
variation (the sixth and seventh leases' Step-1 jobs took 0.096 and 0.113 s an update at the same shapes)."""
JOB_SETUP_S = 5.0
"""Allowed for each job's own set-up in the shared launch (model, engine, data; the process start is paid once, in
``startup_s``): a planning allowance, not a measurement; the reference part's log times each job."""


def stored_sizing(path: Path, device: str | None, step3: tuple[int, int] | None = None,
                  here: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``plan_reference`` needs, from an earlier gpu-run's ``gpu_run.json`` on the same kind of device rather
    than from the bench: each stage's seconds per update as that run's jobs took them (on the seventh lease 1.3-3.5
    times the bench's medians at the same shapes, 27-49 ms more an update), Step 3's per primary, its launch's
    start-up, and the pipeline's other seconds per job (set-up, checkpoints, Step 4, the analysis). Refused with the
    file named when the run cannot serve, or was measured on another device than ``device`` (None: any) and no
    ``here`` is given.

    ``step3``: this run's Step-3 (rows, batch). A run that recorded its jobs' seconds but not their updates (the
    seventh lease) gives Steps 1, 1b and 2 their counts from its plan's steps, and Step 3 its count from its plan's
    epochs as finetuning counts them, ``int(epochs * (rows // batch))`` at its own batch. A Step-3 update at a larger
    batch than the stored run's is planned at the stored time scaled by the batch (an upper bound: the same widths,
    more rows, nothing per update that grows faster). Without ``step3``, Step 3 falls back to the bench's median
    times the other stages' mean ratio of job to bench.

    ``here``: this device's own sizing of the reference shapes (``time_reference_shapes``, with ``startup_s``), for
    a run measured on another device: each stage's job time is then scaled by this device's bench median over the
    stored run's (``scaled``), and the launch's start-up is this device's. The stored run's job-to-bench ratio is
    what carries over: on the seventh lease 1.3-3.5, the host's share of an update, not the card's."""
    where = f"--plan-from {path}"
    ref, measured_on = stored_reference(path)
    if device is not None and measured_on != device and here is None:
        raise InputError(f"{where}: measured on {measured_on or 'a device it does not name'}, not on this {device}, "
                         "and no bench of this device's to scale it by")
    pipeline, sizing = ref.get("pipeline") or {}, ref.get("sizing") or {}
    jobs = pipeline.get("job_updates") or {}
    plan = ref.get("plan") or {}
    stored_batch = plan.get("step3_batch", LEASE_STEP3_BATCH)
    if not jobs and pipeline.get("job_updates_s"):  # written before each job's updates were recorded
        steps = dict(plan.get("steps") or {})
        if step3 and plan.get("epochs"):
            steps["step3"] = max(1, int(plan["epochs"] * (step3[0] // stored_batch)))
        jobs = {name: {"seconds": seconds, "updates": steps.get(name.split("-", 1)[0])}
                for name, seconds in pipeline["job_updates_s"].items()}
    if pipeline.get("status") != "ok" or not jobs or "startup_s" not in sizing:
        raise InputError(f"{where}: its reference pipeline did not finish with its jobs timed (status "
                         f"{pipeline.get('status', 'missing')!r}), so there is nothing to plan from")
    rates: dict[str, float] = {}
    for name, job in jobs.items():
        step, _, rest = name.partition("-")
        key = {"step1": {"base": "step1", "minijoint": "step1-dual", "small": "step1-small"}.get(rest),
               "step1b": "step1b",
               "step3": f"step3-{rest.rsplit('-', 2)[-2]}" if rest.count("-") >= 2 else None,  # task-primary-seedN
               }.get(step) or (f"step2-{rest.rsplit('-', 1)[-1]}" if step == "step2" else None)
        if key and job.get("updates"):
            rates.setdefault(key, job["seconds"] / job["updates"])
    scale = max(1.0, step3[1] / stored_batch) if step3 else 1.0
    timed3 = {key: rates.pop(key) * scale for key in [key for key in rates if key.startswith("step3-")]}
    if not timed3:  # no count of Step-3 updates: the bench's median times the other stages' job/bench
        benched = {**(sizing.get("reference") or {}).get("median_s", {}),
                   **(sizing.get("reference step3") or {}).get("median_s", {})}
        ratios = [rate / benched[key] for key, rate in rates.items() if benched.get(key)]
        if "step3" not in benched or not ratios:
            raise InputError(f"{where}: no Step-3 job time or bench median in it to plan Step 3 from")
        timed3 = {"step3": benched["step3"] * sum(ratios) / len(ratios) * scale}
    outside = pipeline["seconds"] - pipeline["update_seconds"] - sizing["startup_s"]
    stored = {"from": str(path), "measured_on": measured_on, "reference": {"median_s": rates},
              "reference step3": {"median_s": timed3}, "startup_s": sizing["startup_s"],
              "per_job_s": max(outside, 0.0) / len(jobs)}
    return stored if here is None else scaled(stored, sizing, here, where)


def stored_reference(path: Path, option: str = "--plan-from") -> tuple[dict[str, Any], str | None]:
    """An earlier gpu-run's ``reference`` part and the device it ran on, from its ``gpu_run.json``; refused with the
    file named when it is not one."""
    try:
        parts = json.loads(Path(path).read_text(encoding="utf-8"))["parts"]
        ref = parts.get("reference") or {}
        return ref, ref.get("device") or (parts.get("env") or {}).get("device")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(f"{option} {path}: not a gpu-run's gpu_run.json ({type(err).__name__}: {err})") from None


def bench_median(sizing: dict[str, Any], stage: str) -> float | None:
    """The bench's median seconds per row of a micro-batch that a job's ``stage`` compares with in ``sizing`` (a
    sizing of the reference shapes): Step 3's primaries with the full-depth ``step3``, BL_SMALL's Step 1 (never
    benched) with ``step1``; None where it holds none. Per row, since two runs' configs can bench Step 3 at
    different batches (the seventh lease's at 32, this config's at 128)."""
    table, name = (("reference step3", "step3") if stage.startswith("step3") else
                   ("reference", "step1" if stage == "step1-small" else stage))
    timed = sizing.get(table) or {}
    median = (timed.get("median_s") or {}).get(name)
    return median / timed.get("micro_batch", 1) if median else None


def scaled(stored: dict[str, Any], stored_bench: dict[str, Any], here: dict[str, Any], where: str) -> dict[str, Any]:
    """``stored`` (``stored_sizing``'s, from another device's run) moved to this device: each stage's seconds per
    update times this device's bench median over the stored run's at the same shapes, per row (a stage without
    both: the mean of the others' factors), the launch's start-up measured here; the per-job seconds outside the
    updates, the host's, kept. Step 3, whose stored time ``stored_sizing`` scaled to this run's batch by its rows,
    so comes to the stored run's job-to-bench ratio times this device's bench at this run's batch."""
    factors = {}
    for table in ("reference", "reference step3"):
        for stage in stored[table]["median_s"]:
            mine, theirs = bench_median(here, stage), bench_median(stored_bench, stage)
            if mine and theirs:
                factors[stage] = mine / theirs
    if not factors:
        raise InputError(f"{where}: no bench median of a stage both it and this device's sizing timed, so its jobs' "
                         "times cannot be scaled to this device")
    mean = sum(factors.values()) / len(factors)
    moved = {table: {"median_s": {stage: seconds * factors.get(stage, mean)
                                  for stage, seconds in stored[table]["median_s"].items()}}
             for table in ("reference", "reference step3")}
    return {**stored, **moved, "startup_s": here.get("startup_s", stored["startup_s"]),
            "scaled_by": {stage: round(factor, 4) for stage, factor in factors.items()}}


def choice_problem(config: PipelineConfig, systems: Any, languages: Any, name: Any) -> str | None:
    """What ``--systems`` or ``--languages`` names that ``config`` (the file ``name``) does not hold; or None."""
    chosen = {"--systems": (systems, config.systems), "--languages": (languages, [t.lang for t in config.targets])}
    for option, (value, known) in chosen.items():
        unknown = [item for item in value or () if item not in known]
        if unknown:
            return f"{option}: {', '.join(unknown)} not among {name}'s ({', '.join(known)})"
    return None


def chosen_config(config: PipelineConfig, systems: Any, languages: Any, seeds: Any, relearn: bool) -> PipelineConfig:
    """``config`` cut as gpu-run cuts it: its systems among ``systems`` (None: all), its targets in ``languages``,
    the finetuning ``seeds``, and the source-relearn control (one more Step-2 launch) only with ``relearn``."""
    kept = [name for name in config.systems if systems is None or name in systems]
    return replace(config, systems=kept, targets=[t for t in config.targets if t.lang in languages],
                   source_relearn=[name for name in config.source_relearn if name in kept and relearn],
                   step3=replace(config.step3, seeds=list(seeds)))


def step3_shape(config: PipelineConfig) -> tuple[int, int]:
    """Step 3's rows (the config's first task's training file) and global batch: finetuning's epoch is rows //
    batch updates."""
    with open(config.tasks[0].train, encoding="utf-8") as f:
        rows = sum(1 for _ in f)
    return rows, read_json(config.step3.ds_config)["train_batch_size"]


def plan_reference(run: Run, config: PipelineConfig, sizing: dict[str, Any], *, body_beside: bool = True
                   ) -> dict[str, Any]:
    """Step counts that fit the time left: every launch's measured start-up taken off first, Step 3's epochs next
    (``SHARES``' fifth, raised to ``STEP3_EPOCHS`` within ``STEP3_MOST``), the rest shared out by ``SHARES`` at the
    measured seconds per update of each stage (``--tiny``: capped at a few updates)."""
    # The body trains beside the run on the same GPU, and these small models leave it idle between kernels: the
    # H200 run of stop 33 measured each stage's update at about its own time plus the body's (time-sliced, not
    # overlapped), so the body's seconds per update are added to every stage's, and the body's to theirs.
    body = sizing.get("body") if body_beside else None
    beside = body["median_s"]["step1"] if body else 0.0
    t = {stage: seconds + beside for stage, seconds in sizing["reference"]["median_s"].items()}
    preset = get_preset(config.preset).replace(vocab_size=config.vocab_size)
    shape = {"seq_len": config.seq_len, "batch": 1, "mask_prob": 0.15}

    def at_depth(step: Step, seconds: float, layers: int) -> float:  # an update no job timed, at a shallower depth:
        return beside + (seconds - beside) * (  # the full-depth update scaled by the analytic FLOPs of its depth
            flops.per_update_flops(step, preset.replace(num_layers=layers), **shape)
            / flops.per_update_flops(step, preset, **shape))

    small = t.pop("step1-small", None) or at_depth(Step.PRETRAIN, t["step1"], config.small_layers)
    langs, systems, seeds = len(config.targets), config.systems, config.step3.seeds
    names = {get_system(name).primary for name in systems}
    primaries = len(names)
    timed3 = sizing["reference step3"]["median_s"]  # "step3" (the bench's, full depth) or "step3-<primary>" (jobs')
    deep3 = beside + timed3.get("step3", timed3.get("step3-base", max(timed3.values())))
    depths = config.depths(preset.num_layers)
    t3 = {name: beside + timed3[f"step3-{name}"] if f"step3-{name}" in timed3 else
          at_depth(Step.FINETUNE, deep3, get_primary(name).num_layers(depths)) for name in names}
    jobs = (primaries + sum(get_system(name).step1b for name in systems) + len(systems) * langs
            + len(config.source_relearn)
            + primaries * len(seeds))
    startup = sizing["startup_s"]
    if "per_job_s" in sizing:  # an earlier run's jobs (stored_sizing): their measured seconds outside the updates
        available = run.left() - PACK_S
        train_s = STORED_MARGIN * (available - startup - jobs * sizing["per_job_s"])
    else:
        available = run.left() - RESERVE_S
        # Every job but Step 3's writes STEP2_SAVES (Step 2) or one or two (Steps 1, 1b) checkpoints.
        saves = SAVE_S * (jobs + (STEP2_SAVES - 1) * (len(systems) * langs + len(config.source_relearn)))
        # The jobs share one launch (pipeline.workers): one start-up, then each job's own set-up (its model, engine
        # and data), JOB_SETUP_S allowed for each.
        train_s = 0.8 * (available - startup - jobs * JOB_SETUP_S - saves)
    step2_each = langs * sum(t[f"step2-{name}"] for name in systems) + sum(
        t[f"step2-{name}"] for name in config.source_relearn)
    rows, step3_batch = step3_shape(config)
    per_epoch = len(seeds) * max(1, rows // step3_batch) * sum(t3.values())
    caps = run.sizes.step_caps
    step1_each = sum({"base": t["step1"], "small": small}.get(name, t["step1-dual"])  # MiniJoint: the dual head
                     for name in names)
    # Step 3 first: its share, raised to STEP3_EPOCHS where that is short (at most STEP3_MOST of the time), never
    # more than the config's epochs; Steps 1, 1b and 2 share the rest in their SHARES' proportions.
    recipe = min(config.step3.epochs, caps.get("epochs", config.step3.epochs))
    step3_s = min(max(SHARES["step3"] * train_s, min(STEP3_EPOCHS, recipe) * per_epoch), STEP3_MOST * train_s,
                  recipe * per_epoch)
    rest = (train_s - step3_s) / (1 - SHARES["step3"])
    steps = {
        "step1": int(SHARES["step1"] * rest / step1_each),
        "step1b": int(SHARES["step1b"] * rest / t["step1b"]),
        "step2": int(SHARES["step2"] * rest / step2_each),
    }
    steps = {k: max(2 if k == "step2" else 1, min(v, caps.get(k, v))) for k, v in steps.items()}
    epochs = max(min(0.01, recipe), min(step3_s / per_epoch, recipe))  # at least a hundredth, or the cap
    # The body's update beside the run: its own time plus a typical stage's (Step 2, most of the run's launches).
    body_update = beside + min(sizing["reference"]["median_s"].values()) if body else 0.0
    body_steps = int(0.6 * (available - startup) / body_update) if body else 0
    body_steps = max(1, min(body_steps, caps.get("body", body_steps))) if body else 0
    return {"available_s": available, "jobs": jobs, "launches": 1, "startup_s": startup, "train_s": train_s,
            "steps": steps, "epochs": round(epochs, 3), "step3_batch": step3_batch, "body_steps": body_steps}


def startup_seconds(run: Run, timing: dict[str, Any]) -> float:
    """One training launch's fixed cost, measured: a one-stage timing process's wall time (Step 3's) less its
    updates, with room for what a real launch adds (data, checkpoints, logs)."""
    updates = (run.sizes.warmup + run.sizes.updates) * sum(timing["median_s"].values())
    return 1.2 * max(timing["seconds"] - updates, 1.0) + 3


def tiny_plan(run: Run) -> dict[str, Any]:
    """``--tiny`` without the bench part's timings: every step count at its cap."""
    caps = run.sizes.step_caps
    return {"from": "the --tiny caps", "train_s": float("inf"), "available_s": run.left(), "launches": None,
            "steps": {k: caps[k] for k in ("step1", "step1b", "step2")}, "epochs": caps["epochs"],
            "body_steps": caps["body"]}


def main(argv: list[str] | None = None) -> int:
    """What a reference part planned from an earlier run would train, before a lease is spent on it."""
    parser = argparse.ArgumentParser(
        prog="python -m ds_minimodel.tools.gpu_plan",
        description="The step counts `gpu-run --parts reference --plan-from FILE` would train with SECONDS left when "
                    "its plan is made (the whole call's --minutes less the parts before it), without a GPU: the "
                    "reference config cut to the chosen systems, languages and seeds as gpu-run cuts it.")
    parser.add_argument("--plan-from", type=Path, required=True, help="an earlier gpu-run's gpu_run.json")
    parser.add_argument("--bench-from", type=Path, help="another gpu-run's gpu_run.json whose sizing of the reference "
                        "shapes stands for the lease's device (e.g. an H100's): the plan gpu-run makes on a device "
                        "other than --plan-from's, which times those shapes first and scales the jobs' times by them")
    parser.add_argument("--seconds", type=float, required=True, help="seconds left when the plan is made")
    parser.add_argument("--config", type=Path, default=REPO / "configs/reference_gpu.json")
    parser.add_argument("--systems", default=None, help="comma-separated (default: the config's)")
    parser.add_argument("--languages", default="de", help="comma-separated target languages (default: de)")
    parser.add_argument("--seeds", default="1", help="comma-separated finetuning seeds (default: 1)")
    parser.add_argument("--relearn", action="store_true", help="keep the config's source-relearn control")
    args = parser.parse_args(argv)
    try:
        config = PipelineConfig.load(args.config)
        languages = args.languages.split(",")
        problem = choice_problem(config, args.systems and args.systems.split(","), languages, args.config)
        if problem:
            raise InputError(problem)
        config = chosen_config(config, args.systems and args.systems.split(","), languages,
                               [int(seed) for seed in args.seeds.split(",")], args.relearn)
        here = None
        if args.bench_from is not None:
            here = stored_reference(args.bench_from, "--bench-from")[0].get("sizing") or {}
            if not (here.get("reference") or {}).get("median_s") or "startup_s" not in here:
                raise InputError(f"--bench-from {args.bench_from}: its reference part timed no bench shapes")
        sizing = stored_sizing(args.plan_from, None, step3_shape(config), here=here)
        plan = plan_reference(SimpleNamespace(left=lambda: args.seconds, sizes=GPU), config, sizing,
                              body_beside=False)
    except (InputError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"device": sizing["measured_on"], "sizing": sizing, "plan": plan}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

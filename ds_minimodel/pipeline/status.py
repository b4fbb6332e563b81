"""What of a pipeline's plan is done and what is left to run, job by job (``pipeline --list``): a user who adds a
language to a finished run sees that only its Step 2 and Step 4 will run.

Read from the run folders alone (a run is done when ``launching.finished`` says so), without starting anything.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ds_minimodel.config import read_json
from ds_minimodel.data.shards import META_FILE
from ds_minimodel.folders import live_writer
from ds_minimodel.pipeline.launching import finished
from ds_minimodel.pipeline.records import Results
from ds_minimodel.pipeline.source_model import given_primary
from ds_minimodel.systems import Step
from ds_minimodel.train import checkpoint
from ds_minimodel.train.metrics import last_logged_step

DONE, RUNNING, TO_RUN = "done", "running", "to run"


def job_status(pipeline: Any, job: Any) -> str:
    """``done``, ``running`` (a live process of this machine writes its run), ``to run``; for a Step-2 job the
    languages in each state (``done: de, fr; to run: es``), for a Step-3 job its seeds where they differ (``done: seed
    1; running: seed 2; to run: seed 3``). A started run says how far it is: ``running (update 175 of 600)``, its
    last logged update or its newest checkpoint, whichever is later; ``to run (resumes from update 197 of 600)``, the
    checkpoint a stopped run continues from. ``pipeline`` is a ``plan.Pipeline`` (its run of ``job``: the main one or
    a further pretraining run's)."""
    run = pipeline if job.pretrain_seed is None else pipeline.extra_runs[job.pretrain_seed]
    if job.step == Step.PREPARE:
        langs = [c.lang for c in [run.cfg.source, *run.cfg.targets]]
        return _state(all((run.data_dir(lang) / META_FILE).is_file() for lang in langs))
    if job.step == Step.PRETRAIN:
        given = run.given is not None and job.what == given_primary()
        if given and not run.given.needs_head:
            return _state(run.source_model_record().is_file())
        return _shown(*_run_state(run.step1_dir(job.what)))
    if job.step == Step.MINIPOST:
        return _shown(*_run_state(run.step1b_dir(job.what)))
    if job.step == Step.ADAPT:
        return _grouped({lang: _run_state(run.step2_dir(lang, job.what, job.step2_seed)) for lang in job.array})
    if job.step == Step.FINETUNE:
        states = {(f"{task.name} " if len(run.cfg.tasks) > 1 else "") + f"seed {seed}":
                  _run_state(run.step3_dir(task.name, job.what, seed)) for task in run.cfg.tasks for seed in run.seeds}
        return _shown(*states.popitem()[1]) if len(set(states.values())) == 1 else _grouped(states)
    return _state(_scored(run))


def _state(done: bool) -> str:
    return DONE if done else TO_RUN


def _run_state(run_dir: Path) -> tuple[str, str]:
    """The run's state and, for one started and not done, how far it is (``update 175 of 600``; else "")."""
    if finished(run_dir):
        return DONE, ""
    state = RUNNING if live_writer(run_dir) is not None else TO_RUN
    if not (run_dir / checkpoint.RUN).is_file():
        return state, ""
    steps = read_json(run_dir / checkpoint.RUN)["train"]["steps"]
    latest = checkpoint.latest_checkpoint(run_dir)
    saved = checkpoint.load_meta(latest).step if latest is not None else 0
    if state == RUNNING:
        return state, f"update {max(saved, last_logged_step(run_dir / 'metrics.jsonl') or 0)} of {steps}"
    return state, f"resumes from update {saved} of {steps}" if saved else ""


def _shown(state: str, progress: str) -> str:
    return f"{state} ({progress})" if progress else state


def _grouped(states: dict[str, tuple[str, str]]) -> str:
    """Each run's name under its state, in the order done, running, to run, with how far a started one is: ``done:
    de; running: fr (update 175 of 600); to run: es``."""
    return "; ".join(f"{state}: " + ", ".join(_shown(name, progress) for name, (s, progress) in states.items()
                                             if s == state)
                     for state in (DONE, RUNNING, TO_RUN) if any(s == state for s, _ in states.values()))


def _scored(run: Any) -> bool:
    """Step 4 is done when results.json holds a score of every system in every target language with a test file,
    at its final Step-2 checkpoint, of the main Step-2 run and of each further one, and (Table A5) of each further
    pretraining run, and the Step-2 runs' on each target dev file (a language, a dev file, a Step-2 or Step-1 seed
    added since, or a Step-2 run resumed, makes it to run again)."""
    path = Path(run.out) / "results.json"
    if not path.is_file():
        return False
    results = Results.load(path)
    scored = {(r.step2_seed, r.task, r.lang, r.system, r.step2_update) for r in results.zero_shot + results.step2_runs}
    further = {(r.pretrain_seed, r.task, r.lang, r.system, r.step2_update) for r in results.pretrain_runs}
    on_dev = {(r.step2_seed, r.task, r.lang, r.system, r.step2_update) for r in results.zero_shot_dev}
    # The main run's and further Step-2 runs' by Step-2 seed, the further pretraining runs' by Step-1 seed; the
    # Step-2 runs' on the target dev files too (dev_choice).
    runs = [(each, k, k, scored, "test") if each is run else (each, k, each.seed, further, "test")
            for each, k in run.step2_runs()]
    runs += [(run, k, k, on_dev, "dev") for each, k in run.step2_runs() if each is run]
    for each, step2_seed, key, found, split in runs:
        for task in run.cfg.tasks:
            for target in run.cfg.targets:
                if target.lang not in getattr(task, split):
                    continue
                for system in run.cfg.systems:
                    run_dir = each.step2_dir(target.lang, system, step2_seed)
                    if not finished(run_dir) or (key, task.name, target.lang, system,
                                                 read_json(run_dir / "run.json")["train"]["steps"]) not in found:
                        return False
    return True


def print_jobs(pipeline: Any, only: str | None = None) -> int:
    """``pipeline --list``: each job (or job ``only``, ``--only``), what it needs and how much of it is done."""
    jobs = [pipeline.checked_job(only)] if only is not None else pipeline.jobs()
    width = max(20, *(len(job.name) for job in jobs))  # a further run's names are longer: step2-minipost.step2-seed3
    for job in jobs:
        print(f"{job.name:<{width}} after: {', '.join(job.after) or '-'}"
              + (f"; one run per language: {', '.join(job.array)}" if job.array else "")
              + f"  [{job_status(pipeline, job)}]")
    if only is None and pipeline.ends_at_step2:
        print(f"(no Step 3 or Step 4: {pipeline.source_path} names no task; the run ends with each language's "
              "embeddings, its Step-2 checkpoints)")
    return 0

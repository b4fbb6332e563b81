"""Step 4 of a pipeline's plan (``plan.Pipeline``): zero-shot transfer scored, then the results files.

Every saved Step-2 checkpoint of every system and target language (of the main run and of each further Step-2 run,
``step2_seeds``) with each finetuning seed's task model of its primary, also on the task's dev file in that language
where it has one (``dev_choice``: which checkpoint of each run to use); the controls (each finetuned model with its
own embeddings on the source test files, the source-relearn runs); the trivial baselines; the final scores of every
pretraining run (``pretrain_seeds``). Each score is cached (``results.scored``): a re-run scores only what is new.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ds_minimodel.config import read_json
from ds_minimodel.pipeline import dev_choice
from ds_minimodel.pipeline.ownership import step2_run
from ds_minimodel.pipeline.records import DevScore, Score
from ds_minimodel.pipeline.results import scored, task_baselines, write_results
from ds_minimodel.pipeline.settings import TaskSettings
from ds_minimodel.pipeline.source_model import trained_here
from ds_minimodel.systems import Step, get_system
from ds_minimodel.train import checkpoint


def transfer(pipe: Any) -> dict[str, Any]:
    """Step 4 of ``pipe`` (a ``plan.Pipeline``, the main run): every score, then results.json and the CSVs."""
    source = pipe.cfg.source.lang
    task_models, dev_scores = {}, []
    for task in pipe.cfg.tasks:
        for variant in pipe.finetuned():
            for seed in pipe.seeds:
                run_dir = pipe.step3_dir(task.name, variant, seed)
                task_models[(task.name, variant, seed)] = pipe.finished_run(
                    run_dir, pipe.job_name(Step.FINETUNE, variant), Step.TRANSFER)
                if (run_dir / "dev_scores.json").is_file():
                    dev_scores.append(DevScore.from_dict({"task": task.name, "primary": variant, "seed": seed, **(
                        read_json(run_dir / "dev_scores.json"))}, str(run_dir / "dev_scores.json")))
    results, own, relearned, trivial = [], [], [], []
    for task in pipe.cfg.tasks:
        trivial += task_baselines(task, source)
        if source in task.test:  # diagnostics (a) and (b) of issue 16: the body, and Step 2 without a gap
            for variant in pipe.finetuned():
                for seed in pipe.seeds:
                    own.append(score(pipe, task, source, None, None, seed, task_models[(task.name, variant, seed)],
                                     own_of=variant))
            for system in pipe.cfg.source_relearn:
                run_dir = pipe.step2_dir(pipe.relearn_lang, system)
                pipe.finished_run(run_dir, pipe.job_name(Step.ADAPT, system), Step.TRANSFER)
                for ckpt in checkpoint.complete_checkpoints(run_dir):
                    for seed in pipe.seeds:
                        relearned.append(score(pipe, task, source, system, ckpt, seed,
                                               task_models[(task.name, get_system(system).primary, seed)],
                                               as_lang=pipe.relearn_lang))
    step2_runs: dict[int | None, list[Score]] = {None: results, **{k: [] for k in pipe.cfg.step2_seeds}}
    on_dev: list[Score] = []  # every Step-2 run's checkpoints on the target languages' dev files (dev_choice)
    for step2_seed, records in step2_runs.items():
        for task in pipe.cfg.tasks:
            for target in pipe.cfg.targets:
                for system in pipe.cfg.systems:
                    run_dir = pipe.step2_dir(target.lang, system, step2_seed)
                    pipe.finished_run(run_dir, pipe.job_name(Step.ADAPT, system, step2_seed=step2_seed),
                                      Step.TRANSFER)
                    splits = [split for split in ("test", "dev") if target.lang in getattr(task, split)]
                    got: dict[str, list[Score]] = {split: [] for split in ("test", "dev")}
                    for ckpt in checkpoint.complete_checkpoints(run_dir) if splits else ():
                        for split in splits:
                            for seed in pipe.seeds:
                                got[split].append(score(pipe, task, target.lang, system, ckpt, seed,
                                                        task_models[(task.name, get_system(system).primary, seed)],
                                                        step2_seed=step2_seed, split=split))
                    records += got["test"]
                    if got["dev"]:  # a line per system, not per score: which checkpoint its dev file chooses
                        on_dev += got["dev"]
                        print(f"[{Step.TRANSFER}] {dev_choice.said(dev_choice.choose(got['dev'], got['test'])[0])}",
                              flush=True)
    # Appendix A.5: every pretraining run's final scores (the main run's were just scored: read from the cache)
    runs = (pipe, *pipe.extra_runs.values()) if pipe.extra_runs else ()
    return write_results(pipe.out, results, dev_scores, source_test=own, source_relearn=relearned,
                         baselines=trivial, pretrain_runs=[r for run in runs for r in final_scores(run)],
                         step2_runs=[r for k in pipe.cfg.step2_seeds for r in step2_runs[k]], on_dev=on_dev,
                         source_model=None if pipe.given is None else {
                             **pipe.given.to_record(), **trained_here(pipe.cfg.head)})


def final_scores(run: Any) -> list[Score]:
    """A pretraining run's final scores: the final Step-2 checkpoint of every system and target language with every
    finetuning seed of its own Step 3 (appendix A.5 compares final scores)."""
    records = []
    for task in run.cfg.tasks:
        for target in run.cfg.targets:
            if target.lang not in task.test:
                continue
            for system in run.cfg.systems:
                primary = get_system(system).primary
                final = run.finished_run(run.step2_dir(target.lang, system), run.job_name(Step.ADAPT, system),
                                         Step.TRANSFER)
                for seed in run.seeds:
                    model = run.finished_run(run.step3_dir(task.name, primary, seed),
                                             run.job_name(Step.FINETUNE, primary), Step.TRANSFER)
                    records.append(replace(score(run, task, target.lang, system, final, seed, model),
                                           pretrain_seed=run.seed))
    return records


def score(run: Any, task: TaskSettings, lang: str, system: str | None, ckpt: Path | None, seed: int,
          task_model: Path, *, as_lang: str | None = None, own_of: str | None = None,
          step2_seed: int | None = None, split: str = "test") -> Score:
    """One Step-4 score of pretraining run ``run``: ``task_model`` with ``ckpt``'s embeddings (None: its own, those
    of primary ``own_of``) on ``lang``'s test file (``split`` "dev": its dev file), recorded under ``as_lang``
    (default ``lang``); ``step2_seed``: ``ckpt`` is of that further Step-2 run's."""
    as_lang = as_lang or lang
    further = step2_run(step2_seed)
    where = f"{system}{further}/seed{seed}/{ckpt.name}" if ckpt is not None else f"own-{own_of}/seed{seed}"
    cache = run.out / Step.TRANSFER / task.name / as_lang / (f"dev/{where}.json" if split == "dev" else f"{where}.json")
    file = Path((task.dev if split == "dev" else task.test)[lang])
    record = Score.from_dict({**scored(cache, task_model, ckpt, file, lang, task.eval_format),
                              "lang": as_lang, "primary": own_of, "step2_seed": step2_seed}, str(cache))
    if split == "dev":  # said per system once its checkpoints are all scored (``transfer``)
        return record
    what = f"{system}{further} update {record.step2_update}" if ckpt is not None else \
        f"primary {own_of}, own embeddings"
    print(f"[{Step.TRANSFER}] {task.name} {as_lang} {what} seed {seed}: "
          + ", ".join(f"{k} {v:.1f}" for k, v in record.metrics.items() if k != "exact_match"), flush=True)
    return record

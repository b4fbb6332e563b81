"""Step 4 scores, cached per input, and the results files: per seed, means over seeds, controls, trivial baselines."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ds_minimodel import flops
from ds_minimodel.config import file_sha256, read_json, write_csv, write_json
from ds_minimodel.pipeline import dev_choice
from ds_minimodel.pipeline.records import Baseline, DevScore, MeanScore, Results, Score
from ds_minimodel.pipeline.settings import TaskSettings
from ds_minimodel.systems import order_key
from ds_minimodel.tasks.baselines import baselines
from ds_minimodel.tasks.evaluate import zero_shot
from ds_minimodel.tasks.formats import read_examples
from ds_minimodel.train import checkpoint


def task_baselines(task: TaskSettings, source: str) -> list[Baseline]:
    """Majority-class and bag-of-words scores of every dev and test file of ``task`` (``tasks.baselines``)."""
    train = read_examples(task.format, Path(task.train), language=source, training=True)
    rows = []
    for split, files in (("dev", task.dev), ("test", task.test)):
        for lang, path in sorted(files.items()):
            test = read_examples(task.eval_format or task.format, Path(path), labels=train.labels, language=lang)
            rows.append(Baseline(task=task.name, lang=lang, split=split, file=str(path),
                                 scores=baselines(train, test)))
    return rows


def scored(cache: Path, task_model: Path, embeddings: Path | None, test_file: Path, lang: str,
           test_format: str | None) -> dict[str, Any]:
    """Step 4 for one (finetuned model, Step-2 checkpoint or None for its own embeddings, test file), kept in
    ``cache`` and reused while the inputs it names are unchanged (weights hashes), so a re-run only scores what is
    new."""
    inputs = {"task_model_sha256": checkpoint.load_meta(task_model).weights_sha256,
              "embeddings_sha256": None if embeddings is None else checkpoint.load_meta(embeddings).weights_sha256,
              "test_file": str(test_file.resolve()), "test_sha256": file_sha256(test_file),
              "test_format": test_format}
    if cache.is_file():
        kept = read_json(cache)
        if kept.get("inputs") == inputs:
            return kept["record"]
    record = zero_shot(task_model, embeddings, test_file, lang, test_format=test_format)
    if embeddings is not None:
        record.update(v100_days=flops.to_gpu_days(record["step2_flops"]))
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_json(cache, {"inputs": inputs, "record": record})
    return record


def over_seeds(results: list[Score]) -> list[MeanScore]:
    """Mean and sample standard deviation over finetuning seeds of the main metric, per task, system, language,
    Step-2 run (``step2_seed``: None for the main one) and Step-2 checkpoint (one row per point of the paper's
    Figure 3 curves)."""
    groups: dict[tuple, list[Score]] = {}
    for r in results:
        groups.setdefault((r.task, r.system, r.lang, -1 if r.step2_seed is None else r.step2_seed,
                           r.step2_update), []).append(r)
    rows = []
    for (task, system, lang, _, update), records in sorted(groups.items(),
                                                           key=lambda kv: (kv[0][0], order_key(kv[0][1]), *kv[0][2:])):
        metric = records[0].metric
        scores = [r.metrics[metric] for r in records]
        rows.append(MeanScore(task=task, system=system, lang=lang, step2_update=update,
                              step2_flops=records[0].step2_flops, v100_days=records[0].v100_days, metric=metric,
                              mean=statistics.mean(scores), std=statistics.stdev(scores) if len(scores) > 1 else 0.0,
                              seeds=sorted(r.seed for r in records), step2_seed=records[0].step2_seed))
    return rows


def write_results(out: Path, results: list[Score], dev_scores: list[DevScore], *, source_test: list[Score] = (),
                  source_relearn: list[Score] = (), baselines: list[Baseline] = (), pretrain_runs: list[Score] = (),
                  step2_runs: list[Score] = (), on_dev: list[Score] = (),
                  source_model: dict[str, Any] | None = None) -> dict[str, Any]:
    """results.json (every record, the per-checkpoint means over seeds, the source-language dev scores, the
    controls, the trivial baselines, with ``pretrain_seeds`` the final scores of every pretraining run and with
    ``step2_seeds`` every further Step-2 run's scores and their means, with ``on_dev`` (every Step-2 run's checkpoints
    on target dev files) those scores and the checkpoint each dev file chooses in each run: ``dev_choice``),
    results.csv (one row per seed and checkpoint), results_mean.csv (one row per checkpoint) and, with ``on_dev``,
    results_dev.csv (its rows as results.csv's). ``source_model``: the given model BL_BASE's primary is
    (``settings.GivenModel``), or None when Step 1 pretrained it."""
    summary = over_seeds(results)
    Results(zero_shot=list(results), zero_shot_over_seeds=summary, source_dev=list(dev_scores),
            source_test=list(source_test), source_relearn=list(source_relearn),
            source_relearn_over_seeds=over_seeds(list(source_relearn)), baselines=list(baselines),
            pretrain_runs=list(pretrain_runs), step2_runs=list(step2_runs),
            step2_runs_over_seeds=over_seeds(list(step2_runs)), zero_shot_dev=list(on_dev),
            chosen_on_dev=dev_choice.choose(list(on_dev), [*results, *step2_runs]),
            source_model=source_model).write(out / "results.json")
    if results:
        write_csv(out / "results.csv", [r.to_dict() for r in results])
        write_csv(out / "results_mean.csv", [{**r.to_dict(), "seeds": " ".join(map(str, r.seeds))} for r in summary])
    if on_dev:  # the dev readings as results.csv has the test ones; none left from a run that had a dev file
        write_csv(out / "results_dev.csv", [r.to_dict() for r in on_dev])
    else:
        (out / "results_dev.csv").unlink(missing_ok=True)
    return {"results": str(out / "results.json"), "csv": str(out / "results.csv")}

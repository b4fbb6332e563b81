"""The whole method from one config: prepare data, Step 1 (and 1b), Step 2 per target language, Step 3 per task and
seed, Step 4 for every saved Step-2 checkpoint, then results as JSON, CSV and a table shaped like the paper's Table 2.

    python -m ds_minimodel.pipeline --config configs/demo.json

Steps whose outputs exist are skipped; a step whose run folder exists but did not finish is resumed. Training
steps run as separate processes through the ``deepspeed`` launcher (``ranks`` per node); Step 4 runs in process.
Relative paths in the config are taken from the current directory.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds_minimodel import checkpoint, flops
from ds_minimodel.config import SYSTEMS, dataclass_from_dict, file_sha256, read_json, write_csv, write_json
from ds_minimodel.engine import free_port
from ds_minimodel.errors import InputError, report
from ds_minimodel.evaluate import zero_shot

PRIMARY_OF = {"bl_base": "base", "bl_small": "small", "minijoint": "minijoint", "minipost": "base"}


@dataclass(frozen=True, kw_only=True)
class StageSettings:
    ds_config: str
    """DeepSpeed JSON of this stage."""
    steps: int
    """Optimizer updates."""
    save_every: int
    """Checkpoint cadence (Step 2: every checkpoint is evaluated in Step 4)."""
    log_every: int = 10


@dataclass(frozen=True, kw_only=True)
class FinetuneSettings:
    ds_config: str
    epochs: float = 3.0
    seeds: list = field(default_factory=lambda: [1, 2, 3, 4, 5])
    max_len: int = 128
    warmup_ratio: float = 0.06


@dataclass(frozen=True, kw_only=True)
class CorpusSettings:
    lang: str
    corpus: str


@dataclass(frozen=True, kw_only=True)
class TaskSettings:
    name: str
    format: str
    train: str
    """Source-language training file."""
    dev: dict = field(default_factory=dict)
    """{language: file} scored with the source embeddings after Step 3."""
    test: dict = field(default_factory=dict)
    """{language: file} scored zero-shot in Step 4 with each target language's embeddings."""
    eval_format: str | None = None
    """Format of the dev and test files when it differs from ``format`` (XNLI: train ``multinli``, eval ``xnli``)."""


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    out: str
    source: dict
    targets: list
    tasks: list
    step1: dict
    step2: dict
    step3: dict
    step1b: dict | None = None
    systems: list = field(default_factory=lambda: list(SYSTEMS))
    preset: str = "base"
    seq_len: int = 512
    vocab_size: int = 50_000
    ranks: int = 1
    aux_layer: int = 4
    small_layers: int = 4
    keep_layers: int = 4
    new_layers: int = 2
    seed: int = 1

    @classmethod
    def load(cls, path: Path) -> PipelineConfig:
        source = str(path)
        raw = read_json(path)
        cfg = dataclass_from_dict(cls, raw, source)
        unknown = sorted(set(cfg.systems) - set(SYSTEMS))
        if unknown or not cfg.systems:
            raise InputError(f"{source}: systems must be a non-empty subset of {', '.join(SYSTEMS)}; got {cfg.systems}")
        if "minipost" in cfg.systems and cfg.step1b is None:
            raise InputError(f"{source}: minipost needs a step1b section")
        return cfg

    def parsed(self, source: str) -> dict[str, Any]:
        """The nested sections as typed settings (each checked for unknown keys and types)."""
        def typed(cls: type, data: Any, where: str) -> Any:
            return dataclass_from_dict(cls, data, f"{source}: {where}")

        return {
            "source": typed(CorpusSettings, self.source, "source"),
            "targets": [typed(CorpusSettings, t, f"targets[{i}]") for i, t in enumerate(self.targets)],
            "tasks": [typed(TaskSettings, t, f"tasks[{i}]") for i, t in enumerate(self.tasks)],
            "step1": typed(StageSettings, self.step1, "step1"),
            "step1b": None if self.step1b is None else typed(StageSettings, self.step1b, "step1b"),
            "step2": typed(StageSettings, self.step2, "step2"),
            "step3": typed(FinetuneSettings, self.step3, "step3"),
        }


# ----------------------------------------------------------------------------------------------- running steps
def launch(script: str, args: list[str], ranks: int) -> None:
    """Run a training entry point on ``ranks`` local processes; a failure stops the pipeline with its exit code."""
    if ranks == 1:
        cmd = [sys.executable, script, *args]
    else:
        launcher = shutil.which("deepspeed") or str(Path(sys.executable).parent / "deepspeed")
        cmd = [launcher, "--num_gpus", str(ranks), "--master_port", str(free_port()), script, *args]
    print("$ " + " ".join(cmd), flush=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(cmd, env=env)
    if proc.returncode:
        raise SystemExit(f"pipeline: {script} exited with {proc.returncode}")


def finished(run_dir: Path) -> bool:
    """A run is done when its newest complete checkpoint is at the step count its run.json asked for."""
    run_file, latest = run_dir / checkpoint.RUN, checkpoint.latest_checkpoint(run_dir)
    if not run_file.is_file() or latest is None:
        return False
    return checkpoint.load_meta(latest).get("step") == read_json(run_file)["train"]["steps"]


def train_step(script: str, run_dir: Path, args: list[str], ranks: int) -> None:
    if finished(run_dir):
        print(f"[pipeline] {run_dir}: done, skipped", flush=True)
        return
    resume = ["--resume"] if (run_dir / checkpoint.RUN).is_file() else []
    launch(script, [*args, "--out", str(run_dir), *resume], ranks)
    if not finished(run_dir):  # it saved and stopped early (SIGTERM/SIGUSR1): later steps need its output
        raise SystemExit(f"pipeline: {run_dir} stopped before its last update; run the pipeline again to resume")


def stage_args(s: StageSettings) -> list[str]:
    return ["--ds-config", s.ds_config, "--steps", str(s.steps), "--save-every", str(s.save_every),
            "--log-every", str(s.log_every)]


def run_pipeline(cfg: PipelineConfig, source_path: str) -> dict[str, Any]:
    from ds_minimodel.prepare import prepare

    sections = cfg.parsed(source_path)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {}
    for corpus in [sections["source"], *sections["targets"]]:
        data[corpus.lang] = out / "data" / corpus.lang
        prepare(Path(corpus.corpus), data[corpus.lang], vocab_size=cfg.vocab_size)

    # Step 1 (and 1b): the primaries the chosen systems need.
    common = ["--preset", cfg.preset, "--seq-len", str(cfg.seq_len), "--seed", str(cfg.seed),
              "--data", str(data[sections["source"].lang])]
    step1 = {}
    for variant in sorted({PRIMARY_OF[s] for s in cfg.systems}):
        run_dir = out / "step1" / variant
        train_step("run_pretrain.py", run_dir, ["--variant", variant, "--aux-layer", str(cfg.aux_layer),
                                                "--small-layers", str(cfg.small_layers), *common,
                                                *stage_args(sections["step1"])], cfg.ranks)
        step1[variant] = checkpoint.latest_checkpoint(run_dir)
    bodies = {"bl_base": step1.get("base"), "bl_small": step1.get("small"), "minijoint": step1.get("minijoint")}
    if "minipost" in cfg.systems:
        run_dir = out / "step1b" / "minipost"
        train_step("run_pretrain.py", run_dir, ["--variant", "minipost", "--from", str(step1["base"]),
                                                "--keep-layers", str(cfg.keep_layers), "--new-layers",
                                                str(cfg.new_layers), *common, *stage_args(sections["step1b"])],
                   cfg.ranks)
        bodies["minipost"] = checkpoint.latest_checkpoint(run_dir)

    # Step 2: every system x target language; every checkpoint is kept for Step 4.
    step2: dict[tuple[str, str], Path] = {}
    for target in sections["targets"]:
        for system in cfg.systems:
            run_dir = out / "step2" / target.lang / system
            train_step("run_adapt.py", run_dir, ["--system", system, "--body", str(bodies[system]), "--data",
                                                 str(data[target.lang]), "--lang", target.lang, "--seq-len",
                                                 str(cfg.seq_len), "--seed", str(cfg.seed),
                                                 *stage_args(sections["step2"])], cfg.ranks)
            step2[(target.lang, system)] = run_dir

    # Step 3: each primary x task x seed, English embeddings frozen.
    ft: FinetuneSettings = sections["step3"]
    step3: dict[tuple[str, str, int], Path] = {}
    dev_scores = []
    for task in sections["tasks"]:
        for variant in sorted({PRIMARY_OF[s] for s in cfg.systems}):
            for seed in ft.seeds:
                run_dir = out / "step3" / task.name / variant / f"seed{seed}"
                dev = task.dev.get(sections["source"].lang)
                train_step("run_finetune.py", run_dir,
                           ["--model", str(step1[variant]), "--task", task.name, "--format", task.format,
                            "--train", task.train, *(["--dev", dev] if dev else []),
                            *(["--dev-format", task.eval_format] if task.eval_format else []), "--language",
                            sections["source"].lang, "--ds-config", ft.ds_config, "--epochs", str(ft.epochs),
                            "--warmup-ratio", str(ft.warmup_ratio), "--max-len", str(ft.max_len), "--seed",
                            str(seed)], cfg.ranks)
                step3[(task.name, variant, seed)] = checkpoint.latest_checkpoint(run_dir)
                if (run_dir / "dev_scores.json").is_file():
                    dev_scores.append({"task": task.name, "primary": variant, "seed": seed,
                                       **read_json(run_dir / "dev_scores.json")})

    # Step 4: zero-shot, every Step-2 checkpoint of every system, every seed.
    results = []
    for task in sections["tasks"]:
        for (lang, system), run_dir in step2.items():
            if lang not in task.test:
                continue
            for ckpt in checkpoint.complete_checkpoints(run_dir):
                for seed in ft.seeds:
                    task_model = step3[(task.name, PRIMARY_OF[system], seed)]
                    cache = out / "step4" / task.name / lang / system / f"seed{seed}" / f"{ckpt.name}.json"
                    record = scored(cache, task_model, ckpt, Path(task.test[lang]), lang, task.eval_format)
                    results.append(record)
                    print(f"[step4] {task.name} {lang} {system} update {record['step2_update']} seed {seed}: "
                          + ", ".join(f"{k} {record[k]:.1f}" for k in ("accuracy", "macro_f1", "f1") if k in record),
                          flush=True)
    return write_results(out, results, dev_scores)


def scored(cache: Path, task_model: Path, embeddings: Path, test_file: Path, lang: str, test_format: str | None
           ) -> dict[str, Any]:
    """Step 4 for one (finetuned model, Step-2 checkpoint, test file), kept in ``cache`` and reused while the
    inputs it names are unchanged (weights hashes), so a re-run only scores what is new."""
    inputs = {"task_model_sha256": checkpoint.load_meta(task_model)["weights_sha256"],
              "embeddings_sha256": checkpoint.load_meta(embeddings)["weights_sha256"],
              "test_file": str(test_file.resolve()), "test_sha256": file_sha256(test_file),
              "test_format": test_format}
    if cache.is_file():
        kept = read_json(cache)
        if kept.get("inputs") == inputs:
            return kept["record"]
    record = zero_shot(task_model, embeddings, test_file, lang, test_format=test_format)
    record.update(v100_days=flops.to_gpu_days(record["step2_flops"]))
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_json(cache, {"inputs": inputs, "record": record})
    return record


# ----------------------------------------------------------------------------------------------- results
def main_metric(record: dict[str, Any]) -> str:
    """The paper's headline metric: accuracy for classification and tagging, F1 for QA."""
    return "accuracy" if "accuracy" in record else "f1"


def over_seeds(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample standard deviation over finetuning seeds of the main metric, per task, system, language
    and Step-2 checkpoint (one row per point of the paper's Figure 3 curves)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["task"], r["system"], r["lang"], r["step2_update"]), []).append(r)
    order = {s: i for i, s in enumerate(SYSTEMS)}
    rows = []
    for (task, system, lang, update), records in sorted(groups.items(),
                                                        key=lambda kv: (kv[0][0], order[kv[0][1]], *kv[0][2:])):
        metric = main_metric(records[0])
        scores = [r[metric] for r in records]
        rows.append({"task": task, "system": system, "lang": lang, "step2_update": update,
                     "step2_flops": records[0]["step2_flops"], "v100_days": records[0]["v100_days"],
                     "metric": metric, "mean": statistics.mean(scores),
                     "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                     "seeds": sorted(r["seed"] for r in records)})
    return rows


def write_results(out: Path, results: list[dict[str, Any]], dev_scores: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json (every record, the per-checkpoint means over seeds, the source-language dev scores),
    results.csv (one row per seed and checkpoint) and results_mean.csv (one row per checkpoint)."""
    summary = over_seeds(results)
    write_json(out / "results.json", {"zero_shot": results, "zero_shot_over_seeds": summary,
                                      "source_dev": dev_scores})
    if results:
        write_csv(out / "results.csv", results)
        write_csv(out / "results_mean.csv", [{**r, "seeds": " ".join(map(str, r["seeds"]))} for r in summary])
    return {"results": str(out / "results.json"), "csv": str(out / "results.csv"), "has_results": bool(results)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        cfg = PipelineConfig.load(args.config)
        summary = run_pipeline(cfg, str(args.config))
    except InputError as err:
        return report(err)
    # The analysis (tables shaped like the paper's Tables 2 and 3, Figures 1 and 3) reads only results.json.
    if not summary["has_results"]:
        print("no zero-shot results (no task has a test file in a target language): nothing to analyse")
    else:
        print(flush=True)
        proc = subprocess.run([sys.executable, "-m", "ds_minimodel.analysis", "--results", summary["results"]])
        if proc.returncode:
            return proc.returncode
    print(f"\nresults: {summary['results']} and {summary['csv']}")
    print(f"TensorBoard: tensorboard --logdir {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Slurm batch jobs for a pipeline config: one job per step of the plan, chained with ``--dependency=afterok``.

    python -m ds_minimodel submit --config configs/paper.json --dry-run   # print the scripts
    python -m ds_minimodel submit --config configs/paper.json             # sbatch them, print the job ids

Jobs (``python -m ds_minimodel pipeline --config C --list``): ``prepare``; ``step1-<primary>``; ``step1b-minipost``;
``step2-<system>``, a job array with one task per target language (and ``step2-<system>.step2-seed<k>`` per
further Step-2 run of ``step2_seeds``); ``step3-<primary>`` (every task and seed); ``step4`` (zero-shot evaluation
and the results tables). Each runs ``python -m ds_minimodel pipeline --only <job>
--launcher srun``, so ranks start with ``srun`` on the job's nodes (``ranks`` tasks per node). A job asks for
SIGUSR1 ``signal_seconds`` before its time limit; every rank then saves a checkpoint and exits, and the job
requeues itself and resumes (see ``ds_minimodel.cluster.slurm``). A failed job cancels the jobs that need it.

The config's optional ``slurm`` section (``SlurmSettings``) holds partition, account, sizes and time limits, with
per-job overrides under ``jobs`` keyed by job name (``step2-minijoint``) or step (``step2``).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ds_minimodel.cluster import slurm
from ds_minimodel.config import dataclass_from_dict
from ds_minimodel.errors import InputError, report
from ds_minimodel.pipeline.ownership import own_output
from ds_minimodel.pipeline.plan import Job, Pipeline
from ds_minimodel.pipeline.settings import PipelineConfig


@dataclass(frozen=True, kw_only=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    nodes: int = 1
    """Nodes per training job; each runs the config's ``ranks`` tasks (one per GPU)."""
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    time: str = "24:00:00"
    """Time limit per job (Slurm's formats, e.g. '2-00:00:00'); a job that reaches it requeues and resumes."""
    signal_seconds: int = 300
    """How long before the time limit every rank is told to save and exit (at least the time a save takes)."""
    log_dir: str | None = None
    """Batch logs (default: <out>/slurm/logs)."""
    setup: list = field(default_factory=list)
    """Shell lines at the top of every job, e.g. 'module load cuda/12.4'."""
    env: dict = field(default_factory=dict)
    sbatch_args: list = field(default_factory=list)
    jobs: dict = field(default_factory=dict)
    """Overrides of the fields above per job name or step, e.g. {"step1": {"nodes": 8, "time": "3-00:00:00"}}."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise InputError(f"nodes must be at least 1, got {self.nodes}")
        if self.gpus_per_node < 0:
            raise InputError(f"gpus_per_node must not be negative, got {self.gpus_per_node}")
        if self.signal_seconds < 1:
            raise InputError(f"signal_seconds must be at least 1, got {self.signal_seconds}")

    def for_job(self, job: Job, source: str) -> SlurmSettings:
        """These settings with the overrides for ``job``'s step, then for ``job`` itself, applied."""
        settings = self
        for key in (job.step, job.name):
            override = self.jobs.get(key)
            if override is None:
                continue
            where = f"{source}: slurm.jobs.{key}"
            if isinstance(override, dict) and "jobs" in override:
                raise InputError(f"{where}: overrides cannot nest 'jobs'")
            dataclass_from_dict(SlurmSettings, override, where)  # every field has a default: checks keys and types
            settings = replace(settings, **override)
        return settings


def batch_jobs(pipeline: Pipeline, settings: SlurmSettings, *, python: str, workdir: Path, config: Path
               ) -> list[tuple[Job, slurm.BatchJob]]:
    """One batch job per pipeline job, in dependency order."""
    source = pipeline.source_path
    names = {j.name for j in pipeline.jobs()}
    unknown = set(settings.jobs) - names - {name.split("-", 1)[0] for name in names}
    if unknown:
        raise InputError(f"{source}: slurm.jobs names no job or step of this pipeline: {', '.join(sorted(unknown))}")
    log_dir = settings.log_dir or str((workdir / pipeline.out / "slurm" / "logs").resolve())
    out = []
    for job in pipeline.jobs():
        s = settings.for_job(job, source)
        command = [python, "-m", "ds_minimodel", "pipeline", "--config", str(config), "--only", job.name]
        if job.array:
            command += ["--lang", slurm.ARRAY_VALUE]
        if job.trains:
            command += ["--launcher", "srun"]
        out.append((job, slurm.BatchJob(
            name=f"{pipeline.out.name}-{job.name}", command=command, workdir=str(workdir), log_dir=log_dir,
            nodes=s.nodes if job.trains else 1, tasks_per_node=pipeline.cfg.ranks if job.trains else 1,
            gpus_per_node=s.gpus_per_node, cpus_per_task=s.cpus_per_task, time=s.time, partition=s.partition,
            account=s.account, signal_seconds=s.signal_seconds, array=list(job.array), setup=list(s.setup),
            env=dict(s.env), sbatch_args=list(s.sbatch_args))))
    return out


def write_scripts(jobs: list[tuple[Job, slurm.BatchJob]], folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    Path(jobs[0][1].log_dir).mkdir(parents=True, exist_ok=True)
    paths = {}
    for job, batch in jobs:
        path = folder / f"{job.name}.sbatch"
        path.write_text(slurm.batch_script(batch), encoding="utf-8")
        paths[job.name] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ds-minimodel submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="pipeline config (see configs/)")
    p.add_argument("--dry-run", action="store_true", help="write and print the scripts and sbatch commands only")
    p.add_argument("--scripts", type=Path, help="where the batch scripts go (default: <out>/slurm)")
    p.add_argument("--python", default=sys.executable, help="interpreter the jobs run (default: this one)")
    args = p.parse_args(argv)
    ids: dict[str, str] = {}
    try:
        cfg = PipelineConfig.load(args.config)
        pipeline = Pipeline(cfg, str(args.config))
        settings = dataclass_from_dict(SlurmSettings, cfg.slurm or {}, f"{args.config}: slurm")
        own_output(pipeline.out, args.config)
        workdir = Path.cwd()  # relative paths in the config are taken from here, in the jobs too
        jobs = batch_jobs(pipeline, settings, python=args.python, workdir=workdir, config=args.config.resolve())
        scripts = write_scripts(jobs, args.scripts or pipeline.out / "slurm")
        for job, _ in jobs:
            after = [ids.get(name, f"<{name}>") for name in job.after]
            if args.dry_run:
                print(f"# {' '.join(slurm.sbatch_command(str(scripts[job.name]), after))}")
                print(scripts[job.name].read_text(encoding="utf-8"))
                continue
            ids[job.name] = slurm.submit(str(scripts[job.name]), after)
            print(f"{job.name}: job {ids[job.name]}" + (f" (after {', '.join(after)})" if after else ""), flush=True)
    except InputError as err:
        return report(err)
    except slurm.SubmitError as err:
        done = ", ".join(f"{k} {v}" for k, v in ids.items()) or "none"
        print(f"error: {err}\nsubmitted before the failure: {done} (scancel them, or leave them and resubmit the "
              "rest: finished steps are skipped)", file=sys.stderr)
        return 1
    return 0

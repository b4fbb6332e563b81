"""The whole method from one config: prepare data, Step 1 (and 1b), Step 2 per target language, Step 3 per task and
seed, Step 4 for every saved Step-2 checkpoint; then results.json and .csv, and analysis/ with the paper's tables and
figures (table2.txt, table3.txt, figure1_speedup.png, figure3_<task>_<lang>.png, ...), also printed at the end.

    python -m ds_minimodel pipeline --config configs/demo.json

Steps whose outputs exist are skipped (if they were trained with the settings the config asks now: otherwise an
error says which differ); a step whose run folder exists but did not finish is resumed. The training jobs run on
``ranks`` processes started once for them all (``workers``) by the ``deepspeed`` launcher (``--launcher torchrun``;
``srun``: a launch per job); Step 4 runs in process. Relative paths in the config are from the current directory,
which need not be the checkout.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ds_minimodel.cluster.launch import ENTRY_SCRIPTS, entry_script
from ds_minimodel.errors import InputError, report
from ds_minimodel.folders import claim
from ds_minimodel.pipeline.launching import LAUNCHERS, StoppedEarly
from ds_minimodel.pipeline.ownership import own_output
from ds_minimodel.pipeline.plan import Pipeline
from ds_minimodel.pipeline.settings import PipelineConfig, only_systems
from ds_minimodel.pipeline.stopping import Stop, Stopped
from ds_minimodel.pipeline.workers import SCRIPT, Workers
from ds_minimodel.systems import Step
from ds_minimodel.train.checkpoint import latest_checkpoint


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="the pipeline's JSON config: corpora, systems, step "
                   "lengths, tasks, out folder (see configs/demo.json and configs/reference_focus.json)")
    p.add_argument("--only", metavar="JOB", help="run one job of the plan (see --list), e.g. step2-minijoint")
    p.add_argument("--lang", help="with --only step2-*: just this target language")
    p.add_argument("--launcher", choices=LAUNCHERS, default="deepspeed",
                   help="how training ranks start on this machine: the deepspeed launcher, PyTorch's torchrun, or "
                        "(CPU ranks only) fork: forked from one process that imports torch and DeepSpeed once, "
                        "seconds sooner per launch on a machine with few cores; or srun inside a batch job")
    p.add_argument("--list", action="store_true", help="print the jobs, what each needs and whether it is done "
                   "(a Step-2 job: for which languages; with --only, that job), then exit")
    p.add_argument("--verbose", action="store_true", help="the deepspeed launcher's own INFO and warning lines "
                   "too (by default it logs errors only: on one machine the rest repeats itself at every launch)")
    p.add_argument("--launch-per-job", action="store_true", help="start the ranks anew for each training job")
    p.add_argument("--systems", metavar="A,B", help="only these of the config's systems (and the primaries, controls "
                   "and results they need): e.g. score the systems whose steps are done while the others train")
    args = p.parse_args(argv)
    with Stop():  # to the end: SIGINT, SIGTERM, SIGHUP stop a running job first, then the pipeline (stopping.py)
        try:
            return _run(args)
        except InputError as err:
            return report(err)
        except (StoppedEarly, Stopped) as stop:  # saved and stopped: exit 75 (requeue a batch job), 128 + a signal
            print(stop, file=sys.stderr, flush=True)
            return stop.exit_code


def _run(args: argparse.Namespace) -> int:
    cfg = PipelineConfig.load(args.config)
    if args.systems is not None:
        cfg = only_systems(cfg, args.systems.split(","), str(args.config))
    pipeline = Pipeline(cfg, str(args.config), launcher=args.launcher, verbose=args.verbose)
    if args.list:  # and what of it is done: nothing is started, and a folder the run would refuse is refused here
        from ds_minimodel.pipeline.status import print_jobs

        own_output(pipeline.out, args.config, mark=False)
        return print_jobs(pipeline, args.only)
    if args.lang is not None and not (args.only or "").startswith(f"{Step.ADAPT}-"):
        raise InputError("--lang goes with --only step2-<system>")
    if args.only is not None:
        pipeline.checked_job(args.only, args.lang)  # before the folder is claimed: a refused command writes nothing
    for name in (SCRIPT, *ENTRY_SCRIPTS):  # the scripts its launches start, from any directory: found before any work
        entry_script(name)
    own_output(pipeline.out, args.config)
    with Workers(pipeline.root, cfg.ranks, args.launcher, verbose=args.verbose, off=args.launch_per_job):
        if args.only is None:  # one pipeline per folder; single jobs (batch jobs, Step-2 arrays) claim their runs
            claim(pipeline.out, f"pipeline {args.config}")
            summary = pipeline.run_all()
        else:
            summary = pipeline.run(args.only, args.lang)
    if args.only is None and pipeline.ends_at_step2:
        print(f"\n{args.config} names no task: nothing to finetune or score. The target embeddings, each language's"
              " and system's newest Step-2 checkpoint (`ds-minimodel hf export --model <primary> --embeddings "
              "<checkpoint>` writes one as a Hugging Face folder; further runs named as their jobs are):")
        for run, step2_seed in pipeline.step2_runs():
            for lang in (t.lang for t in cfg.targets):
                for system in cfg.systems:
                    name = run.job_name(Step.ADAPT, system, step2_seed=step2_seed).removeprefix(f"{Step.ADAPT}-")
                    print(f"  {lang} {name}: {latest_checkpoint(run.step2_dir(lang, system, step2_seed))}")
    elif args.only not in (None, Step.TRANSFER):
        return 0
    else:  # the analysis (the paper's Tables 2-3, Figures 1 and 3) reads only results.json
        print(flush=True)
        proc = subprocess.run([sys.executable, "-m", "ds_minimodel", "analysis", "--results", summary["results"]])
        if proc.returncode:
            return proc.returncode
        print(f"\nresults: {summary['results']} and {summary['csv']}")
    print(f"TensorBoard: tensorboard --logdir {pipeline.log_root}")
    return 0

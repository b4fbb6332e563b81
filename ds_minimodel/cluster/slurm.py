"""Slurm: rank discovery inside ``srun``, batch-script text and ``sbatch`` calls. String handling only, no torch.

Inside a batch job the pipeline starts each training step with ``srun`` (one task per rank); ``rank_env`` turns the
scheduler's SLURM_* variables into the RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT that torch expects.
``batch_script`` writes one job of a pipeline (see ``pipeline.submit``), with requeue on preemption: the job
asks for SIGUSR1 ``signal_seconds`` before its time limit, every rank saves a checkpoint and exits, the pipeline
exits with ``EXIT_REQUEUE`` and the script requeues the job, which then resumes from that checkpoint.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field

EXIT_REQUEUE = 75
"""Exit status of a pipeline step that saved and stopped before its last update (BSD's EX_TEMPFAIL)."""

ARRAY_VALUE = "{array}"
"""Stands for the array task's value in a ``BatchJob`` command."""

_PORT_BASE, _PORT_SPAN = 15_000, 40_000


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: 'gpu[007-010,012],cpu1' -> 'gpu007'; 'a[1-2]-b[3]' -> 'a1-b3'."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    # Each bracket holds ranges 'a-b' or single numbers; the first host takes the first number of each, with its
    # zero padding ('007' stays '007').
    host = re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[-,]", m.group(1))[0], first)
    if not host or "[" in host or "]" in host:
        raise ValueError(f"not a Slurm host list: {nodelist!r}")
    return host


def rank_env(env: dict[str, str]) -> dict[str, str]:
    """Process-group variables for a task started by ``srun``; {} outside an srun step.

    Only an srun step sets SLURM_STEP_NUM_TASKS, so a plain ``python`` in a batch script (whose environment has
    SLURM_PROCID=0 too) stays a one-rank run. MASTER_ADDR is the step's first node; MASTER_PORT, unless set,
    comes from the job and step ids, so concurrent jobs sharing a node do not collide.
    """
    if "SLURM_STEP_NUM_TASKS" not in env or "SLURM_PROCID" not in env:
        return {}
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURMD_NODENAME", "")
    job, step = int(env.get("SLURM_JOB_ID", "0")), int(env.get("SLURM_STEP_ID", "0"))
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_STEP_NUM_TASKS"],
            "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
            "MASTER_ADDR": env.get("MASTER_ADDR") or first_host(nodelist),
            "MASTER_PORT": env.get("MASTER_PORT") or str(_PORT_BASE + (job * 16 + step) % _PORT_SPAN)}


@dataclass(frozen=True, kw_only=True)
class BatchJob:
    """One ``sbatch`` job: where it runs, for how long, and the command it runs."""

    name: str
    command: list[str]
    """argv of the job's one command (the pipeline restricted to one step)."""
    workdir: str
    log_dir: str
    nodes: int = 1
    tasks_per_node: int = 1
    """Ranks per node (one task per GPU)."""
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    time: str = "24:00:00"
    partition: str | None = None
    account: str | None = None
    signal_seconds: int = 300
    """SIGUSR1 this long before the time limit: every rank saves and exits, and the job requeues itself."""
    array: list[str] = field(default_factory=list)
    """One array task per value; the value replaces the argument ``ARRAY_VALUE`` in ``command``."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run first (module loads, environment activation)."""
    env: dict[str, str] = field(default_factory=dict)
    sbatch_args: list[str] = field(default_factory=list)
    """Extra ``#SBATCH`` options, e.g. '--qos=high', '--constraint=v100'."""


def batch_script(job: BatchJob) -> str:
    """The text of ``job``'s batch script."""
    log = f"{job.log_dir}/%x-%A_%a.out" if job.array else f"{job.log_dir}/%x-%j.out"
    options = [f"--job-name={job.name}", f"--nodes={job.nodes}", f"--ntasks-per-node={job.tasks_per_node}",
               f"--time={job.time}", f"--output={log}", "--open-mode=append", "--requeue",
               # USR1 goes to the job's steps (the srun-started ranks), which save and exit; the batch shell then
               # sees EXIT_REQUEUE and requeues. Slurm sends it on a timer, up to a minute late.
               f"--signal=USR1@{job.signal_seconds}"]
    if job.gpus_per_node:
        options.append(f"--gpus-per-node={job.gpus_per_node}")
    if job.cpus_per_task:
        options.append(f"--cpus-per-task={job.cpus_per_task}")
    if job.partition:
        options.append(f"--partition={job.partition}")
    if job.account:
        options.append(f"--account={job.account}")
    if job.array:
        options.append(f"--array=0-{len(job.array) - 1}")
    options += job.sbatch_args
    command = " ".join('"$VALUE"' if part == ARRAY_VALUE else shlex.quote(part) for part in job.command)
    lines = ["#!/bin/bash", *(f"#SBATCH {opt}" for opt in options), "",
             f"# {job.name}: written by ds_minimodel.pipeline.submit; restarts resume from the newest checkpoint.",
             "set -uo pipefail", f"cd {shlex.quote(job.workdir)}", *job.setup,
             *(f"export {k}={shlex.quote(v)}" for k, v in sorted(job.env.items()))]
    if job.array:
        lines += ["VALUES=(" + " ".join(shlex.quote(v) for v in job.array) + ")",
                  'VALUE="${VALUES[$SLURM_ARRAY_TASK_ID]}"']
    lines += ['echo "[$(date -Is)] $SLURM_JOB_NAME job $SLURM_JOB_ID on $SLURM_JOB_NODELIST,'
              ' restart ${SLURM_RESTART_COUNT:-0}"',
              command, "rc=$?",
              f"if [ $rc -eq {EXIT_REQUEUE} ]; then",
              '  echo "[$(date -Is)] saved a checkpoint before the time limit; requeueing job $SLURM_JOB_ID"',
              '  scontrol requeue "$SLURM_JOB_ID" && exit 0',
              "fi",
              "exit $rc", ""]
    return "\n".join(lines)


def sbatch_command(script: str, after: list[str]) -> list[str]:
    """``sbatch`` for ``script``, held until the jobs ``after`` succeed (and cancelled if one of them fails)."""
    cmd = ["sbatch", "--parsable"]
    if after:
        cmd += [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"]
    return [*cmd, script]


class SubmitError(RuntimeError):
    pass


def submit(script: str, after: list[str]) -> str:
    """Submit ``script``; returns the job id. ``sbatch --parsable`` prints 'id' or 'id;cluster'."""
    cmd = sbatch_command(script, after)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise SubmitError("sbatch not found: submit from a Slurm login node, or use --dry-run") from None
    job_id = proc.stdout.strip().split(";")[0]
    if proc.returncode or not job_id.isdigit():
        raise SubmitError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return job_id

"""What every part of ``ds-minimodel gpu-run`` shares (``tools.gpu_run`` has the command and its parts): the sizes of
a GPU run and of ``--tiny``, the run's deadline, log and figures, subprocesses under time limits, and the DeepSpeed
files the benchmarks write."""
from __future__ import annotations

import dataclasses
import json
import lzma
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds_minimodel.cluster.launch import CHECKOUT
from ds_minimodel.config import read_json, write_json
from ds_minimodel.train.distributed import native_build_env

REPO = CHECKOUT  # the gpu-run command runs from a checkout: its tests, configs and scripts travel with it


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """Every size the parts use: a GPU's (the defaults) or ``--tiny``'s (seconds on a CPU, for CI)."""

    minutes: float = 9.25
    """The whole command's wall clock, the reference run's deadline included: one call in a lease of 15 minutes (the
    device tool's limit per command is 10; a machine's start takes one or two)."""
    budgets: tuple[tuple[str, float], ...] = (("env", 30), ("tests", 120), ("bench", 220), ("profile", 195))
    """Seconds each part may take at most (the reference part takes what is left)."""
    preset: str = "base"
    vocab: int = 50_000
    seq_len: int = 512
    warmup: int = 3
    updates: int = 10
    search: tuple[int, int] = (8, 256)
    """Micro-batches tried for the largest that trains: from, to (doubling). 256 sequences of 512 tokens is about a
    quarter of a second per update on an H100; beyond it the 13 timed updates of each of six rows would not fit
    the part's minutes."""
    profile_micro: int = 256
    """The profile part's micro-batch where the bench part did not run (else the largest the bench found): 256, what
    every lease's search found on an H100 and an H200, so that the profile explains the bench's MFU row."""
    hf_max_batch: int = 64
    """HF computes logits at every position (vocab x tokens): its comparison runs at most this micro-batch."""
    gemm: int = 8192
    reference_preset: str | None = None
    """None: the config's preset."""
    reference_vocab: int | None = None
    step_caps: dict = dataclasses.field(default_factory=dict)
    """Upper bounds on the reference run's step counts (section -> steps; "epochs" for Step 3)."""
    sizing_micro: int | None = None
    """Micro-batch of the reference shapes' timing, and the global batch of the reference run's Steps 1, 1b and 2
    and of the body (None: the reference configs' own)."""
    corpus_bytes: int | None = None
    """Read at most this much of each corpus (whole lines); None: all of it."""
    task_lines: int | None = None
    """Keep this many lines of each dev and test file, evenly spaced (the files are grouped by label: a run of their
    first lines holds one or two); None: all of them."""
    step3_batch: int | None = None
    """The reference run's Step-3 global batch (None: its DeepSpeed file's). ``--tiny``'s one update of 8 rows where
    the GPU file's 128 took 23 s on a CPU without native bf16."""
    compile: bool = True
    """Time ``--compile``. Off with ``--tiny``: on a CPU compiling takes about 50 s, as long as the rest of the bench
    part, and tests/integration/test_pretrain.py covers ``--compile`` on a CPU already."""
    profile_levers: bool = True
    """Profile the levers' rows too (no overflow check; Q/K/V views; ``--compile``). Off with ``--tiny``: each is the
    plain row's command with one setting changed, and tests/integration/test_bench.py and tests/unit/test_model.py
    show that setting's weights or gradients equal."""


GPU = Sizes()
TINY = Sizes(minutes=30, budgets=(("env", 120), ("tests", 300), ("bench", 600), ("profile", 120)), preset="tiny",
             vocab=300, seq_len=32, warmup=0, updates=2, search=(1, 4), profile_micro=2, hf_max_batch=2, gemm=256,
             reference_preset="tiny", reference_vocab=1000, sizing_micro=2, compile=False, profile_levers=False,
             corpus_bytes=300_000, task_lines=400, step3_batch=8,
             step_caps={"step1": 1, "step1b": 1, "step2": 2, "epochs": 0.001, "body": 2})



@dataclass(frozen=True, kw_only=True)
class GpuRunSpec:
    """What one gpu-run is asked: its command line (``gpu_run.main``), each value checked once there."""

    out: Path
    """where the JSON, the summary, the log and the archives go"""
    work: Path
    """scratch folder: data, runs"""
    parts: tuple[str, ...]
    """the parts to run, in this order"""
    tiny: bool = False
    """every part at a size of seconds (CPU, CI)"""
    config: Path = Path("configs/reference_gpu.json")
    """the reference run's pipeline config (relative to the repository)"""
    english: str | None = None
    """the reference run's English corpus (.txt or .txt.xz); None: the config's"""
    tokenizers: Path | None = None
    """tokenizers trained before the run (``tools.gpu_tokenizers``), used where they fit; None: every one trained"""
    languages: tuple[str, ...] = ("de",)
    """the reference run's target languages"""
    seeds: tuple[int, ...] = (1,)
    """the reference run's finetuning seeds"""
    systems: tuple[str, ...] | None = None
    """the reference run's systems, a subset of the config's; None: all"""
    body: bool = False
    """also train a body of the CPU reference's shape beside the reference run"""
    relearn: bool = False
    """keep the config's source-relearn control"""
    prefetch_process: bool | None = None
    """where the reference run's MLM stages build their micro-batches (``TrainConfig.prefetch_process``): a process
    of their own (True), a thread (False); None: the stages' default (a process on a GPU)"""
    plan_from: Path | None = None
    """an earlier gpu-run's gpu_run.json: the reference run is planned from what its jobs took
    (``gpu_plan.stored_sizing``), on the same kind of device instead of timing the bench first, on another scaled by
    this device's bench of the same shapes"""
    argv: tuple[str, ...] = ()
    """the command line as given, for the record"""


class Run:
    """One gpu-run: where it writes, its deadline, its figures, its log, and the jobs started in the background."""

    def __init__(self, spec: GpuRunSpec, sizes: Sizes) -> None:
        import torch

        self.spec, self.sizes = spec, sizes
        self.out, self.work = spec.out.resolve(), spec.work.resolve()
        self.start = time.monotonic()
        self.deadline = self.start + sizes.minutes * 60
        self.cuda = torch.cuda.is_available()
        self.figures: dict[str, Any] = {"command": " ".join(["ds-minimodel gpu-run", *spec.argv]),
                                        "tiny": spec.tiny, "cuda": self.cuda, "minutes": sizes.minutes, "parts": {}}
        self.log_path = self.out / "gpu_run.log"
        self.background: dict[str, subprocess.Popen] = {}
        self.config_path: Path = self.work / "reference_gpu.json"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, text: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(text if text.endswith("\n") else text + "\n")
        print(text.rstrip("\n"), flush=True)

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        native_build_env(env)  # for what builds DeepSpeed's ops outside a training process (FusedAdam's prebuild)
        return env

    def sh(self, name: str, cmd: list[str], timeout: float) -> tuple[int | None, str, float]:
        """Run ``cmd`` from the repository with a hard ``timeout``; its output goes to the log. Returns (exit code,
        or None if it was stopped at the timeout; its output; seconds)."""
        self.log(f"\n### {name}: {' '.join(map(str, cmd))} (at most {timeout:.0f} s)")
        start = time.monotonic()
        try:
            proc = subprocess.Popen(list(map(str, cmd)), cwd=REPO, env=self.env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
        except OSError as err:  # e.g. no nvidia-smi on the PATH
            self.log(f"### {name}: could not start: {err}")
            return 127, str(err), 0.0
        try:
            output, _ = proc.communicate(timeout=max(timeout, 1))
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            stop(proc)
            output, code = proc.communicate()[0], None
        seconds = time.monotonic() - start
        self.log(output[-200_000:] + f"### {name}: {'stopped at its time limit' if code is None else f'exit {code}'}"
                 f" after {seconds:.1f} s")
        return code, output, seconds

    def timed(self, name: str, cmd: list[str], limit: float, end: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``sh`` for a command that prints JSON lines (the benchmarks), within ``limit`` seconds and before
        ``end`` (a part's own deadline): (the JSON lines, its status)."""
        left = end - time.monotonic()
        if left < 10:
            return [], skipped("the part's time budget was spent")
        code, output, seconds = self.sh(name, cmd, min(limit, left))
        rows = json_lines(output)
        status = "ok" if code == 0 and rows else ("timed out" if code is None else "failed")
        return rows, {"status": status, "seconds": seconds, **({} if status == "ok" else {"error": output[-2000:]})}

    def spawn(self, name: str, cmd: list[str]) -> None:
        """Start ``cmd`` in the background, its output in ``<work>/<name>.log`` (appended to the log when joined)."""
        log = (self.work / f"{name}.log").open("w", encoding="utf-8")
        self.background[name] = subprocess.Popen(list(map(str, cmd)), cwd=REPO, env=self.env(), stdout=log,
                                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.background[name].started_wall = time.time()  # type: ignore[attr-defined]

    def join(self, name: str, timeout: float) -> dict[str, Any]:
        """Wait for a background job at most ``timeout`` seconds: its exit code (None: still running, then
        stopped) and wall time since it started."""
        proc = self.background.pop(name, None)
        if proc is None:
            return {"status": "skipped", "reason": "not started"}
        try:
            proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            stop(proc)
        log = self.work / f"{name}.log"
        # Its own wall time: until its log was last written (it may have ended long before this join).
        seconds = log.stat().st_mtime - proc.started_wall  # type: ignore[attr-defined]
        output = log.read_text(encoding="utf-8", errors="replace")
        self.log(f"\n### {name} (background)\n{output[-200_000:]}### {name}: exit {proc.returncode} after "
                 f"{seconds:.1f} s")
        status = "ok" if proc.returncode == 0 else "failed"
        return {"status": status, "exit_code": proc.returncode, "seconds": seconds,
                "last_line": (output.strip().splitlines() or [""])[-1][:500],
                **({} if status == "ok" else {"error": output[-2000:]})}


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's whole group (training ranks save a checkpoint and exit), SIGKILL 20 s later."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def json_lines(output: str) -> list[dict[str, Any]]:
    """The JSON objects printed on lines of their own (DeepSpeed's log lines share the output)."""
    found = []
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def device_name(cuda: bool) -> str:
    """This machine's device as the figures name it: the GPU's name, or the CPU's kind and cores."""
    if cuda:
        import torch

        return torch.cuda.get_device_properties(0).name
    import platform

    return f"CPU ({platform.machine()}, {os.cpu_count()} cores); no CUDA device"


def skipped(reason: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason}


NO_CUDA = "needs CUDA: torch.cuda.is_available() is False on this machine"


def ds_config(run: Run, name: str, *, precision: str = "bf16", base: str | None = None, fused: bool | None = None,
              batch: int | None = None, overflow_check: bool = True) -> Path:
    """A DeepSpeed JSON for the benchmark: ZeRO-1 in ``precision`` (its batch is the bench command's to set), or the
    file ``base`` on one rank (its global batch ``batch`` where given); either with DeepSpeed's fused Adam on a GPU,
    torch's AdamW on a CPU (where the fused one would compile for a minute) or where ``fused`` is False.
    ``overflow_check=False``: bf16 without DeepSpeed's per-update gradient overflow check (``check_grad_overflow``,
    on by default in DeepSpeed 0.19), whose per-tensor tests synchronise the host with the GPU."""
    config = read_json(REPO / base) if base else {
        "train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1_000_000,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.98], "eps": 1e-6,
                                                  "weight_decay": 0.01}},
        "zero_optimization": {"stage": 1}}
    if base:  # one rank: the whole global batch in one micro-batch
        config["train_batch_size"] = batch or config["train_batch_size"]
        config["train_micro_batch_size_per_gpu"] = config["train_batch_size"]
        config.pop("gradient_accumulation_steps", None)
    else:
        config[precision] = {"enabled": True} if precision != "fp16" else {
            "enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
            "hysteresis": 2, "min_loss_scale": 1}
    if not overflow_check:
        config["bf16"] = {**config.get("bf16", {"enabled": True}), "check_grad_overflow": False}
    config["optimizer"]["params"]["torch_adam"] = not (run.cuda if fused is None else fused and run.cuda)
    path = run.work / f"ds_{name}.json"
    write_json(path, config)
    return path


def bench_cmd(run: Run, command: str, stage: str, *, preset: str, vocab: int, seq_len: int, micro: int,
              ds: Path, extra: tuple[str, ...] = ()) -> list[str]:
    s = run.sizes
    return [sys.executable, "-m", "ds_minimodel", "bench", command, stage, "--preset", preset, "--vocab", str(vocab),
            "--seq-len", str(seq_len), "--micro-batch", str(micro), "--warmup", str(s.warmup), "--updates",
            str(s.updates), "--ds-config", str(ds), *extra]


def materialise(work: Path, path: str | Path, *, max_bytes: int | None = None, lines: int | None = None) -> str:
    """A data file a run reads, as a plain file: the repository's own (or any absolute path), or its ``.xz``
    unpacked into the ``work`` folder; cut to whole lines (``--tiny``: the first ``max_bytes`` of a corpus, ``lines``
    lines evenly spaced through a task file). The GPU machine's run and the tokenizers trained for it before the lease
    (``tools.gpu_tokenizers``) read their text through this, so that both see the same bytes."""
    source = Path(path) if Path(path).is_absolute() else REPO / path
    if not source.is_file() and source.with_name(source.name + ".xz").is_file():
        source = source.with_name(source.name + ".xz")
    if not source.is_file():
        raise FileNotFoundError(f"{path}: not found (nor {path}.xz)")
    if source.suffix != ".xz" and max_bytes is None and lines is None:
        return str(source)
    raw = lzma.decompress(source.read_bytes()) if source.suffix == ".xz" else source.read_bytes()
    kept = raw.decode("utf-8").splitlines(keepends=True)
    if lines is not None:
        kept = [kept[i * len(kept) // lines] for i in range(min(lines, len(kept)))]
    if max_bytes is not None:
        size = 0
        for end, line in enumerate(kept):
            size += len(line.encode("utf-8"))
            if size > max_bytes:
                kept = kept[:end]
                break
    rel = source.relative_to(REPO) if source.is_relative_to(REPO) else Path("external") / source.name
    target = work / "data" / (rel.with_suffix("") if rel.suffix == ".xz" else rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(kept), encoding="utf-8")
    return str(target)

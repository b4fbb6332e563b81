"""One command for a lent GPU machine: every figure the package lacks, measured in order of value within a few
minutes, each part under its own time budget and its own error handling, so that a failure costs only its part.

    bash scripts/gpu_run.sh                        # on the GPU machine: installs the carried wheels, then this
    ds-minimodel gpu-run --out DIR                 # the same where DeepSpeed is installed (a user's GPU node)
    ds-minimodel gpu-run --tiny --out DIR          # every part at a size of seconds, on a CPU (the CI test)

Parts, in order (``--parts`` picks a subset, e.g. to rerun what failed; by default ``env``, ``tests`` and
``reference``: ``bench``, measured on six leases, and ``profile``, on two, run when asked):

- ``env``: nvidia-smi, versions, every module of the package imported, the bf16 (GPU) or fp32 (CPU) matrix-multiply
  rate measured, and DeepSpeed's FusedAdam build timed (it compiles with nvcc on first use; started at once, in the
  background, with the data preparation of the ``reference`` part).
- ``tests``: ``pytest -m gpu``: the fp16 tests (FusedAdam, dynamic loss scaling, skipped updates, the collapsed-scale
  error) on the GPU; on a CPU they skip, each with its reason.
- ``bench``: the package's ``bench`` at RoBERTa-base shapes and length 512: the largest micro-batch that trains
  (found by trying), Step 1 in bf16 (plain and dual-head), with ``--compile``, and in fp16 with FusedAdam; Step 2
  over the 12-layer body and over the 4-layer mini-model (the time ratio next to A3(12)/A3(4)); ours against
  Hugging Face ``RobertaForMaskedLM``; and the shapes of the reference run, timed to size it.
- ``profile``: Step 1 at the bench's shapes (its micro-batch, or 256) under torch.profiler, plain bf16, without
  DeepSpeed's gradient overflow check, and with ``--compile`` too: each update's time by kernel class (matmul,
  attention, norm/activation, loss, optimizer, copy/cast, other, idle), and torch's table of the largest kernels in
  the log.
- ``reference``: ``configs/reference_gpu.json`` through the whole pipeline (Steps 1-4, all four systems) with step
  counts set from the throughput just measured so that it ends before the deadline, its jobs in one launch (with
  ``--plan-from`` an earlier run's ``gpu_run.json``, from what that run's jobs took: their seconds per update and
  outside the updates, no bench timed first on the same kind of device, each stage scaled by this device's bench
  over that run's on another); with
  ``--body``, beside it on the same GPU, a Step-1 body of the CPU reference's shape trained for as long as the time
  allows (``bodies``), for the CPU reference experiment to start its Steps 2-4 from.

``--out`` receives at most 7 files: ``gpu_run.json`` (every figure), ``gpu_run.md`` (the summary), ``gpu_run.log``
(every command's output), ``reference_gpu.tar.gz`` (results, tables, figures) and ``body.tar.part-NN`` (the body,
split into 15 MiB parts: ``cat body.tar.part-* | tar x``). The JSON and the summary are rewritten after every part,
so a run stopped from outside keeps what it measured. Nothing is estimated: what a part did not reach says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ds_minimodel.config import read_json, write_json
from ds_minimodel.tools.gpu_common import (
    GPU,
    NO_CUDA,
    REPO,
    TINY,
    GpuRunSpec,
    Run,
    bench_cmd,
    device_name,
    ds_config,
    skipped,
)
from ds_minimodel.tools.gpu_reference import argument_problem, part_reference, start_data, time_reference_shapes

PARTS = ("env", "tests", "bench", "profile", "reference")
DEFAULT_PARTS = ("env", "tests", "reference")
"""What a lease runs unless told: ``bench`` (its rows measured on four H200 and two H100 leases, BENCHMARKS.md) and
``profile`` (measured on the fifth and sixth) only on request, so that the reference run gets the minutes."""
WORK_MARK = ".gpu-run-work"
"""Marks a scratch folder as gpu-run's own, which a later run may clear."""


# ----------------------------------------------------------------------------------------------- env
def fused_adam_cmd() -> list[str]:
    return [sys.executable, "-c", "import time; t = time.perf_counter(); "
            "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(); "
            "print(f'FusedAdam built and loaded in {time.perf_counter() - t:.1f} s')"]


def part_env(run: Run, budget: float) -> dict[str, Any]:
    import importlib
    import pkgutil
    import platform

    import torch

    import ds_minimodel

    found: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "torch_cuda": torch.version.cuda, "cpu_count": os.cpu_count(),
                             "torch_cuda_arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
                             "arch_list_for_deepspeed": run.env().get("TORCH_CUDA_ARCH_LIST")}
    for name in ("deepspeed", "transformers", "sentencepiece", "numpy", "triton", "safetensors", "pydantic"):
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception as err:  # a missing or broken package is a figure here, not a failure of the part
            found[name] = f"not importable: {err}"
    if run.cuda:
        props = torch.cuda.get_device_properties(0)
        found.update(device=device_name(True), capability=f"{props.major}.{props.minor}",
                     multiprocessors=props.multi_processor_count, memory_gib=props.total_memory / 2**30)
        code, output, _ = run.sh("nvidia-smi", ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,"
                                                "clocks.max.sm,power.limit", "--format=csv,noheader"], 30)
        found["nvidia_smi"] = output.strip() if code == 0 else f"failed: {output[-500:]}"
        run.sh("nvidia-smi (full)", ["nvidia-smi"], 30)
    else:
        found["device"] = device_name(False)
    failed = {}
    for module in pkgutil.walk_packages(ds_minimodel.__path__, "ds_minimodel."):
        try:
            importlib.import_module(module.name)
        except Exception as err:
            failed[module.name] = f"{type(err).__name__}: {err}"
    found["imports"] = {"failed": failed, "ok": not failed}
    found["gemm"] = gemm_rate(run.sizes.gemm, run.cuda)
    return found


def gemm_rate(n: int, cuda: bool) -> dict[str, Any]:
    """The matrix-multiply rate this device reaches on random data (bf16 on a GPU, fp32 on a CPU): mean of ten
    products after three warm-ups. A measured ceiling next to the datasheet's."""
    import torch

    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / 10
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "tflops": 2 * n**3 / seconds / 1e12}


# ----------------------------------------------------------------------------------------------- tests
def part_tests(run: Run, budget: float) -> dict[str, Any]:
    import xml.etree.ElementTree as ET

    # The fp16 tests use FusedAdam: where its build (started at the first second) has not finished, the first of
    # them waits for it (torch's extension lock), inside its own time.
    found: dict[str, Any] = {}
    junit = run.work / "junit.xml"
    started = time.monotonic()
    code, output, seconds = run.sh("pytest -m gpu", [sys.executable, "-m", "pytest", "-m", "gpu", "-p",
                                                     "no:cacheprovider", "-q", "-rA", "--junitxml", junit],
                                   budget - (time.monotonic() - started) - 5)
    found.update(exit_code=code, seconds=seconds, summary=output.strip().splitlines()[-1:] if output else [])
    if not junit.is_file():
        return {**found, "status": "failed", "error": output[-3000:]}
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            child = case.find(kind)
            if child is not None:
                outcome, detail = kind, (child.get("message") or "")[:1000]
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time") or 0), **({"detail": detail} if detail else {})})
    counts = {kind: sum(c["outcome"] == kind for c in cases) for kind in ("passed", "failure", "error", "skipped")}
    bad = counts["failure"] + counts["error"]
    return {**found, "cases": cases, "counts": counts, "status": "failed" if bad or code not in (0, 5) else "ok"}


# ----------------------------------------------------------------------------------------------- bench


def part_bench(run: Run, budget: float) -> dict[str, Any]:
    from ds_minimodel.tools.bench import summarise

    s, end = run.sizes, time.monotonic() + budget
    found: dict[str, Any] = {"preset": s.preset, "seq_len": s.seq_len, "vocab": s.vocab}

    def timed(name: str, cmd: list[str], limit: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return run.timed(name, cmd, limit, end)

    # 1. The largest micro-batch of Step 1 that trains (bf16, ZeRO-1; torch's AdamW: the same memory as the fused
    # one, and no wait for its build).
    search_ds = ds_config(run, "search", fused=False)
    rows, found["max_batch"] = timed("max micro-batch, step1", [
        *bench_cmd(run, "max-batch", "step1", preset=s.preset, vocab=s.vocab, seq_len=s.seq_len, micro=s.search[0],
                   ds=search_ds), "--start", str(s.search[0]), "--max", str(s.search[1])], 150)
    micro = rows[-1]["micro_batch"] if rows and rows[-1].get("micro_batch") else s.search[0]
    found["max_batch"].update(rows[-1] if rows else {})
    found["micro_batch"] = micro

    # 2. Ours against Hugging Face RobertaForMaskedLM (plain PyTorch loop, bf16 autocast): no DeepSpeed optimizer.
    hf_micro = min(micro, s.hf_max_batch)
    rows, status = timed("ours vs HF", [sys.executable, "-m", "ds_minimodel", "bench", "hf", "--preset", s.preset,
                                        "--vocab", str(s.vocab), "--seq-len", str(s.seq_len), "--micro-batch",
                                        str(hf_micro), "--warmup", str(s.warmup), "--updates", str(s.updates),
                                        "--bf16", "--json", run.work / "hf.json"], 120)
    hf = read_json(run.work / "hf.json") if (run.work / "hf.json").is_file() else {}
    if hf and status["status"] == "failed":  # it prints a sentence, not a JSON line: its file says it ran
        status = {"status": "ok", "seconds": status["seconds"]}
    found["hf"] = {**status, **{k: hf[k] for k in ("ours", "hf", "speedup", "micro_batch", "seq_len") if k in hf}}

    # 3. Step 1 and Step 2 rows. The four bf16 rows in one process (each engine built and freed in turn, its peak
    # memory its own on a GPU): a process start costs seconds that the reference part needs. A row that did not
    # come out, and the --compile and fp16 rows, run in processes of their own; a failure at the searched size is
    # retried once at half of it (the dual head and fp16 need more memory than the update the search ran).
    if run.cuda:
        found["fused_adam"] = run.join("fused_adam", max(1, min(240, end - time.monotonic() - 60)))
    bf16 = ds_config(run, "bf16")
    plain = ("step1", "step1-dual", "step2-bl_base", "step2-minijoint")
    rows, status = timed(f"bf16 {','.join(plain)} x{micro}", bench_cmd(
        run, "one-stage", ",".join(plain), preset=s.preset, vocab=s.vocab, seq_len=s.seq_len, micro=micro, ds=bf16),
        240)
    together = {r["stage"]: r for r in rows}
    variants = [("bf16", stage, bf16, ()) for stage in plain]
    variants += [("bf16 --compile", "step1", bf16, ("--compile",)),
                 ("fp16", "step1", ds_config(run, "fp16", precision="fp16") if run.cuda else None, ())]
    found["rows"] = []
    for label, stage, ds, extra in variants:
        if label == "bf16" and stage in together:
            found["rows"].append({"label": label, "stage": stage, "micro_batch": micro, "status": "ok",
                                  "seconds": status["seconds"], **together[stage]})
            continue
        if ds is None or (extra and not s.compile):
            found["rows"].append({"label": label, "stage": stage, **skipped(
                f"DeepSpeed refuses fp16 without a GPU; {NO_CUDA}" if ds is None else
                "--tiny: compiling takes about 50 s on a CPU; test_pretrain.py covers --compile there")})
            continue
        sizes = (micro, micro // 2) if label != "bf16" else (micro // 2,)  # bf16 here: it failed at micro above
        for size in sizes:
            rows, status = timed(f"{label} {stage} x{size}", bench_cmd(
                run, "one-stage", stage, preset=s.preset, vocab=s.vocab, seq_len=s.seq_len, micro=size, ds=ds,
                extra=extra), 240 if extra else 120)
            if status["status"] == "ok" or size < 2 or status["status"] == "skipped":
                break
        found["rows"].append({"label": label, "stage": stage, "micro_batch": size, **status,
                              **(rows[-1] if rows else {})})
    bf16_rows = [r for r in found["rows"] if r["label"] == "bf16" and r["status"] == "ok"]
    summary = summarise(bf16_rows, "bf16", 1)
    found.update(peak_tflops=summary["peak_tflops"], peak_source=summary["peak_source"], ratios=summary["ratios"])
    for label, precision in (("bf16 --compile", "bf16"), ("fp16", "fp16")):  # their MFU (summarise sets it)
        summarise([r for r in found["rows"] if r["label"] == label and r["status"] == "ok"], precision, 1)

    # 4. The reference run's shapes, timed to size it (and the CPU reference's shape, for the body).
    found["sizing"] = skipped("--tiny: the reference part plans from its caps (the planner is unit-tested)") \
        if run.spec.tiny else time_reference_shapes(run, end)
    bad = [r for r in found["rows"] if r["status"] not in ("ok", "skipped")]
    return {**found, "status": "partial" if bad else "ok"}


# ----------------------------------------------------------------------------------------------- profile
def part_profile(run: Run, budget: float) -> dict[str, Any]:
    """Step 1 at the benchmark's shapes under torch.profiler: where an update's time goes, by kernel class
    (``train.kernel_classes``): plain bf16, then with the levers the first profile pointed to (no gradient
    overflow check: the host waited on the GPU in each optimizer step; ``--qkv-views``: one copy fewer of the
    attention's gradients; ``--compile``: fused norm, activation and copies). Each row's torch table goes to the
    log."""
    from ds_minimodel.tools.bench import summarise
    from ds_minimodel.train.kernel_classes import profile_table

    s, end = run.sizes, time.monotonic() + budget
    micro = (run.figures["parts"].get("bench") or {}).get("micro_batch") or s.profile_micro
    plain, unchecked = ds_config(run, "profile"), ds_config(run, "profile_unchecked", overflow_check=False)
    found: dict[str, Any] = {"micro_batch": micro, "preset": s.preset, "seq_len": s.seq_len, "rows": []}
    for label, ds, extra in (("bf16", plain, ()), ("bf16, no overflow check", unchecked, ()),
                             ("bf16 --qkv-views, no overflow check", unchecked, ("--qkv-views",)),
                             ("bf16 --compile, no overflow check", unchecked, ("--compile",))):
        if found["rows"] and not s.profile_levers:
            found["rows"].append({"label": label, **skipped("--tiny: the plain row's command with one setting "
                                                            "changed; test_bench.py checks that setting")})
            continue
        if "--compile" in extra and not s.compile:
            found["rows"].append({"label": label, **skipped("--tiny: compiling takes about 50 s on a CPU")})
            continue
        table = run.work / f"profile_{len(found['rows'])}.txt"
        rows, status = run.timed(f"profile {label} step1 x{micro}", bench_cmd(
            run, "one-stage", "step1", preset=s.preset, vocab=s.vocab, seq_len=s.seq_len, micro=micro, ds=ds,
            extra=(*extra, "--profile", str(table))), 120 if "--compile" in extra else 70, end)
        row = {"label": label, "micro_batch": micro, **status, **(rows[-1] if rows else {})}
        if row.get("profile"):
            summarise([row], "bf16", 1)  # its MFU
            run.log(f"\n### profile {label}: kernel classes\n{profile_table(row['profile'])}\n"
                    + (table.read_text(encoding="utf-8") if table.is_file() else ""))
        found["rows"].append(row)
    bad = [r for r in found["rows"] if r["status"] not in ("ok", "skipped")]
    return {**found, "status": "partial" if bad else "ok"}


# ----------------------------------------------------------------------------------------------- outputs
def write_outputs(run: Run) -> None:
    run.figures["wall_s"] = time.monotonic() - run.start
    write_json(run.out / "gpu_run.json", run.figures)
    (run.out / "gpu_run.md").write_text(summary_markdown(run.figures), encoding="utf-8")


def summary_markdown(figures: dict[str, Any]) -> str:
    parts = figures["parts"]
    lines = [f"# gpu-run: `{figures['command']}`", "",
             f"Wall clock {figures.get('wall_s', 0):.0f} s of {figures['minutes'] * 60:.0f}; CUDA: {figures['cuda']}.",
             "", "| part | status | seconds | note |", "|---|---|---:|---|"]
    for name, part in parts.items():
        note = part.get("reason") or (part.get("error") or "").strip().splitlines()[-1:] or [""]
        lines.append(f"| {name} | {part['status']} | {part.get('part_seconds', 0):.0f} | "
                     f"{(note if isinstance(note, str) else note[0])[:160]} |")
    env = parts.get("env") or {}
    if env.get("status") == "ok":
        lines += ["", "## Environment", "", f"- device: {env.get('device')} ({env.get('nvidia_smi', 'no nvidia-smi')})",
                  f"- torch {env['torch']} (CUDA {env['torch_cuda']}), DeepSpeed {env['deepspeed']}, transformers "
                  f"{env['transformers']}, Python {env['python']}",
                  f"- matrix multiply {env['gemm']['n']}^3 {env['gemm']['dtype']}: {env['gemm']['tflops']:.1f} TFLOP/s",
                  f"- package imports: {'all ok' if env['imports']['ok'] else env['imports']['failed']}"]
    tests = parts.get("tests") or {}
    if tests.get("cases") is not None:
        lines += ["", "## Tests (`pytest -m gpu`)", "", f"counts: {tests['counts']}", ""]
        lines += [f"- {c['outcome']}: {c['test']} ({c['seconds']:.1f} s)"
                  + (f" - {c['detail'][:200]}" if c.get("detail") else "") for c in tests["cases"]]
    bench = parts.get("bench") or {}
    if bench.get("rows"):
        lines += ["", "## Benchmarks", "", f"Largest Step-1 micro-batch that trained: {bench.get('micro_batch')} "
                  f"({bench.get('max_batch', {}).get('stopped_by', 'not found')}); MFU against "
                  f"{bench.get('peak_tflops')} TFLOP/s ({bench.get('peak_source')}).", "",
                  "| run | stage | micro-batch | s/update | tokens/s | TFLOP/s | MFU | peak memory MB |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in bench["rows"]:
            if r["status"] != "ok":
                lines.append(f"| {r['label']} | {r['stage']} | {r.get('micro_batch', '')} | {r['status']}: "
                             f"{(r.get('reason') or r.get('error') or '').strip().splitlines()[-1:] or ''} | | | | |")
                continue
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "n/a"
            lines.append(f"| {r['label']} | {r['stage']} | {r['micro_batch']} | {r['median_s']:.4f} | "
                         f"{r['tokens_per_s']:,.0f} | {r['achieved_tflops']:.1f} | {mfu} | "
                         f"{r['peak_memory_mb']:,.0f} |")
        for name, ratio in bench.get("ratios", {}).items():
            lines.append(f"\n{name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                   for k, v in ratio.items()))
        hf = bench.get("hf") or {}
        if hf.get("status") == "ok":
            lines.append(f"\nOurs {hf['ours']['median_s']:.4f} s/update, HF RobertaForMaskedLM "
                         f"{hf['hf']['median_s']:.4f}: ours is {hf['speedup']:.2f}x as fast (micro-batch "
                         f"{hf.get('micro_batch')}, length {hf.get('seq_len')}, bf16 autocast).")
    profiled = [r for r in (parts.get("profile") or {}).get("rows", []) if r.get("profile")]
    if profiled:
        from ds_minimodel.train.kernel_classes import profile_table

        lines += ["", "## Profile (Step 1, torch.profiler over the timed updates)"]
        for r in profiled:
            mfu = f"{r['mfu']:.1%} MFU" if r.get("mfu") is not None else "MFU n/a"
            head = (f"{r['label']}, micro-batch {r['micro_batch']}: {r['median_s']:.4f} s/update, {mfu} (under the "
                    f"profiler); {r['profile']['basis']}:")
            lines += ["", head, "", profile_table(r["profile"])]
    ref = parts.get("reference") or {}
    if ref.get("plan"):
        pipeline = ref.get("pipeline") or {}
        sizing = ref.get("sizing") or {}
        origin = {"stored": f"the jobs of {sizing.get('from')}",
                  "scaled": f"the jobs of {sizing.get('from')} times this device's bench over that run's, by stage "
                            f"{json.dumps(sizing.get('scaled_by'))}",
                  "caps": "--tiny's caps", "bench": "this device's bench"}.get(ref.get("sized_by"))
        lines += ["", "## Reference run", "", *([f"Seconds per update from {origin}."] if origin else []),
                  f"Plan: {json.dumps(ref['plan'])}",
                  f"Pipeline: {pipeline.get('status')} in {pipeline.get('seconds', 0):.0f} s"
                  + (f", {pipeline['update_share']:.0%} of it in training updates ({pipeline['update_seconds']:.0f} s)."
                     if pipeline.get("update_share") is not None else ".")]
        for name, text in (ref.get("results") or {}).get("tables", {}).items():
            if name in ("table2", "diagnostics"):
                lines += ["", f"### {name}", "", "```", text.rstrip(), "```"]
        if ref.get("body"):
            lines += ["", f"Body (CPU reference shape): {json.dumps(ref['body'])}"]
    return "\n".join(lines) + "\n"


PART_FUNCTIONS: dict[str, Callable[[Run, float], dict[str, Any]]] = {
    "env": part_env, "tests": part_tests, "bench": part_bench, "profile": part_profile,
    "reference": part_reference}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="ds-minimodel gpu-run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where the JSON, the summary, the log and archives go")
    p.add_argument("--work", type=Path, help="scratch folder (data, runs); default: <out>-work beside --out")
    p.add_argument("--tiny", action="store_true", help="every part at a size of seconds (CPU, CI)")
    p.add_argument("--minutes", type=float, help="the whole command's wall clock (default 9.25; --tiny: 30)")
    p.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"a subset of {','.join(PARTS)}, run in that "
                   f"order (default {','.join(DEFAULT_PARTS)})")
    p.add_argument("--config", default="configs/reference_gpu.json", help="the reference run's pipeline config")
    p.add_argument("--tokenizers", type=Path, help="tokenizers trained before the run (scripts/gpu_prepare.py), used "
                   "for the languages whose corpus and settings they were trained with; default: .gpu/tokenizers where "
                   "it exists")
    p.add_argument("--english", help="the reference run's English corpus (.txt or .txt.xz); default: "
                   ".gpu/data/en.txt.xz where scripts/gpu_prepare.py put one, else the config's")
    p.add_argument("--languages", default="de", help="the reference run's target languages (comma-separated)")
    p.add_argument("--seeds", default="1", help="the reference run's finetuning seeds (comma-separated)")
    p.add_argument("--systems", help="the reference run's systems, a subset of the config's (default: all)")
    p.add_argument("--body", action="store_true", help="also train a body of the CPU reference's shape beside the "
                   "reference run, sharing the GPU (by default the reference run has it to itself)")
    p.add_argument("--replace", action="store_true", help="replace the results of an earlier gpu-run in --out "
                   "(its JSON, log, archives and body parts); without it such a folder is refused")
    p.add_argument("--relearn", action="store_true", help="keep the config's source-relearn control (one more "
                   "Step-2 launch)")
    p.add_argument("--prefetch-in", choices=("thread", "process"), help="where the reference run's MLM stages build "
                   "their micro-batches (default: the stages' own, a process on a GPU and a thread on a CPU; README, "
                   "Performance)")
    p.add_argument("--plan-from", type=Path, help="an earlier gpu-run's gpu_run.json: plan the reference run from "
                   "what its jobs took (their seconds per update and outside the updates); on the same kind of device "
                   "without timing the bench first, on another with each stage scaled by this device's bench of the "
                   "reference shapes over that run's")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    unknown = [name for name in parts if name not in PARTS]
    if unknown:
        p.error(f"--parts: unknown {', '.join(unknown)}; known: {', '.join(PARTS)}")
    if not all(k.strip().isdigit() for k in args.seeds.split(",")):
        p.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    english = args.english
    if english is None and (REPO / ".gpu/data/en.txt.xz").is_file():
        english = str(REPO / ".gpu/data/en.txt.xz")
    tokenizers = args.tokenizers
    if tokenizers is None and (REPO / ".gpu/tokenizers").is_dir():
        tokenizers = REPO / ".gpu/tokenizers"
    work = args.work or args.out.parent / f"{args.out.name}-work"
    spec = GpuRunSpec(out=args.out, work=work, parts=tuple(parts), tiny=args.tiny, config=Path(args.config),
                      english=english, tokenizers=tokenizers, languages=tuple(args.languages.split(",")),
                      seeds=tuple(int(k) for k in args.seeds.split(",")),
                      systems=tuple(args.systems.split(",")) if args.systems else None, body=args.body,
                      relearn=args.relearn, plan_from=args.plan_from,
                      prefetch_process=None if args.prefetch_in is None else args.prefetch_in == "process",
                      argv=tuple(argv))
    problem = argument_problem(spec) if "reference" in parts else None
    if problem:
        p.error(problem)
    sizes = TINY if args.tiny else GPU
    if args.minutes is not None:
        sizes = dataclasses.replace(sizes, minutes=args.minutes)
    for folder, mine in ((args.out, "gpu_run.json"), (work, WORK_MARK)):
        if folder.exists() and any(folder.iterdir()) and not (folder / mine).is_file():
            p.error(f"{folder}: not empty and not a gpu-run folder (no {mine}); name an empty or new folder")
    earlier = [path.name for path in (args.out / "gpu_run.json", *sorted(args.out.glob("body.tar.part-*")),
                                      args.out / "reference_gpu.tar.gz") if path.is_file()]
    if earlier and not args.replace:
        p.error(f"{args.out}: holds an earlier gpu-run's results ({', '.join(earlier[:3])}"
                f"{', ...' if len(earlier) > 3 else ''}); name a new --out, or pass --replace to replace them")
    for stale in [*args.out.glob("body.tar.part-*"), args.out / "reference_gpu.tar.gz", args.out / "gpu_run.log",
                  *(work / name for name in ("reference_gpu", "bodies", "data"))]:
        # A previous gpu-run's outputs (--replace) and scratch: its figures are in gpu_run.json, rewritten below.
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / WORK_MARK).write_text("scratch of ds-minimodel gpu-run: a later run with this folder replaces it\n")
    run = Run(spec, sizes)
    budgets = dict(sizes.budgets)
    if run.cuda:  # nvcc takes a minute: from the first second, beside the data (else a part's first process waits)
        run.spawn("fused_adam", fused_adam_cmd())
    try:
        if "reference" in parts:
            start_data(run)
    except Exception:  # the data of the reference part: that part fails, the others run
        run.figures["parts"]["reference"] = {"status": "failed", "error": traceback.format_exc()[-3000:]}
        parts = [name for name in parts if name != "reference"]
    for name in parts:
        budget = min(budgets.get(name, run.left()), run.left())
        started = time.monotonic()
        run.log(f"\n## part {name}: at most {budget:.0f} s ({run.left():.0f} s left in all)")
        try:
            found = PART_FUNCTIONS[name](run, budget) if budget > 5 else skipped("no time left")
            found.setdefault("status", "ok")
        except Exception:
            found = {"status": "failed", "error": traceback.format_exc()[-3000:]}
        found["part_seconds"] = time.monotonic() - started
        run.figures["parts"][name] = found
        write_outputs(run)
    for name in list(run.background):
        run.join(name, 5)
    write_outputs(run)
    print(f"\ngpu-run: {run.out / 'gpu_run.md'}")
    return 0

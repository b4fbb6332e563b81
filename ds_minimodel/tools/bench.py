"""Benchmarks whose figures go into BENCHMARKS.md. Nothing here is asserted in tests: timings are measured, not checked.

    python -m ds_minimodel bench stages --preset base --seq-len 128 --micro-batch 8     # every stage of the method
    python -m ds_minimodel bench hf --seq-len 128 --micro-batch 8                        # ours vs HF RoBERTa
    python -m ds_minimodel bench prepare --corpus demo_data/corpus/en.txt                # preprocessing MB/s
    python -m ds_minimodel bench loader                                                  # waits for data

``stages`` times one optimizer update (forward, backward, step, through the DeepSpeed engine of ``--ds-config``) of
Step 1 (plain and MiniJoint's dual head), Step 1b (MiniPost), Step 2 over each system's body and Step 3, each in its
own process so that peak memory is the stage's own. Per stage: seconds per update, tokens/s, achieved FLOP/s from
the paper's analytic count (``ds_minimodel.flops``), model-FLOPs utilisation against the device's peak, and peak
memory. It also prints the two ratios the performance targets are about: Step 2 over the 12-layer body against
the 4-layer mini-model, and the dual-head update against the plain one, each next to the analytic ratio.

Device peak: on a GPU the datasheet's dense figure for the precision (``GPU_PEAK_TFLOPS``); on a CPU, which has no
single published figure, the fp32 matrix-multiply throughput measured on this machine with the same threads (a
practical roofline, so CPU utilisation reads as "share of what a large GEMM achieves here").
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from ds_minimodel.cluster.launch import CHECKOUT
from ds_minimodel.config import ModelConfig, get_preset
from ds_minimodel.data.streams import PADDED
from ds_minimodel.data.tokenizer import IGNORE_INDEX, MASK_ID, NUM_SPECIAL
from ds_minimodel.ds_config import uses_bf16, uses_fp16
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.losses import mlm_step
from ds_minimodel.stages import steps
from ds_minimodel.systems import Depths, Step, system_names
from ds_minimodel.tools import bench_data
from ds_minimodel.tools.machine import GPU_PEAK_TFLOPS, BenchSpec, environment
from ds_minimodel.train.kernel_classes import kernel_table, start_profiler, summarise_profile

DUAL = "dual"
STAGES = (Step.PRETRAIN, f"{Step.PRETRAIN}-{DUAL}", Step.MINIPOST,
          *(f"{Step.ADAPT}-{name}" for name in system_names()), Step.FINETUNE)
"""The benchmark's cases: each training step (``systems.Step``), Step 1 also with MiniJoint's second head, Step 2
over each system's body."""


def synthetic_batch(batch: int, seq_len: int, vocab: int, mask_prob: float, generator: torch.Generator
                    ) -> dict[str, Any]:
    """Random tokens with a mask_prob share of targets, every block full as packed text mostly is: timing does not
    depend on the text."""
    ids = torch.randint(NUM_SPECIAL, vocab, (batch, seq_len), generator=generator)
    chosen = torch.rand(batch, seq_len, generator=generator) < mask_prob
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return {"input_ids": torch.where(chosen, torch.full_like(ids, MASK_ID), ids),
            "attention_mask": torch.ones(batch, seq_len, dtype=torch.bool), "labels": labels, PADDED: False}


def precision_of(ds_config: dict[str, Any]) -> str:
    if uses_bf16(ds_config):
        return "bf16"
    return "fp16" if uses_fp16(ds_config) else "fp32"


# ----------------------------------------------------------------------------------------------- one stage
def bench_case(stage: str) -> tuple[Step, str | None]:
    """A benchmark case's step, and its system (Step 2) or ``dual`` (Step 1 with MiniJoint's second head)."""
    step, _, what = stage.partition("-")
    return Step(step), what or None


def stage_setup(stage: str, args: BenchSpec) -> tuple[torch.nn.Module, Callable, float, ModelConfig]:
    """(model with the stage's trainable parameters, loss function, analytic FLOPs per update, config timed), built
    as the step's stage builds them (``stages.steps.fresh``)."""
    cfg = get_preset(args.preset).replace(vocab_size=args.vocab, num_layers=args.layers, dropout=0.0,
                                          attention_dropout=0.0)
    step, what = bench_case(stage)
    if what == DUAL:
        cfg = cfg.replace(aux_head_layer=args.mini_layers)
    # Step 2 over a randomly initialised primary: N = --mini-layers for every depth (BL_SMALL's, MiniJoint's
    # head, MiniPost's kept layers), as in the paper.
    depths = Depths(layers=cfg.num_layers, small=args.mini_layers, aux=args.mini_layers, keep=args.mini_layers,
                    new=args.new_layers)
    built = steps.fresh(step, cfg, depths, system=what if step == Step.ADAPT else None)
    analytic = built.flops_per_update(seq_len=args.seq_len, batch=args.micro_batch, mask_prob=args.mask_prob)
    if step != Step.FINETUNE:
        return built.model, built.loss_fn, analytic, built.cfg

    def loss(m: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # synthetic labels for the synthetic batch: the sequence head's 3 classes
        return built.loss_fn(m, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                                 "labels": batch["input_ids"][:, 0] % 3})
    return built.model, loss, analytic, built.cfg


def peak_tflops(precision: str, threads: int) -> tuple[float | None, str]:
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        for key, peaks in GPU_PEAK_TFLOPS.items():
            if all(part in name for part in key.split()):
                return peaks.get(precision), f"{key}{' SXM' if key == 'H100' else ''} datasheet dense {precision}"
        return None, f"no datasheet peak known for {name}"
    return cpu_gemm_tflops(threads), f"measured fp32 GEMM 2048^3, {threads} threads"


def cpu_gemm_tflops(threads: int, n: int = 2048, repeats: int = 5) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def stage_engine(stage: str, args: BenchSpec, *, micro_batch: int, steps: int
                 ) -> tuple[Any, torch.nn.Module, Callable, float, ModelConfig, list[torch.nn.Parameter]]:
    """``stage``'s model in a DeepSpeed engine of ``--ds-config`` on one rank, its batch ``micro_batch``, its
    schedule ``steps`` long: (engine, model, loss function, analytic FLOPs per update, config, trainable)."""
    import deepspeed

    from ds_minimodel.ds_config import fill_schedule, load_ds_config
    from ds_minimodel.train.distributed import init_distributed

    init_distributed()
    ds_config = fill_schedule(load_ds_config(args.ds_config), steps, 0.08)
    model, loss_fn, analytic, cfg = stage_setup(stage, args)
    model.activation_checkpointing = args.activation_checkpointing
    model.qkv_views = args.qkv_views
    trainable = [p for p in model.parameters() if p.requires_grad]
    config = {**ds_config, "train_batch_size": micro_batch, "train_micro_batch_size_per_gpu": micro_batch,
              "gradient_accumulation_steps": 1}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=trainable, config=config)
    return engine, model, loss_fn, analytic, cfg, trainable


def peak_memory_bytes(cuda: bool) -> int:
    """The GPU's largest allocation since its last reset, or on a CPU the process's peak resident memory."""
    return torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def time_stage(stage: str, args: BenchSpec) -> dict[str, Any]:
    """Time ``stage`` in this process through a DeepSpeed engine; every figure for one row of the table."""
    from ds_minimodel.train.engine import batch_to, compile_model

    engine, model, loss_fn, analytic, cfg, trainable = stage_engine(
        stage, args, micro_batch=args.micro_batch, steps=args.warmup + args.updates)
    if args.compile:
        compile_model(engine)
    generator = torch.Generator().manual_seed(0)
    batch = batch_to(synthetic_batch(args.micro_batch, args.seq_len, cfg.vocab_size, args.mask_prob, generator),
                     engine.device)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    profiler = None
    for i in range(args.warmup + args.updates):
        if i == args.warmup and args.profile:
            profiler = start_profiler(cuda)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.profiler.record_function("forward+loss"):
            loss = loss_fn(engine, batch)["loss"]
        with torch.profiler.record_function("backward"):
            engine.backward(loss)
        with torch.profiler.record_function("optimizer step"):
            engine.step()
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        args.profile.parent.mkdir(parents=True, exist_ok=True)
        args.profile.write_text(f"# {stage}: {args.updates} updates profiled, "
                                + kernel_table(profiler.key_averages(), cuda)
                                + "\n# the three phases of an update (inclusive times)\n"
                                + profiler.key_averages().table(sort_by="cpu_time_total", row_limit=8,
                                                                max_name_column_width=60))
    classes = summarise_profile(profiler.key_averages(), sum(times), cuda) if profiler is not None else None
    median = statistics.median(times)
    peak_bytes = peak_memory_bytes(cuda)
    engine.destroy()
    return {**({"profile": classes} if classes else {}), "stage": stage, "layers": cfg.num_layers,
            "trainable_parameters": sum(p.numel() for p in trainable),
            "parameters": sum(p.numel() for p in model.parameters()), "median_s": median, "min_s": min(times),
            "tokens_per_s": args.micro_batch * args.seq_len / median, "analytic_flops": analytic,
            "achieved_tflops": analytic / median / 1e12, "peak_memory_mb": peak_bytes / 2**20,
            "memory_kind": "GPU max allocated" if cuda else "process peak RSS",
            "activation_checkpointing": args.activation_checkpointing, "qkv_views": args.qkv_views,
            "compile": args.compile}


def release_device_memory() -> None:
    """Give the caching allocator's blocks back after a stage, so the next stage's peak is its own."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------- commands
def _stage_argv(args: BenchSpec) -> list[str]:
    return ["--preset", args.preset, "--vocab", str(args.vocab), "--layers", str(args.layers), "--seq-len",
            str(args.seq_len), "--micro-batch", str(args.micro_batch), "--mask-prob", str(args.mask_prob),
            "--mini-layers", str(args.mini_layers), "--new-layers", str(args.new_layers), "--warmup",
            str(args.warmup), "--updates", str(args.updates), "--ds-config", str(args.ds_config),
            *(["--activation-checkpointing"] if args.activation_checkpointing else []),
            *(["--qkv-views"] if args.qkv_views else []), *(["--compile"] if args.compile else [])]


def stages(names: list[str], args: BenchSpec) -> dict[str, Any]:
    """Each stage in a fresh process (its own peak memory, no engine state carried over), one after another."""
    rows = []
    for stage in names:
        cmd = [sys.executable, "-m", "ds_minimodel", "bench", "one-stage", stage, *_stage_argv(args)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"{stage}: {rows[-1]['median_s']:.4f} s/update", file=sys.stderr, flush=True)
    precision = precision_of(json.loads(Path(args.ds_config).read_text()))
    return {"benchmark": "stages", **environment(args), **summarise(rows, precision, torch.get_num_threads())}


def summarise(rows: list[dict[str, Any]], precision: str, threads: int) -> dict[str, Any]:
    """MFU for every row (against the device's peak for ``precision``) and the two ratios the performance targets
    are about, from whichever of their stages the rows hold: Step 2 over the 12-layer body against the 4-layer
    mini-model, and MiniJoint's dual-head update against the plain one, each next to the analytic ratio."""
    peak, peak_source = peak_tflops(precision, threads)
    for row in rows:
        row["mfu"] = row["achieved_tflops"] / peak if peak else None
    by_stage = {r["stage"]: r for r in rows}
    ratios = {}
    body, mini_body = f"{Step.ADAPT}-bl_base", f"{Step.ADAPT}-minijoint"
    if {body, mini_body} <= set(by_stage):
        full, mini = by_stage[body], by_stage[mini_body]
        measured, analytic = full["median_s"] / mini["median_s"], full["analytic_flops"] / mini["analytic_flops"]
        ratios["step2_body_over_mini"] = {"measured": measured, "analytic": analytic,
                                          "measured_over_analytic": measured / analytic, "target": ">= 0.90"}
    if {Step.PRETRAIN, f"{Step.PRETRAIN}-{DUAL}"} <= set(by_stage):
        plain, dual = by_stage[Step.PRETRAIN], by_stage[f"{Step.PRETRAIN}-{DUAL}"]
        measured, analytic = dual["median_s"] / plain["median_s"], dual["analytic_flops"] / plain["analytic_flops"]
        ratios["dual_head_over_plain"] = {"measured": measured, "analytic": analytic,
                                          "excess_over_analytic": measured / analytic - 1, "target": "<= 0.05"}
    return {"precision": precision, "peak_tflops": peak, "peak_source": peak_source, "rows": rows, "ratios": ratios}


def max_micro_batch(stage: str, args: BenchSpec) -> dict[str, Any]:
    """The largest micro-batch of ``stage`` that trains, found by trying: one engine, one full update
    (forward, backward, optimizer step) at each size, doubling from ``--start`` until the device runs out of memory
    or ``--max`` is reached. On a GPU the answer is the last size that ran; on a CPU nothing runs out in a useful
    time, so the search stops at ``--max``. Peak memory is recorded at every size tried."""
    from ds_minimodel.train.engine import batch_to

    # The engine does not look at the batch it is given: one engine serves every size tried.
    engine, _, loss_fn, _, cfg, _ = stage_engine(stage, args, micro_batch=args.start, steps=10)
    cuda = torch.cuda.is_available()
    generator = torch.Generator().manual_seed(0)
    tried, fits, size = [], None, args.start
    while size <= args.max:
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            batch = batch_to(synthetic_batch(size, args.seq_len, cfg.vocab_size, args.mask_prob, generator),
                             engine.device)
            engine.backward(loss_fn(engine, batch)["loss"])
            engine.step()
            if cuda:
                torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            tried.append({"micro_batch": size, "fits": False})
            break
        tried.append({"micro_batch": size, "fits": True, "peak_memory_mb": peak_memory_bytes(cuda) / 2**20})
        fits, size = size, size * 2
    total = torch.cuda.get_device_properties(0).total_memory / 2**20 if cuda else None
    return {"benchmark": "max-batch", "stage": stage, "micro_batch": fits, "tried": tried,
            "stopped_by": "out of memory" if tried and not tried[-1]["fits"] else f"--max {args.max}",
            "device_memory_mb": total, "seq_len": args.seq_len, "preset": args.preset, "ds_config": str(args.ds_config)}


def hf_comparison(args: BenchSpec) -> dict[str, Any]:
    """Ours vs ``transformers.RobertaForMaskedLM``: the same shapes and weights' shapes, the same plain PyTorch loop
    (forward, loss, backward, AdamW step), the same batch. Ours projects only the masked positions onto the
    vocabulary and uses ``scaled_dot_product_attention``; HF computes logits at every position."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    from ds_minimodel.train.engine import batch_to

    cfg = get_preset(args.preset).replace(vocab_size=args.vocab, dropout=0.0, attention_dropout=0.0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(0)
    batch = batch_to(synthetic_batch(args.micro_batch, args.seq_len, cfg.vocab_size, args.mask_prob, generator),
                     torch.device(device))
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=args.bf16)

    def ours_step(model: torch.nn.Module) -> torch.Tensor:
        with autocast:
            return mlm_step(model, batch)["loss"]

    def hf_step(model: torch.nn.Module) -> torch.Tensor:
        with autocast:
            return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].long(),
                         labels=batch["labels"]).loss

    hf_cfg = RobertaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                           num_attention_heads=cfg.num_heads, intermediate_size=cfg.ffn_size,
                           max_position_embeddings=cfg.max_positions + 2, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0, layer_norm_eps=cfg.layer_norm_eps, type_vocab_size=1,
                           attn_implementation=args.hf_attention)
    torch.manual_seed(0)
    results = {}
    for name, build, step in (("ours", lambda: MaskedLM(cfg), ours_step),
                              ("hf", lambda: RobertaForMaskedLM(hf_cfg), hf_step)):
        model = build().to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        times = []
        for i in range(args.warmup + args.updates):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step(model).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        results[name] = {"median_s": statistics.median(times), "min_s": min(times),
                         "parameters": sum(p.numel() for p in model.parameters())}
        del model, optimizer
    speedup = results["hf"]["median_s"] / results["ours"]["median_s"]
    return {"benchmark": "hf", **environment(args), "bf16_autocast": args.bf16,
            "hf_attention": args.hf_attention, **results, "speedup": speedup, "target": ">= 1.3"}


# ----------------------------------------------------------------------------------------------- output
def print_table(result: dict[str, Any]) -> None:
    if result["benchmark"] == "stages":
        print(f"| stage | layers | trainable params | s/update | tokens/s | analytic FLOPs/update | TFLOP/s | MFU | "
              f"peak memory ({result['rows'][0]['memory_kind']}) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in result["rows"]:
            mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
            print(f"| {r['stage']} | {r['layers']} | {r['trainable_parameters']:,} | {r['median_s']:.4f} | "
                  f"{r['tokens_per_s']:,.0f} | {r['analytic_flops']:.3e} | {r['achieved_tflops']:.3f} | {mfu} | "
                  f"{r['peak_memory_mb']:,.0f} MB |")
        print(f"\nMFU against {result['peak_tflops'] or 'n/a'} TFLOP/s ({result['peak_source']}).")
        for name, ratio in result["ratios"].items():
            print(f"{name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in ratio.items()))
    elif result["benchmark"] == "loader":
        stood_in = (f"{result['launches']} tensor operations" if result.get("launches")
                    else f"a sleep of {result['compute_ms']:.2f} ms")
        print(f"an update stood in for by {stood_in} ({result['stand_in_alone_ms']:.2f} ms alone), micro-batches of "
              f"{result['micro_batch']} x {result['seq_len']}")
        for r in result["runs"]:
            print(f"{r['builder']:>7} (prefetch {r['prefetch']}): waits {r['mean_wait_ms']:.3f} ms on average (max "
                  f"{r['max_wait_ms']:.3f}), stand-in {r['stand_in_ms']:.3f} ms, update {r['update_ms']:.3f} ms: "
                  f"{r['cost_ms']:+.3f} ms against the stand-in alone")
    elif result["benchmark"] == "hf":
        print(f"ours {result['ours']['median_s']:.4f} s/update, HF RobertaForMaskedLM {result['hf']['median_s']:.4f}"
              f" s/update: ours is {result['speedup']:.2f}x as fast (target {result['target']})")
    else:
        for r in result["runs"]:
            print(f"{r['workers']} worker(s): {r['mb_per_s']:.2f} MB/s, {r['mb_per_s_per_core']:.2f} MB/s per core")


def _shape_args(p: argparse.ArgumentParser, *, updates: int = 10) -> None:
    p.add_argument("--preset", default="base", help="model size preset (tiny, demo, base, small)")
    p.add_argument("--vocab", type=int, default=50_000, help="vocabulary size (paper: 50,000)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per forward pass")
    p.add_argument("--mask-prob", type=float, default=0.15, help="share of tokens masked")
    p.add_argument("--warmup", type=int, default=3, help="updates run before the timed ones")
    p.add_argument("--updates", type=int, default=updates, help="updates timed (the median is reported)")
    p.add_argument("--json", type=Path, help="also write the result here")


def _stage_model_args(p: argparse.ArgumentParser) -> None:
    """The depths and DeepSpeed file a stage is built with (``stage_setup``)."""
    p.add_argument("--layers", type=int, default=12, help="the primary's depth")
    p.add_argument("--mini-layers", type=int, default=Depths.aux, help="N: MiniJoint's head, the layers MiniPost keeps")
    p.add_argument("--new-layers", type=int, default=Depths.new, help="MiniPost's new layers")
    p.add_argument("--ds-config", type=Path, default=CHECKOUT / "ds_configs/cpu_fp32.json",
                   help="DeepSpeed JSON of the timed engine (precision, ZeRO stage, optimizer)")


def stage_list(value: str) -> list[str]:
    stages = value.split(",")
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES)}")
    return stages


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ds-minimodel bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_text in (("stages", "time every stage (each in its own process)"),
                            ("one-stage", "time one stage in this process (optionally under torch.profiler)")):
        s = sub.add_parser(name, help=help_text)
        if name == "one-stage":
            s.add_argument("stage", type=stage_list, help=f"one of {','.join(STAGES)}, or several separated by "
                           "commas: timed one after another in this process (a JSON line each; on a GPU each has "
                           "its own peak memory, on a CPU the process's peak so far)")
            s.add_argument("--profile", type=Path, help="write torch.profiler's table of the timed updates here")
        else:
            s.add_argument("--stages", type=stage_list, default=list(STAGES),
                           help=f"comma-separated subset of {','.join(STAGES)}")
        _shape_args(s)
        _stage_model_args(s)
        s.add_argument("--activation-checkpointing", action="store_true", help="recompute layers in the backward")
        s.add_argument("--qkv-views", action="store_true", help="attention reads Q, K and V as views of its "
                       "projection (one copy fewer in the backward)")
        s.add_argument("--compile", action="store_true", help="torch.compile the model (DeepSpeed engine.compile)")
    mb = sub.add_parser("max-batch", help="the largest micro-batch of a stage that trains (doubling until out of "
                        "memory), through the DeepSpeed engine")
    mb.add_argument("stage", choices=STAGES)
    _shape_args(mb)
    _stage_model_args(mb)
    mb.add_argument("--start", type=int, default=8, help="the first micro-batch tried")
    mb.add_argument("--max", type=int, default=1024, help="stop doubling here")
    h = sub.add_parser("hf", help="our MLM update vs transformers' RobertaForMaskedLM, plain PyTorch loop")
    _shape_args(h)
    h.add_argument("--bf16", action="store_true", help="bf16 autocast for both (GPU)")
    h.add_argument("--hf-attention", default="sdpa", choices=("sdpa", "eager"),
                   help="HF's attention implementation (default sdpa: the same fused kernel as ours)")
    ld = sub.add_parser("loader", help="the loop's wait for each micro-batch and its cost to the loop, built on "
                        "demand, on a thread and in a process")
    _shape_args(ld, updates=200)
    ld.set_defaults(seq_len=512, micro_batch=16)
    ld.add_argument("--data", type=Path, help="a prepared folder (default: the demo corpus, prepared in a temp dir)")
    ld.add_argument("--corpus", type=Path, default=CHECKOUT / "demo_data/corpus/en.txt",
                    help="text prepared when --data is not given")
    stand_in = ld.add_mutually_exclusive_group()
    stand_in.add_argument("--compute-ms", type=float,
                          help="compute per micro-batch stood in for by a sleep (default: analytic, H100 bf16 at "
                          "45%% MFU)")
    stand_in.add_argument("--launches", type=int,
                          help="stand in for an update by this many small tensor operations instead of a sleep: the "
                          "host's side of a GPU update, which launches kernels")
    pre = sub.add_parser("prepare", help="SentencePiece encoding into shards: MB/s with 1 worker and every core")
    pre.add_argument("--corpus", type=Path, default=CHECKOUT / "demo_data/corpus/en.txt", help="the text encoded")
    pre.add_argument("--vocab", type=int, default=8000, help="vocabulary of the tokenizer trained first")
    pre.add_argument("--repeats", type=int, default=3, help="encodings timed per worker count")
    pre.add_argument("--json", type=Path, help="also write the result here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = BenchSpec.from_args(args)  # the command line ends here
    if args.command == "one-stage":
        for stage in args.stage:
            print(json.dumps(time_stage(stage, spec)), flush=True)
            release_device_memory()
        return 0
    if args.command == "max-batch":
        result = max_micro_batch(args.stage, spec)
        print(json.dumps(result))
        return 0
    if args.command == "stages":
        result = stages(args.stages, spec)
    else:  # the data benchmarks live beside this module
        result = {"prepare": bench_data.preprocessing, "loader": bench_data.loader, "hf": hf_comparison}[
            args.command](spec)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    return 0

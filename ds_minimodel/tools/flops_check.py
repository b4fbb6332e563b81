"""Measured cross-check of the analytic FLOP counts (``ds_minimodel.flops``), and the ``ds-minimodel flops`` command.

``measure_*`` count FLOPs of the real ``MaskedLM`` (DeepSpeed's flops profiler for the forward,
``torch.utils.flop_counter`` for whole updates) and say term by term why they differ from the paper's formulas.

Command line (``ds-minimodel flops``):
    paper   the paper's figures, recomputed, with the relative difference
    model   per-update and total FLOPs and V100-days of each stage for a preset
    plan    cost and wall-clock of Steps 1, 1b and 2 of the four systems on a cluster
    check   the measured cross-check (CPU; seconds for ``tiny``, well under a minute for ``base`` at s=128)

torch and deepspeed are imported inside the measuring functions only, so that ``paper``/``plan``/``model`` start
instantly.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ds_minimodel.config import ModelConfig, get_preset
from ds_minimodel.errors import InputError, report
from ds_minimodel.flops import (
    EFLOP,
    GPU_TFLOPS,
    PAPER,
    PAPER_MINI_LAYERS,
    PAPER_NEW_LAYERS,
    PAPER_SMALL_LAYERS,
    SECONDS_PER_DAY,
    V100_DAY_FLOPS,
    adapt_flops,
    dual_head_pretrain_flops,
    forward_flops,
    layer_forward,
    matmul_flops,
    minipost_flops,
    paper_figures,
    per_update_flops,
    pretrain_flops,
    system_costs,
    to_gpu_days,
)
from ds_minimodel.systems import Depths, Step, get_system

# ---------------------------------------------------------------------------------------------------------------
# What A2 leaves out, analytically (forward, one batch).
# ---------------------------------------------------------------------------------------------------------------

def forward_extras(cfg: ModelConfig, *, seq_len: int, batch: int, n_masked: int) -> dict[str, float]:
    """FLOPs of the forward's non-matmul work that A2 omits, for ``batch`` sequences and ``n_masked`` targets.

    Conventions (per element): LayerNorm 5 (mean, variance, normalise, scale, shift) and GELU 1, as DeepSpeed's
    profiler counts them; a bias or residual add 1; softmax about 5 per attention score (scale, max-subtract, exp,
    sum, divide). Dropout masks are left out (they are free at inference).
    """
    h, f, l, V, a = cfg.hidden_size, cfg.ffn_size, cfg.num_layers, cfg.vocab_size, cfg.num_heads
    tokens = batch * seq_len
    return {
        # embedding LayerNorm + two per layer + the head's one over the masked tokens
        "layernorm": 5 * (tokens * h * (1 + 2 * l) + n_masked * h),
        # FFN activation in every layer + the head's dense activation
        "gelu": l * tokens * f + n_masked * h,
        # QKV, W_o, F_0, F_1 biases per layer; the head's dense and per-token output biases
        "biases": l * tokens * (3 * h + h + f + h) + n_masked * (h + V),
        # a x s x s scores per sequence per layer
        "softmax": 5 * l * batch * a * seq_len * seq_len,
        # token + position embeddings, two residual adds per layer
        "adds": tokens * h * (1 + 2 * l),
    }


PROFILER_COUNTED_EXTRAS = ("layernorm", "gelu")
"""The extras DeepSpeed's profiler counts: it charges F.linear 2 x MACs without the bias, sees SDPA as its two
matmuls only (no softmax), and does not see the Python ``+`` of residual and embedding adds."""


# ---------------------------------------------------------------------------------------------------------------
# Measured cross-check (imports torch / deepspeed lazily).
# ---------------------------------------------------------------------------------------------------------------

def _batch(cfg: ModelConfig, *, seq_len: int, batch: int, mask_prob: float, seed: int):
    """Random tokens and exactly round(p*s) masked positions per sequence, so p is exact: p_eff = k / s."""
    import torch

    if seq_len > cfg.max_positions:
        raise InputError(f"seq_len {seq_len} exceeds the preset's max_positions {cfg.max_positions}")
    gen = torch.Generator().manual_seed(seed)
    k = max(1, round(mask_prob * seq_len))
    ids = torch.randint(0, cfg.vocab_size, (batch, seq_len), generator=gen)
    masked = torch.zeros(batch, seq_len, dtype=torch.bool)
    for row in range(batch):
        masked[row, torch.randperm(seq_len, generator=gen)[:k]] = True
    targets = torch.randint(0, cfg.vocab_size, (batch * k,), generator=gen)
    return ids, masked, targets, k / seq_len


def _build(cfg: ModelConfig, seed: int):
    import torch

    from ds_minimodel.model.encoder import MaskedLM

    torch.manual_seed(seed)
    return MaskedLM(cfg).train()


def measure_forward(cfg: ModelConfig, *, seq_len: int, batch: int, mask_prob: float = 0.15, seed: int = 0,
                    model: Any = None) -> dict[str, Any]:
    """One forward of MaskedLM in train mode under DeepSpeed's flops profiler, next to A2 x batch."""
    from deepspeed.profiling.flops_profiler.profiler import FlopsProfiler, get_module_flops

    model = _build(cfg, seed) if model is None else model.train()
    model.masked_rows_multiple = 1  # the formula's rows only: training's bucket padding is not the method's compute
    ids, masked, _, p_eff = _batch(cfg, seq_len=seq_len, batch=batch, mask_prob=mask_prob, seed=seed)
    prof = FlopsProfiler(model)
    prof.start_profile()
    try:
        model(ids, masked_positions=masked)  # train mode, autograd on: as in a training step
        measured, macs = prof.get_total_flops(), prof.get_total_macs()
        attention_flops = get_module_flops(model.layers[0].attention)
    finally:
        prof.end_profile()
    h, s = cfg.hidden_size, seq_len
    a2 = batch * forward_flops(h=h, V=cfg.vocab_size, l=cfg.num_layers, s=s, p=p_eff, ffn=cfg.ffn_size)
    # The profiler charges F.scaled_dot_product_attention its QK^T and AV matmuls (4hs^2, no softmax) when it
    # patches it (deepspeed 0.19.8 with torch >= 2.0 does). Check on layer 1 that its attention block is QKV + W_o +
    # the core; if the core is missing (a profiler that does not patch SDPA), add it analytically and say so.
    linear_only = batch * 4 * matmul_flops(s, h, h)
    core = batch * (matmul_flops(s, h, s) + matmul_flops(s, s, h))
    sdpa_counted = attention_flops >= linear_only + core
    added_sdpa = 0 if sdpa_counted else cfg.num_layers * core
    extras = forward_extras(cfg, seq_len=s, batch=batch, n_masked=batch * round(p_eff * s))
    with_extras = a2 + sum(extras[k] for k in PROFILER_COUNTED_EXTRAS)
    return {"a2": a2, "measured": measured + added_sdpa, "profiler_flops": measured, "profiler_macs": macs,
            "sdpa_counted": sdpa_counted, "added_sdpa": added_sdpa, "extras": extras,
            "analytic_profiler_convention": with_extras, "p_eff": p_eff}


def _flop_counter(*args, **kwargs):
    """FlopCounterMode that also counts the CPU flash-attention kernel, which torch's table leaves out.

    On CPU, SDPA without dropout (eval, or attention_dropout = 0) runs ``_scaled_dot_product_flash_attention_for_cpu``,
    which FlopCounterMode counts as 0 FLOPs forward and backward. With dropout (training) it falls back to the math
    path, whose bmm's are counted. The backward formula follows torch's own for the GPU flash kernel: it recomputes
    the scores, 5 products instead of the math path's 4.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    def fwd(q, k, v, *_, out_shape=None, **__):
        b, heads, s_q, d = q
        return 2 * 2 * b * heads * s_q * k[2] * d

    def bwd(grad_out, q, k, v, *_, out_shape=None, **__):
        b, heads, s_q, d = q
        return 5 * 2 * b * heads * s_q * k[2] * d

    aten = torch.ops.aten
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: fwd,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd}
    return FlopCounterMode(*args, display=False, custom_mapping=mapping, **kwargs)


def measure_update(step: Step | str, cfg: ModelConfig, *, seq_len: int, batch: int, mask_prob: float = 0.15,
                   seed: int = 0, trainable_layers: int = PAPER_NEW_LAYERS, model: Any = None) -> dict[str, Any]:
    """Forward + backward of one update, counted by torch.utils.flop_counter (matmuls only), next to the formula.

    The model, its trainable parameters and its loss are the step's stage's (``stages.steps.fresh``):
    Step 1: ``cfg`` all trainable, vs A1 with U=1 (3 x A2 x batch); with ``cfg.aux_head_layer`` set, MiniJoint's
    two heads and the mean of their losses, vs A1 + 3 FLOP_lm. Step 2: ``cfg`` frozen for adaptation (the tied
    token rows and the output bias train), vs A3. Step 1b: ``cfg.num_layers - trainable_layers`` layers copied and
    frozen under ``trainable_layers`` new ones (``build_minipost``), vs A4. ``model``: a model of ``cfg`` to use
    instead of a fresh one (Steps 1 and 2).

    Returns the formula, the count, and "analytic_exact": the formula plus the terms it leaves out (see A3/A4's
    comments), which must equal the count exactly: matmul FLOPs are integers independent of the data.
    """
    import torch

    from ds_minimodel.data.special import IGNORE_INDEX
    from ds_minimodel.model.transforms import freeze_for_adaptation
    from ds_minimodel.stages import steps

    if step not in (Step.PRETRAIN, Step.MINIPOST, Step.ADAPT):
        raise InputError(f"unknown step {step!r}; the MLM steps: {Step.PRETRAIN}, {Step.MINIPOST}, {Step.ADAPT}")
    step = Step(step)
    if step == Step.MINIPOST and not 1 <= trainable_layers < cfg.num_layers:
        raise InputError(f"trainable_layers must be between 1 and {cfg.num_layers - 1}, got {trainable_layers}")
    depths = Depths(layers=cfg.num_layers, keep=cfg.num_layers - trainable_layers, new=trainable_layers)
    if model is not None and step == Step.MINIPOST:
        raise InputError(f"{Step.MINIPOST} builds its own model (build_minipost); pass no model")
    if model is None:
        built = steps.fresh(step, cfg, depths, system="bl_base", seed=seed)  # bl_base: Step 2 over all of cfg
        model = built.model.train()
    else:  # the given model, made trainable as the step's stage makes it
        built = steps.StepModel(step, model.train())
        if step == Step.ADAPT:
            freeze_for_adaptation(model)
        else:
            model.requires_grad_(True)
    model.masked_rows_multiple = 1  # as in measure_forward
    ids, masked, targets, p_eff = _batch(cfg, seq_len=seq_len, batch=batch, mask_prob=mask_prob, seed=seed)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[masked] = targets  # row-major, the order the model returns masked positions in
    training_batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool), "labels": labels}

    counter = _flop_counter()
    with counter:
        built.loss_fn(model, training_batch)["loss"].backward()  # the loss training takes (two heads: their mean)
    model.zero_grad(set_to_none=True)
    measured = counter.get_total_flops()
    ops = {str(op): n for op, n in counter.get_flop_counts().get("Global", {}).items()}
    # Train mode with dropout: CPU SDPA takes the math path (bmm's; backward = 2 x forward). Without dropout it
    # takes the flash kernel, whose backward we count at 2.5 x forward (recomputed scores), like torch does on GPU.
    math_attention = any("bmm" in op for op in ops)
    bwd_core_factor = 2.0 if math_attention else 2.5

    h, s, l, f = cfg.hidden_size, seq_len, cfg.num_layers, cfg.ffn_size
    shape = {"h": h, "V": cfg.vocab_size, "l": l, "s": s, "p": p_eff, "B": batch, "U": 1, "ffn": f}
    core = matmul_flops(s, h, s) + matmul_flops(s, s, h)  # 4hs^2, the attention core's forward
    if step == Step.PRETRAIN and cfg.aux_head_layer is None:
        formula = pretrain_flops(**shape)
        left_out = batch * l * (bwd_core_factor - 2) * core
    elif step == Step.PRETRAIN:
        formula = dual_head_pretrain_flops(**shape, aux_layer=cfg.aux_head_layer)
        left_out = batch * l * (bwd_core_factor - 2) * core
    elif step == Step.ADAPT:
        formula = adapt_flops(**shape)
        # A3 charges each frozen layer's backward 1 x forward; the weightless attention core costs 2 x (A3's
        # comment 4): + l x 4hs^2 per sequence (more with a recomputing kernel).
        left_out = batch * l * (bwd_core_factor - 1) * core
    else:
        formula = minipost_flops(**shape, l_t=trainable_layers)
        # A4 charges the lowest trainable layer 1 FLOP_layer; it costs 2 FLOP_layer minus the QKV input gradient
        # (A4's comment 5). And the trainable layers' attention cores at the kernel's backward factor.
        lowest = layer_forward(h=h, s=s, ffn=f) - 3 * matmul_flops(s, h, h)
        left_out = batch * (lowest + trainable_layers * (bwd_core_factor - 2) * core)
    return {"step": step, "formula": formula, "measured": measured, "analytic_exact": formula + left_out,
            "left_out": left_out, "math_attention": math_attention, "ops": ops, "p_eff": p_eff}


def run_check(cfg: ModelConfig, *, seq_len: int, batch: int, mask_prob: float = 0.15, seed: int = 0,
              trainable_layers: int = PAPER_NEW_LAYERS, mini_layers: int = PAPER_MINI_LAYERS,
              out=None) -> dict[str, Any]:
    """The measured cross-check of `check`: profiler forward, then one update of each stage. Prints a report."""
    out = sys.stdout if out is None else out
    if cfg.aux_head_layer is not None:
        cfg = cfg.replace(aux_head_layer=None)
    model = _build(cfg, seed)
    fwd = measure_forward(cfg, seq_len=seq_len, batch=batch, mask_prob=mask_prob, seed=seed, model=model)
    print(f"model: l={cfg.num_layers} h={cfg.hidden_size} V={cfg.vocab_size} ffn={cfg.ffn_size}; "
          f"s={seq_len} B={batch} p={fwd['p_eff']:.4f} (exactly round(p*s) masked per sequence)", file=out)
    print("\n(a) forward, DeepSpeed flops profiler, train mode", file=out)
    print(f"  A2 x B (matmuls only)                 {fwd['a2']:.6e}", file=out)
    print(f"  profiler MACs x 2                     {2 * fwd['profiler_macs']:.6e}   "
          f"(= A2 x B: MACs count the matmuls only)", file=out)
    print(f"  profiler FLOPs                        {fwd['profiler_flops']:.6e}   "
          f"(= 2 x MACs + LayerNorm 5/elt + GELU 1/elt)", file=out)
    if not fwd["sdpa_counted"]:
        print(f"  NOTE: the profiler did not count SDPA; added l x 4hs^2 x B = {fwd['added_sdpa']:.6e}", file=out)
    else:
        print("  SDPA: counted by the profiler as QK^T and AV (4hs^2 per layer per sequence), softmax not", file=out)
    ex = fwd["extras"]
    print(f"  A2 + LayerNorm + GELU (analytic)      {fwd['analytic_profiler_convention']:.6e}", file=out)
    print(f"  ratio measured / A2                   {fwd['measured'] / fwd['a2']:.6f}", file=out)
    print(f"  ratio measured / (A2 + LN + GELU)     {fwd['measured'] / fwd['analytic_profiler_convention']:.6f}",
          file=out)
    print("  omitted by A2 (analytic, FLOPs; * = also counted by the profiler):", file=out)
    for name, value in ex.items():
        star = "*" if name in PROFILER_COUNTED_EXTRAS else " "
        print(f"   {star} {name:10s} {value:.4e}  ({100 * value / fwd['a2']:.3f}% of A2)", file=out)
    total_extra = sum(ex.values())
    print(f"    all        {total_extra:.4e}  ({100 * total_extra / fwd['a2']:.3f}% of A2)", file=out)

    print("\n(b) one update, torch.utils.flop_counter (matmul FLOPs, forward + backward)", file=out)
    results = {"forward": fwd}
    mini_cfg = cfg.replace(num_layers=min(mini_layers, cfg.num_layers - 1) + trainable_layers)
    dual_cfg = cfg.replace(aux_head_layer=min(mini_layers, cfg.num_layers - 1))
    # named as the benchmark names its cases (tools.bench.STAGES)
    runs = [(Step.PRETRAIN, Step.PRETRAIN, cfg, model, "A1, U=1 (3 x A2 x B)"),
            (Step.ADAPT, Step.ADAPT, cfg, model, "A3, U=1"),
            (f"{Step.PRETRAIN}-dual", Step.PRETRAIN, dual_cfg, None, "A1 + 3 FLOP_lm x B"),
            (Step.MINIPOST, Step.MINIPOST, mini_cfg, None, f"A4, U=1, l={mini_cfg.num_layers}, l_t={trainable_layers}")]
    for name, step, step_cfg, step_model, label in runs:
        r = measure_update(step, step_cfg, seq_len=seq_len, batch=batch, mask_prob=mask_prob, seed=seed,
                           trainable_layers=trainable_layers, model=step_model)
        results[str(name)] = r
        print(f"  {name:13s} formula {label:32s} {r['formula']:.6e}  measured {r['measured']:.6e}  "
              f"measured/formula {r['measured'] / r['formula']:.4f}  "
              f"measured/(formula + left out) {r['measured'] / r['analytic_exact']:.6f}", file=out)
    print("  left out by the formulas (see the comments of adapt_flops and minipost_flops):", file=out)
    print(f"   {Step.ADAPT}:  a frozen layer's backward still runs the weightless attention core twice "
          f"(+l x 4hs^2 x B = {results[Step.ADAPT]['left_out']:.4e}); the embedding gradient is a scatter-add "
          "(no matmul); the only weight gradient is the tied output projection's", file=out)
    print(f"   {Step.MINIPOST}: the lowest trainable layer needs the error through its FFN, W_o and attention core for "
          f"its W_q, W_k, W_v gradients: 2 FLOP_layer - 6sh^2, not 1 FLOP_layer "
          f"(+{results[Step.MINIPOST]['left_out']:.4e})", file=out)
    if not results[Step.ADAPT]["math_attention"]:
        print("   attention ran the CPU flash kernel (no dropout): its backward is counted with recomputed scores",
              file=out)
    return results


# ---------------------------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------------------------

def _checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert`` the text and accept it when ``ok``, else say what was ``expected``."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


_positive_int = _checked(int, lambda v: v > 0, "a positive integer")
_positive_float = _checked(float, lambda v: 0 < v < float("inf"), "a positive number")
_probability = _checked(float, lambda v: 0.0 < v < 1.0, "a probability in (0, 1)")


def _add_shape_args(parser: argparse.ArgumentParser, *, seq_len: int | None = 512, batch: int = 2048) -> None:
    parser.add_argument("--preset", default="base", help="model preset (default: base)")
    parser.add_argument("--seq-len", type=_positive_int, default=seq_len, help=f"tokens per sequence ({seq_len})")
    parser.add_argument("--batch", type=_positive_int, default=batch, help=f"sequences per update ({batch})")
    parser.add_argument("--mask-prob", type=_probability, default=PAPER["p"], help="mask probability (0.15)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ds-minimodel flops", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("paper", help="the paper's figures, recomputed")

    model = sub.add_parser("model", help="per-update and total FLOPs of each stage for a preset")
    _add_shape_args(model)
    model.add_argument("--layers", type=_positive_int, help="override the preset's number of layers")
    model.add_argument("--vocab", type=_positive_int, help="override the preset's vocabulary size")
    model.add_argument("--updates", type=_positive_int, default=PAPER["U"], help="updates per stage (125000)")
    model.add_argument("--trainable-layers", type=_positive_int, default=PAPER_NEW_LAYERS,
                       help="minipost: new trainable layers on top (2)")

    plan = sub.add_parser("plan", help="cost and wall-clock of the four systems on a cluster")
    _add_shape_args(plan)
    plan.add_argument("--gpu", choices=("v100", "a100", "h100", "custom"), default="v100",
                      help="the GPU whose throughput turns FLOPs into days (custom: give --tflops)")
    plan.add_argument("--tflops", type=_positive_float,
                      help="sustained TFLOP/s per GPU (required for --gpu custom; overrides the default)")
    plan.add_argument("--gpus", type=_positive_int, default=1, help="GPUs in the cluster (1)")
    plan.add_argument("--languages", type=_positive_int, default=1, help="target languages to add (1)")
    plan.add_argument("--vocab", type=_positive_int, help="override the preset's vocabulary size")
    plan.add_argument("--updates", type=_positive_int, default=PAPER["U"], help="updates per stage (125000)")
    plan.add_argument("--small-layers", type=_positive_int, default=PAPER_SMALL_LAYERS, help="BL_SMALL depth (4)")
    plan.add_argument("--mini-layers", type=_positive_int, default=PAPER_MINI_LAYERS, help="N (4)")
    plan.add_argument("--new-layers", type=_positive_int, default=PAPER_NEW_LAYERS, help="MiniPost's new layers (2)")

    check = sub.add_parser("check", help="measured cross-check of the formulas (CPU)")
    check.add_argument("--preset", default="tiny", help="model preset (default: tiny)")
    check.add_argument("--seq-len", type=_positive_int, help="tokens per sequence (default: min(128, max_positions))")
    check.add_argument("--batch", type=_positive_int, default=1, help="sequences (1)")
    check.add_argument("--vocab", type=_positive_int, help="override the preset's vocabulary size (faster counts)")
    check.add_argument("--mask-prob", type=_probability, default=PAPER["p"], help="mask probability (0.15)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random weights and tokens counted")
    return parser


def _print_paper(out) -> None:
    rows = paper_figures()
    print(f"{'quantity':42s} {'unit':10s} {'computed':>10s} {'paper':>8s} {'rel.diff':>9s}  where", file=out)
    for r in rows:
        mark = "" if r.matches else "  MISMATCH"
        note = f"; {r.note}" if r.note else ""
        print(f"{r.quantity:42s} {r.unit:10s} {r.computed:10.4f} {r.paper:8.{r.decimals}f} "
              f"{100 * r.relative_difference:+8.2f}%  {r.where}{note}{mark}", file=out)
    print(f"settings: U={PAPER['U']:,} B={PAPER['B']:,} s={PAPER['s']} h={PAPER['h']} V={PAPER['V']:,} "
          f"p={PAPER['p']}; 1 V100-day = {V100_DAY_FLOPS / EFLOP} EFLOPs", file=out)


def _model_cfg(args) -> ModelConfig:
    cfg = get_preset(args.preset)
    changes = {}
    if getattr(args, "layers", None):
        changes["num_layers"] = args.layers
    if getattr(args, "vocab", None):
        changes["vocab_size"] = args.vocab
    if changes:
        # the aux head position may no longer fit a shallower model; the formulas don't depend on it
        cfg = cfg.replace(aux_head_layer=None, **changes)
    return cfg


def _print_model(args, out) -> None:
    cfg = _model_cfg(args)
    print(f"preset {args.preset}: l={cfg.num_layers} h={cfg.hidden_size} V={cfg.vocab_size} ffn={cfg.ffn_size}; "
          f"s={args.seq_len} B={args.batch} p={args.mask_prob} U={args.updates:,}", file=out)
    print(f"{'step':14s} {'FLOPs/update':>14s} {'total EFLOPs':>13s} {'V100-days':>10s}", file=out)
    rows = [(Step.PRETRAIN, cfg), (f"{Step.PRETRAIN}-dual", cfg.replace(aux_head_layer=cfg.num_layers)),
            (Step.MINIPOST, cfg), (Step.ADAPT, cfg)]
    for name, step_cfg in rows:
        step = Step(str(name).split("-")[0])
        one = per_update_flops(step, step_cfg, seq_len=args.seq_len, batch=args.batch, mask_prob=args.mask_prob,
                               trainable_layers=args.trainable_layers)
        total = one * args.updates
        print(f"{name:14s} {one:14.4e} {total / EFLOP:13.3f} {to_gpu_days(total):10.2f}", file=out)
    print(f"{Step.PRETRAIN}-dual: MiniJoint's second head at any layer N (cost independent of N); "
          f"{Step.MINIPOST}: this model as a mini-model whose top {args.trainable_layers} layers train", file=out)


def _print_plan(args, out) -> None:
    if args.gpu == "custom" and args.tflops is None:
        raise InputError("--gpu custom needs --tflops")
    tflops = args.tflops if args.tflops is not None else GPU_TFLOPS[args.gpu]
    source = ("given with --tflops" if args.tflops is not None else
              "the paper's figure (section 3)" if args.gpu == "v100" else
              "ASSUMPTION: ~30% of dense bf16 peak; override with --tflops")
    cfg = _model_cfg(args)
    if not 1 <= args.mini_layers < cfg.num_layers:
        raise InputError(f"--mini-layers must be between 1 and {cfg.num_layers - 1}, got {args.mini_layers}")
    costs = system_costs(h=cfg.hidden_size, V=cfg.vocab_size, s=args.seq_len, p=args.mask_prob, B=args.batch,
                         U=args.updates, layers=cfg.num_layers, small_layers=args.small_layers,
                         mini_layers=args.mini_layers, new_layers=args.new_layers, ffn=cfg.ffn_size)
    cluster = tflops * 1e12 * args.gpus  # FLOP/s, assuming perfect scaling across GPUs
    print(f"cluster: {args.gpus} x {args.gpu} at {tflops:g} TFLOP/s sustained per GPU ({source}); "
          f"perfect scaling assumed", file=out)
    print(f"model: l={cfg.num_layers} h={cfg.hidden_size} V={cfg.vocab_size}; s={args.seq_len} B={args.batch} "
          f"p={args.mask_prob} U={args.updates:,} per stage; N={args.mini_layers}, MiniPost +{args.new_layers} layers; "
          f"{args.languages} language(s)", file=out)
    print(f"{'system':10s} {'step':16s} {'EFLOPs':>9s} {'V100-days':>10s} {'GPU-days':>9s} "
          f"{'wall days':>10s} {'wall hours':>11s}", file=out)

    def row(system: str, step: str, flops: float) -> None:
        seconds = flops / cluster
        print(f"{system:10s} {step:16s} {flops / EFLOP:9.2f} {to_gpu_days(flops):10.2f} "
              f"{to_gpu_days(flops, tflops):9.2f} {seconds / SECONDS_PER_DAY:10.2f} {seconds / 3600:11.1f}",
              file=out)

    for name, c in costs.items():
        system = get_system(name).paper_name
        row(system, "Step 1", c["step1"])
        if c["step1b"]:
            row(system, "Step 1b", c["step1b"])
        row(system, "Step 2 /language", c["step2"])
        row(system, f"total, {args.languages} lang", c["step1"] + c["step1b"] + args.languages * c["step2"])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "paper":
            _print_paper(sys.stdout)
        elif args.command == "model":
            _print_model(args, sys.stdout)
        elif args.command == "plan":
            _print_plan(args, sys.stdout)
        else:
            cfg = _model_cfg(args)
            seq_len = args.seq_len if args.seq_len is not None else min(128, cfg.max_positions)
            run_check(cfg, seq_len=seq_len, batch=args.batch, mask_prob=args.mask_prob, seed=args.seed)
    except InputError as err:
        return report(err)
    return 0

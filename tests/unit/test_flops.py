"""Unit tests of ds_minimodel.flops: the paper's figures, closed forms vs sums, the CLI, and the measured cross-check.

Tolerances:
- Paper figures: the computed value rounded to the decimals the paper prints must equal the printed figure (one
  exception, documented in `paper_figures`: the section-3 10,000-update example, which the paper took as 2 x 1.17).
- Closed forms vs sums, hand-derived values: 1e-12 relative (floating-point reassociation only).
- Measured counts: matmul FLOPs are integers that do not depend on the data, so the formula plus the terms it
  leaves out must equal the count EXACTLY; the gap between the bare formula and the count is asserted to be those
  terms and is bounded by its analytic size.
"""
from __future__ import annotations

import math

import pytest

from ds_minimodel import flops
from ds_minimodel.config import get_preset
from ds_minimodel.errors import InputError
from ds_minimodel.systems import SYSTEMS, Step
from ds_minimodel.tools import flops_check

PAPER = flops.PAPER
REL = 1e-12

# --- the paper's figures -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("figure", flops.paper_figures(), ids=lambda f: f.quantity)
def test_paper_figure_is_reproduced_to_the_printed_precision(figure: flops.PaperFigure) -> None:
    assert figure.matches, (figure.quantity, figure.computed, figure.paper)
    if figure.ulps == 0:
        assert round(figure.computed, figure.decimals) == pytest.approx(figure.paper, abs=1e-9)
    # half a unit of the last printed decimal, plus the allowed ulps
    assert abs(figure.computed - figure.paper) < (figure.ulps + 0.5) * 10.0 ** -figure.decimals


def test_every_figure_named_in_the_paper_is_in_the_table() -> None:
    printed = sorted(f.paper for f in flops.paper_figures())
    for value in (78.8, 29.3, 54.1, 21.1, 21.6, 20.9, 11.3, 8.1, 30.4, 32.2):
        assert value in printed


def test_step1b_reading_is_the_six_layer_mini_model_with_two_new_layers() -> None:
    value = flops.minipost_flops(l=6, l_t=2, **PAPER) / flops.EFLOP
    assert round(value, 1) == 21.6
    # the 4-layer mini-model with 2 new ones read as l = 4 would not give it
    assert round(flops.minipost_flops(l=4, l_t=2, **PAPER) / flops.EFLOP, 1) != 21.6


def test_dual_head_reading_charges_the_second_head_forward_and_backward() -> None:
    plain = flops.pretrain_flops(l=12, **PAPER)
    lm = flops.lm_head_forward(h=PAPER["h"], V=PAPER["V"], s=PAPER["s"], p=PAPER["p"]) * PAPER["B"] * PAPER["U"]
    assert flops.dual_head_pretrain_flops(l=12, aux_layer=4, **PAPER) == pytest.approx(plain + 3 * lm, rel=REL)
    assert round(flops.to_gpu_days(plain + 3 * lm), 1) == 32.2
    # other readings miss the footnote's 32.2
    assert round(flops.to_gpu_days(plain + 2 * lm), 1) == 31.6
    assert round(flops.to_gpu_days(plain + lm), 1) == 31.0
    # the position of the second head does not matter
    assert flops.dual_head_pretrain_flops(l=12, aux_layer=2, **PAPER) == flops.dual_head_pretrain_flops(
        l=12, aux_layer=10, **PAPER)


# --- formulas --------------------------------------------------------------------------------------------------------

SHAPES = [dict(h=768, V=50_000, s=512, p=0.15, B=2048, U=125_000, l=12),
          dict(h=64, V=1000, s=128, p=0.2, B=3, U=7, l=4),
          dict(h=1024, V=250_000, s=256, p=0.15, B=8, U=1, l=24)]


@pytest.mark.parametrize("shape", SHAPES)
def test_closed_forms_equal_the_sums(shape: dict) -> None:
    assert flops.pretrain_flops(**shape) == pytest.approx(flops.pretrain_flops_closed_form(**shape), rel=REL)
    assert flops.adapt_flops(**shape) == pytest.approx(flops.adapt_flops_closed_form(**shape), rel=REL)


def test_building_blocks_match_the_appendix() -> None:
    h, s, V, p = 768, 512, 50_000, 0.15
    assert flops.layer_forward(h=h, s=s) == 24 * s * h**2 + 4 * h * s**2
    assert flops.layer_forward(h=h, s=s, ffn=4 * h) == flops.layer_forward(h=h, s=s)
    assert flops.outproj_forward(h=h, V=V, s=s) == 2 * s * h * V
    assert flops.lm_head_forward(h=h, V=V, s=s, p=p) == pytest.approx(p * (2 * s * h**2 + 2 * s * h * V), rel=REL)
    a2 = flops.forward_flops(h=h, V=V, l=12, s=s, p=p)
    assert a2 == pytest.approx(12 * (24 * s * h**2 + 4 * h * s**2) + p * (2 * s * h**2 + 2 * s * h * V), rel=REL)
    assert flops.pretrain_flops(h=h, V=V, l=12, s=s, p=p, B=5, U=3) == pytest.approx(3 * a2 * 5 * 3, rel=REL)
    a4 = flops.minipost_flops(h=h, V=V, l=6, l_t=2, s=s, p=p, B=1, U=1)
    assert a4 == pytest.approx((6 + 4 - 1) * (24 * s * h**2 + 4 * h * s**2) + 4 * p * s * h**2 + 4 * p * s * h * V,
                               rel=REL)


def test_gpu_days() -> None:
    assert flops.V100_DAY_FLOPS == pytest.approx(2.592e18, rel=REL)
    assert flops.to_gpu_days(2.592e18) == pytest.approx(1.0, rel=REL)
    assert flops.to_gpu_days(2.592e18, tflops=60.0) == pytest.approx(0.5, rel=REL)
    with pytest.raises(InputError):
        flops.to_gpu_days(1e18, tflops=0)


def test_per_update_flops_derives_the_shape_from_a_config() -> None:
    base = get_preset("base")
    kw = dict(seq_len=512, batch=2048, mask_prob=0.15)
    U = PAPER["U"]
    assert flops.per_update_flops(Step.PRETRAIN, base, **kw) * U == pytest.approx(flops.pretrain_flops(l=12, **PAPER))
    small = get_preset("small")
    assert flops.per_update_flops(Step.ADAPT, small, **kw) * U / flops.EFLOP == pytest.approx(21.07, abs=5e-3)
    assert flops.per_update_flops(Step.MINIPOST, base.replace(num_layers=6), **kw) * U / flops.EFLOP == pytest.approx(
        21.62, abs=5e-3)
    dual = flops.per_update_flops(Step.PRETRAIN, base.replace(aux_head_layer=4), **kw)  # the second head
    assert flops.to_gpu_days(dual * U) == pytest.approx(32.18, abs=5e-3)
    assert flops.total_flops(Step.ADAPT, base, updates=10, **kw) == pytest.approx(
        10 * flops.per_update_flops(Step.ADAPT, base, **kw), rel=REL)
    assert flops.per_update_flops("step3", base, **kw) == flops.finetune_per_update(base, seq_len=512, batch=2048)


@pytest.mark.parametrize("call", [
    lambda: flops.per_update_flops("finetune", get_preset("tiny"), seq_len=8, batch=1, mask_prob=0.15),
    lambda: flops.per_update_flops(Step.TRANSFER, get_preset("tiny"), seq_len=8, batch=1, mask_prob=0.15),
    lambda: flops.per_update_flops(Step.ADAPT, get_preset("tiny"), seq_len=0, batch=1, mask_prob=0.15),
    lambda: flops.per_update_flops(Step.ADAPT, get_preset("tiny"), seq_len=8, batch=1, mask_prob=1.5),
    lambda: flops.per_update_flops(Step.MINIPOST, get_preset("tiny"), seq_len=8, batch=1, mask_prob=0.15,
                                   trainable_layers=13),
    lambda: flops.dual_head_pretrain_flops(l=12, aux_layer=13, **PAPER),
])
def test_bad_inputs_are_input_errors(call) -> None:
    with pytest.raises(InputError):
        call()


# --- command line ----------------------------------------------------------------------------------------------------


def test_cli_paper_prints_every_figure_without_mismatch(capsys) -> None:
    assert flops_check.main(["paper"]) == 0
    out = capsys.readouterr().out
    assert "MISMATCH" not in out
    for text in ("78.8165", "54.0543", "21.6205", "30.4076", "32.1821", "8.1284", "20.8543", "11.3099"):
        assert text in out


def _plan_rows(out: str) -> dict[tuple[str, str], list[float]]:
    rows = {}
    for line in out.splitlines():
        for system in [s.paper_name for s in SYSTEMS.values()]:
            if line.startswith(system + " "):
                step, numbers = line[len(system):].strip()[:16].strip(), line.split()[-5:]
                rows[(system, step)] = [float(x) for x in numbers]
    return rows


def test_cli_plan_on_the_papers_v100(capsys) -> None:
    assert flops_check.main(["plan", "--gpu", "v100", "--gpus", "1"]) == 0
    rows = _plan_rows(capsys.readouterr().out)
    # EFLOPs, V100-days, GPU-days, wall days, wall hours
    assert rows[("BL_BASE", "Step 2 /language")][:2] == [54.05, 20.85]
    assert rows[("MiniJoint", "Step 1")][:2] == [83.42, 32.18]
    assert rows[("MiniPost", "Step 1b")][:2] == [21.62, 8.34]
    assert rows[("MiniPost", "Step 2 /language")][1] == 11.31
    assert rows[("BL_SMALL", "Step 2 /language")][1] == 8.13
    # one V100 at 30 TFLOP/s: GPU-days = V100-days = wall days
    assert rows[("BL_BASE", "Step 1")][2] == rows[("BL_BASE", "Step 1")][3] == 30.41


def test_cli_plan_scales_with_gpus_and_languages(capsys) -> None:
    assert flops_check.main(["plan", "--gpu", "custom", "--tflops", "60", "--gpus", "4", "--languages", "2"]) == 0
    out = capsys.readouterr().out
    rows = _plan_rows(out)
    step2 = rows[("BL_BASE", "Step 2 /language")]
    assert step2[2] == pytest.approx(20.85 / 2, abs=0.01)  # GPU-days at 60 TFLOP/s
    assert step2[3] == pytest.approx(20.85 / 8, abs=0.01)  # wall days on 4 GPUs
    assert step2[4] == pytest.approx(20.8543 / 8 * 24, abs=0.05)
    assert rows[("MiniPost", "total, 2 lang")][0] == pytest.approx(78.82 + 21.62 + 2 * 29.32, abs=0.02)
    assert flops_check.main(["plan", "--gpu", "h100"]) == 0
    assert "ASSUMPTION" in capsys.readouterr().out


def test_cli_model_prints_each_stage(capsys) -> None:
    assert flops_check.main(["model", "--preset", "base"]) == 0
    out = capsys.readouterr().out
    assert "78.816" in out and "54.054" in out and "83.416" in out
    assert flops_check.main(["model", "--preset", "base", "--layers", "4"]) == 0
    assert "21.069" in capsys.readouterr().out


def test_cli_bad_arguments_exit_2(capsys) -> None:
    assert flops_check.main(["plan", "--gpu", "custom"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert flops_check.main(["model", "--preset", "huge"]) == 2
    assert flops_check.main(["check", "--preset", "tiny", "--seq-len", "4096"]) == 2
    for argv in (["plan", "--gpus", "0"], ["plan", "--gpu", "tpu"], ["model", "--mask-prob", "1.5"], []):
        with pytest.raises(SystemExit) as exc:
            flops_check.main(argv)
        assert exc.value.code == 2


# --- measured cross-check --------------------------------------------------------------------------------------------

TINY = get_preset("tiny").replace(vocab_size=1000)  # the 50k vocabulary only slows the count down


def test_profiler_forward_is_a2_plus_layernorm_and_gelu() -> None:
    r = flops_check.measure_forward(TINY, seq_len=32, batch=2)
    assert r["sdpa_counted"]  # deepspeed 0.19.8 patches F.scaled_dot_product_attention
    assert 2 * r["profiler_macs"] == pytest.approx(r["a2"], rel=REL)  # MACs: the matmuls A2 counts, halved
    assert r["measured"] == pytest.approx(r["analytic_profiler_convention"], rel=REL)
    # A2 alone is low by exactly the LayerNorm and GELU terms; everything A2 omits is a few % of it at this shape
    gap = r["measured"] / r["a2"] - 1
    assert gap == pytest.approx((r["extras"]["layernorm"] + r["extras"]["gelu"]) / r["a2"], rel=1e-9)
    assert 0 < gap < sum(r["extras"].values()) / r["a2"] < 0.05


@pytest.mark.parametrize("stage", ["step1", "step1-dual", "step2", "step1b"])
def test_measured_update_equals_formula_plus_its_omissions(stage: str) -> None:
    cfg = {"step1b": TINY.replace(num_layers=6), "step1-dual": TINY.replace(aux_head_layer=2)}.get(stage, TINY)
    r = flops_check.measure_update(stage.removesuffix("-dual"), cfg, seq_len=32, batch=2)
    assert r["math_attention"]  # train mode with dropout: CPU SDPA runs the math path
    assert r["measured"] == pytest.approx(r["analytic_exact"], rel=REL)
    h, s, l = cfg.hidden_size, 32, cfg.num_layers
    if stage in ("step1", "step1-dual"):
        assert r["measured"] == pytest.approx(r["formula"], rel=REL)  # A1 (+3 FLOP_lm) is exact for matmuls
    elif stage == "step2":
        assert r["measured"] - r["formula"] == pytest.approx(2 * l * 4 * h * s**2, rel=REL)
    else:
        assert r["measured"] - r["formula"] == pytest.approx(2 * (18 * s * h**2 + 4 * h * s**2), rel=REL)


def test_flash_attention_kernel_is_counted_too() -> None:
    # Without dropout, CPU SDPA runs the flash kernel that FlopCounterMode alone would count as 0 FLOPs.
    cfg = TINY.replace(attention_dropout=0.0)
    r = flops_check.measure_update(Step.ADAPT, cfg, seq_len=32, batch=1)
    assert not r["math_attention"]
    assert any("flash" in op and n > 0 for op, n in r["ops"].items())
    assert r["measured"] == pytest.approx(r["analytic_exact"], rel=REL)


@pytest.mark.slow
def test_check_on_the_base_preset_at_a_short_sequence() -> None:
    # RoBERTa-base, s=128, B=1, about 15 s on 2 cores. The Step-2 update is A3 plus the left-out attention-core
    # backward, l x 4hs^2, exactly; that term is at most s / (12h + 2s) = 1.4% of A3 (less with the head): < 2%.
    base = get_preset("base")
    model = flops_check._build(base, 0)
    fwd = flops_check.measure_forward(base, seq_len=128, batch=1, model=model)
    assert fwd["measured"] == pytest.approx(fwd["analytic_profiler_convention"], rel=REL)
    assert fwd["measured"] / fwd["a2"] == pytest.approx(1.0, abs=2e-3)
    r = flops_check.measure_update(Step.ADAPT, base, seq_len=128, batch=1, model=model)
    assert r["measured"] == pytest.approx(r["analytic_exact"], rel=REL)
    assert 1.0 < r["measured"] / r["formula"] < 1.02


def test_cli_check_runs_and_reports_ratios(capsys) -> None:
    assert flops_check.main(["check", "--preset", "tiny", "--vocab", "1000", "--seq-len", "32", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "measured / (A2 + LN + GELU)     1.000000" in out
    assert out.count("measured/(formula + left out) 1.000000") == 4
    assert math.isclose(float(out.split("ratio measured / A2")[1].split()[0]), 1.0, abs_tol=0.05)

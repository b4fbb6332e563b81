"""fp16 with dynamic loss scaling on the real run_pretrain.py and DeepSpeed's ZeRO fp16 optimizer: overflowing
updates are skipped, counted and leave the weights alone; a collapsed loss scale stops the run with one clear line.

On CPU the run goes through ``fp16_on_cpu.py`` (DeepSpeed's fp16 device check lifted, the rest of its fp16 path
unchanged); on a CUDA machine the same tests run natively with FusedAdam (marked ``gpu``)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from ds_minimodel.train import checkpoint
from tests.integration.conftest import run_cmd

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def fp16_config(tmp_path: Path, device: str, **fp16: float) -> Path:
    config = {
        "train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1_000_000,
        # On CPU a torch AdamW (DeepSpeed's fused CPU Adam would compile for a minute); FusedAdam on a GPU.
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, **({"torch_adam": True} if device == "cpu" else {})}},
        "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "min_loss_scale": 1, **fp16},
        "zero_optimization": {"stage": 1},
    }
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return path


def pretrain(device: str, data: Path, out: Path, ds: Path, steps: int, *extra: str):
    entry = ["run_pretrain.py"] if device == "cuda" else ["tests/integration/fp16_on_cpu.py", "run_pretrain.py"]
    return run_cmd([sys.executable, *entry, "--variant", "base", "--preset", "tiny", "--model-config",
                    "tests/fixtures/two_layers.json", "--seq-len", "64",
                    "--ds-config", str(ds), "--data", str(data), "--out", str(out), "--steps", str(steps),
                    "--log-every", "1", *extra], check=False, env={"DS_ACCELERATOR": device})


@pytest.mark.parametrize("device", DEVICES)
def test_overflowing_updates_are_skipped_counted_and_leave_the_weights_alone(en_data, tmp_path, device):
    # A loss scale of 2^30 overflows fp16 gradients; the scaler halves it after each overflow until they fit.
    ds = fp16_config(tmp_path, device, initial_scale_power=30, hysteresis=1)
    out = tmp_path / "run"
    proc = pretrain(device, en_data, out, ds, 30, "--save-every", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    scales = [2.0**30] + [r["loss_scale"] for r in rows]
    skipped = [int(r["skipped_steps"]) for r in rows]
    # Each update either overflowed (counted, scale halved) or did not (count and scale unchanged).
    for i, row in enumerate(rows):
        overflowed = skipped[i] - (skipped[i - 1] if i else 0)
        assert overflowed in (0, 1)
        assert scales[i + 1] == (scales[i] / 2 if overflowed else scales[i]), f"update {row['step']}"
    total = skipped[-1]
    assert 0 < total < 30, skipped
    assert f"the loss scaler skipped {total} updates" in proc.stdout
    assert json.loads((out / "summary.json").read_text())["skipped_steps"] == total  # the run's closing summary
    # The skipped updates (the first `total`) changed nothing; the ones after them trained.
    ckpts = out / "checkpoints"
    first, last_skipped = (checkpoint.load_weights(ckpts / checkpoint.tag_for(s)) for s in (1, total))
    assert all(torch.equal(first[name], last_skipped[name]) for name in first)
    final = checkpoint.load_weights(ckpts / checkpoint.tag_for(30))
    assert all(torch.isfinite(w).all() for w in final.values())
    assert any(not torch.equal(first[name], final[name]) for name in first)
    losses = [r["loss"] for r in rows]
    assert sum(losses[-5:]) / 5 < sum(losses[:total]) / total - 0.2


@pytest.mark.parametrize("device", DEVICES)
def test_a_collapsed_loss_scale_stops_with_a_clear_error_and_the_last_good_checkpoint(en_data, tmp_path, device):
    # DeepSpeed's ZeRO scaler raises a bare Exception once gradients overflow at the minimum scale with its
    # hysteresis used up (2 here, the paper recipe's setting; measured the same with 1).
    ds = fp16_config(tmp_path, device, initial_scale_power=4, hysteresis=2)
    config = json.loads(ds.read_text())
    config["optimizer"]["params"]["lr"] = 1e30  # the first update makes the weights inf: every gradient after is NaN
    ds.write_text(json.dumps(config))
    out = tmp_path / "run"
    proc = pretrain(device, en_data, out, ds, 40, "--save-every", "1")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {out}: [step1-base] the fp16 loss scale collapsed"), error
    assert "minimum (1, fp16.min_loss_scale)" in error
    bad_update = int(error.split("the gradients of update ")[1].split()[0])
    assert bad_update < 40
    last = checkpoint.latest_checkpoint(out)
    assert checkpoint.load_meta(last).step == bad_update - 1 and f"the last good checkpoint is {last}." in error
    assert checkpoint.verify(last) is None and checkpoint.load_weights(last)

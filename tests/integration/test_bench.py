"""Smoke runs of the benchmark command on a tiny configuration: it runs and reports every figure. No timing is
asserted (the figures are for BENCHMARKS.md, measured on a quiet machine). The stage timings, the micro-batch search
and the Hugging Face comparison run in ``test_gpu_run.py``, as parts of the GPU command at its tiny size."""
from __future__ import annotations

import json
import sys

import pytest

from tests.integration.conftest import DEMO, run_cmd

pytestmark = pytest.mark.slow


def test_preprocessing_throughput(tmp_path):
    corpus = tmp_path / "small.txt"
    corpus.write_text("".join((DEMO / "corpus/en.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:3000]))
    run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "prepare", "--corpus", str(corpus), "--vocab", "300",
             "--repeats", "1", "--json", str(tmp_path / "prepare.json")])
    runs = json.loads((tmp_path / "prepare.json").read_text())["runs"]
    assert runs[0]["workers"] == 1 and all(r["mb_per_s"] > 0 for r in runs)


def test_loader_reports_the_wait_for_data_and_its_cost_built_on_demand_on_a_thread_and_in_a_process(tmp_path, en_data):
    out = tmp_path / "loader.json"
    shape = ["--data", str(en_data), "--seq-len", "64", "--micro-batch", "4", "--warmup", "1", "--updates", "5"]
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "loader", *shape, "--compute-ms", "2",
                    "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["compute_ms"] == 2 and [(r["builder"], r["prefetch"]) for r in result["runs"]] == [
        ("demand", 0), ("thread", 2), ("process", 2)]
    for run in result["runs"]:
        assert 0 < run["mean_wait_ms"] <= run["max_wait_ms"] and 0 < run["stall_share"] < 1
        assert run["update_ms"] == pytest.approx(run["mean_wait_ms"] + run["stand_in_ms"])
        assert run["cost_ms"] == pytest.approx(run["update_ms"] - result["stand_in_alone_ms"])
    assert result["runs"][0]["tokens_per_s_when_built_on_demand"] > 0 and "process (prefetch 2): waits" in proc.stdout
    # --launches: the stand-in is tensor operations, timed alone first, instead of a sleep
    run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "loader", *shape, "--launches", "50", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["launches"] == 50 and "compute_ms" not in result and result["stand_in_alone_ms"] > 0
    refused = run_cmd([sys.executable, "-m", "ds_minimodel", "bench", "loader", *shape, "--launches", "0"],
                      check=False)
    assert refused.returncode != 0 and "--launches must be a positive count" in refused.stderr


UPDATES_WITH_AND_WITHOUT_THE_OVERFLOW_CHECK = """
import json, sys
import torch
from ds_minimodel.tools.bench import stage_engine, synthetic_batch
from ds_minimodel.tools.machine import BenchSpec
from ds_minimodel.train.engine import batch_to
weights = []
for name in sys.argv[1:]:
    torch.manual_seed(0)
    spec = BenchSpec(preset="tiny", vocab=300, seq_len=16, micro_batch=2, ds_config=name)
    engine, model, loss_fn, *_ = stage_engine("step1", spec, micro_batch=2, steps=3)
    batch = batch_to(synthetic_batch(2, 16, 300, 0.15, torch.Generator().manual_seed(0)), engine.device)
    start = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    for _ in range(3):
        engine.backward(loss_fn(engine, batch)["loss"])
        engine.step()
    weights.append({k: v.detach().float().clone() for k, v in model.state_dict().items()})
    engine.destroy()
moved = max((weights[1][k] - start[k]).abs().max().item() for k in start)
print(json.dumps([max((weights[0][k] - weights[1][k]).abs().max().item() for k in weights[0]), moved]))
"""


def test_bf16_without_deepspeeds_overflow_check_trains_the_same_weights(tmp_path):
    # The profile part's lever (tools/gpu_run.py): DeepSpeed's per-update gradient overflow check makes the host
    # wait for the GPU; without it, updates whose gradients are finite (all of them here) give the same weights.
    from ds_minimodel.tools.gpu_common import ds_config

    class _Run:
        work, cuda = tmp_path, False

    names = [ds_config(_Run, "checked"), ds_config(_Run, "unchecked", overflow_check=False)]
    assert json.loads(names[1].read_text())["bf16"] == {"enabled": True, "check_grad_overflow": False}
    proc = run_cmd([sys.executable, "-c", UPDATES_WITH_AND_WITHOUT_THE_OVERFLOW_CHECK, *map(str, names)])
    apart, moved = json.loads(proc.stdout.strip().splitlines()[-1])
    assert apart == 0.0 and moved > 0  # equal, and trained


AN_INFINITE_GRADIENT_UNDER_BF16_WITHOUT_THE_CHECK = """
import json, os, sys
from pathlib import Path
import torch, torch.distributed as dist
import deepspeed
from ds_minimodel.config import TrainConfig
from ds_minimodel.ds_config import BatchSizes
from ds_minimodel.errors import TrainingError
from ds_minimodel.train.engine import build_engine, Loop, Stage
from ds_minimodel.ds_config import unchecked_bf16
out, check = Path(sys.argv[1]), sys.argv[2] == "on"
dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=0, world_size=1)
class Boom(torch.autograd.Function):  # the identity, whose gradient is infinite in update 2
    @staticmethod
    def forward(ctx, x): return x.clone()
    @staticmethod
    def backward(ctx, g): return g * float("inf")
class Stream:
    position = 0
    def __next__(self):
        self.position += 1
        return {"x": torch.ones(2, 4), "num_tokens": 2, "boom": self.position == 2}
    def state_dict(self): return {"position": self.position}
    def load_state_dict(self, state): self.position = state["position"]
def loss_fn(engine, batch):
    y = engine(batch["x"].to(torch.bfloat16))
    return {"loss": (Boom.apply(y) if batch["boom"] else y).float().pow(2).mean()}
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
ds = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 10**6, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
      "bf16": {"enabled": True, "check_grad_overflow": check}, "zero_optimization": {"stage": 1}}
stage = Stage(name="toy", model=model, loss_fn=loss_fn, flops_per_update=1.0, meta={"variant": "toy"})
cfg = TrainConfig(steps=4, log_every=1, save_every=2, prefetch=0)
batch = BatchSizes(micro=2, accumulation=1, world_size=1)
engine = build_engine(stage, ds, cfg, batch)
loop = Loop(stage, Stream(), engine, train_cfg=cfg, batch=batch, run_dir=out / "run", unchecked=unchecked_bf16(ds))
try:
    loop.run(resume=False)
    error = None
except TrainingError as err:
    error = str(err)
print(json.dumps({"error": error, "finite": bool(torch.isfinite(model.weight).all()),
                  "saved": sorted(p.name for p in (out / "run").glob("checkpoints/step_*"))}))
"""


def test_bf16_without_the_overflow_check_an_infinite_gradient_stops_the_run_before_its_weights_are_saved(tmp_path):
    # A real engine: with the check off DeepSpeed applies update 2's infinite gradient (the weights turn NaN while
    # that update's loss is finite), and update 2 is a save point; with it on, DeepSpeed skips the update.
    # Over a group the script starts itself, build_engine still keeps DeepSpeed from compiling its inference-only
    # CPU op: an empty extension cache stays empty.
    found, extensions = {}, tmp_path / "torch_extensions"
    for check in ("off", "on"):
        (tmp_path / check).mkdir()
        proc = run_cmd([sys.executable, "-c", AN_INFINITE_GRADIENT_UNDER_BF16_WITHOUT_THE_CHECK, str(tmp_path / check),
                        check], env={"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1",
                                     "TORCH_EXTENSIONS_DIR": str(extensions)})
        found[check] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not extensions.exists() or not any(extensions.iterdir())
    off, on = found["off"], found["on"]
    assert "gradient norm inf at update 2" in off["error"] and "the last good checkpoint is none" in off["error"]
    assert not off["finite"] and off["saved"] == []
    assert on["error"] is None and on["finite"] and on["saved"] == ["step_00000002", "step_00000004"]

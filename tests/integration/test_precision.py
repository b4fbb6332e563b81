"""What a bf16 run's checkpoint holds: model.pt is fp32 (README), its trained parameters their fp32 master weights
and its frozen ones the values they had before DeepSpeed converted the module to bf16, under ZeRO 0, 1 and 2, whose
engines keep the masters in three different places (the optimizer wrapper, the ZeRO shards through zero_to_fp32)."""
from __future__ import annotations

import json
import sys

from tests.integration.conftest import run_cmd

TOY = """
import json, sys
from pathlib import Path
import torch, torch.distributed as dist
from ds_minimodel.config import TrainConfig
from ds_minimodel.ds_config import BatchSizes
from ds_minimodel.train.engine import Stage, train
out = Path(sys.argv[1])
dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=0, world_size=1)
class Stream:
    position = 0
    def __next__(self):
        self.position += 1
        return {"x": torch.randn(4, 16, generator=torch.Generator().manual_seed(self.position)), "num_tokens": 4}
    def state_dict(self): return {"position": self.position}
    def load_state_dict(self, state): self.position = state["position"]
def loss_fn(engine, batch):
    return {"loss": engine(batch["x"].to(torch.bfloat16)).float().pow(2).mean()}
def toy_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 16),
                               torch.nn.Linear(16, 1))
def bf16_train(model, zero, run_dir, steps, save_every, resume=False):
    ds = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10**6,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}, "bf16": {"enabled": True},
          "zero_optimization": {"stage": zero}}
    stage = Stage(name="toy", model=model, loss_fn=loss_fn, flops_per_update=1.0, meta={"variant": "toy"})
    cfg = TrainConfig(steps=steps, log_every=1, save_every=save_every, prefetch=0)
    return train(stage, Stream(), ds_config=ds, train_cfg=cfg, run_dir=run_dir, resume=resume,
                 batch=BatchSizes(micro=4, accumulation=1, world_size=1))
"""

THREE_BF16_ENGINES = TOY + """
found = {}
for stage_no in (0, 1, 2):
    model = toy_model()
    with torch.no_grad():
        model[1].weight.add_(torch.rand(16) * 1e-3)  # a norm weight near 1, where bf16 rounds coarsest
    model[:2].requires_grad_(False)
    source = {name: t.clone() for name, t in model.state_dict().items()}
    result = bf16_train(model, stage_no, out / f"zero{stage_no}", 3, 3)
    saved = torch.load(result.checkpoint / "model.pt", weights_only=True)
    frozen = [n for n in source if n.startswith(("0.", "1."))]
    trained = [n for n in source if n not in frozen]
    masters = getattr(result.engine.optimizer, "fp32_groups", None)
    found[stage_no] = {
        "dtypes": sorted({str(t.dtype) for t in saved.values()}),
        "frozen_exact": all(torch.equal(saved[n], source[n]) for n in frozen),
        "frozen_rounded_apart": max((source[n] - source[n].bfloat16().float()).abs().max().item() for n in frozen),
        "trained_moved": min((saved[n] - source[n]).abs().max().item() for n in trained),
        "trained_bf16_share": sum(int(saved[n].eq(saved[n].bfloat16().float()).sum()) for n in trained)
                              / sum(saved[n].numel() for n in trained),
        "stage0_masters_equal": None if stage_no or masters is None else all(
            torch.equal(saved[n], m.float()) for n, m in zip(trained, [m for g in masters for m in g])),
    }
print(json.dumps(found))
"""


def test_a_bf16_checkpoint_holds_fp32_masters_and_frozen_source_values_under_zero_0_1_and_2(tmp_path):
    proc = run_cmd([sys.executable, "-c", THREE_BF16_ENGINES, str(tmp_path)],
                   env={"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"})
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for stage, seen in found.items():
        assert seen["dtypes"] == ["torch.float32"], stage
        assert seen["frozen_rounded_apart"] > 0 and seen["frozen_exact"], stage  # rounding would have shown
        assert seen["trained_moved"] > 0, stage
        # From the masters: after three updates at 1e-3 few values sit on bf16's grid; the module's copies all do.
        assert seen["trained_bf16_share"] < 0.5, (stage, seen)
    assert found["0"]["stage0_masters_equal"] is True  # ZeRO 0: DeepSpeed's optimizer wrapper holds the masters


RESUMED = TOY + """
def frozen_bottom():
    model = toy_model()
    model[:2].requires_grad_(False)
    return model
found = {}
for zero in (0, 2):
    straight = bf16_train(frozen_bottom(), zero, out / f"straight{zero}", 4, 2)
    bf16_train(frozen_bottom(), zero, out / f"stopped{zero}", 2, 2)
    resumed = bf16_train(frozen_bottom(), zero, out / f"stopped{zero}", 4, 2, resume=True)
    a, b = (torch.load(r.checkpoint / "model.pt", weights_only=True) for r in (straight, resumed))
    found[zero] = {"same_names": sorted(a) == sorted(b), "equal": all(torch.equal(a[n], b[n]) for n in a),
                   "moved": max((a[n] - b[n]).abs().max().item() for n in a) if sorted(a) == sorted(b) else None}
print(json.dumps(found))
"""


def test_a_bf16_run_stopped_and_resumed_ends_bitwise_where_one_never_stopped_does_under_zero_0_and_2(tmp_path):
    """ZeRO 0's bf16 engine (DeepSpeed's FP16_UnfusedOptimizer) takes one zero-gradient step when it is built
    (ds_configs/README.md): built again on resume, its checkpoint must still restore the masters and Adam's state
    as saved. ZeRO 2 beside it, the stage the shipped configs use."""
    proc = run_cmd([sys.executable, "-c", RESUMED, str(tmp_path)],
                   env={"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"})
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [line.split(" at ")[-1] for line in proc.stdout.splitlines() if "resumed from" in line] == ["update 2"] * 2
    assert found == {"0": {"same_names": True, "equal": True, "moved": 0.0},
                     "2": {"same_names": True, "equal": True, "moved": 0.0}}, found

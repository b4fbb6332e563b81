"""The training loop (train.engine.Loop) in this process, over a stand-in for the DeepSpeed engine: no launcher, no
DeepSpeed, one rank of a Gloo group. What it checks is the loop's own logic: counts, logging and saving cadence,
resume, a stop request, a non-finite loss."""
from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ds_minimodel.config import TrainConfig
from ds_minimodel.ds_config import BatchSizes, unchecked_bf16
from ds_minimodel.errors import TrainingError
from ds_minimodel.train import checkpoint
from ds_minimodel.train.engine import Loop, Stage, duration, prefetching


class Engine:
    """What the loop asks of a DeepSpeed engine, over a plain module and torch's SGD (one micro-batch per update)."""

    def __init__(self, model: torch.nn.Module):
        self.module, self.device = model, torch.device("cpu")
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad()

    def get_lr(self) -> list[float]:
        return [0.1]

    def get_global_grad_norm(self) -> None:
        return None


class Stream:
    """Micro-batches of a fixed regression problem; ``events`` maps a batch index to what happens when it is drawn."""

    def __init__(self, events: dict[int, str] | None = None):
        self.position, self.events, self.loaded = 0, events or {}, None

    def __next__(self) -> dict:
        self.position += 1
        event = self.events.get(self.position)
        if event == "stop":
            os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler's preemption sends
        x = torch.full((4, 2), float("nan") if event == "nan" else 1.0)
        return {"x": x, "y": torch.zeros(4, 1), "num_tokens": 4}

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position, self.loaded = state["position"], state


def mse(engine: Engine, batch: dict) -> dict[str, torch.Tensor]:
    return {"loss": ((engine(batch["x"]) - batch["y"]) ** 2).mean()}


@pytest.fixture
def one_rank(tmp_path):
    if dist.is_initialized():  # an in-process stage test's group, left in this worker: one rank as well
        assert dist.get_world_size() == 1
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def saves(monkeypatch, tmp_path):
    """checkpoint.save and resume recorded instead of written: {step: meta}."""
    saved: dict[int, dict] = {}

    def save(engine, run_dir, step, meta, *, keep=None, trainable_only=False, frozen=None):
        saved[step] = {**meta, "step": step, "weights": engine.module.weight.detach().clone()}
        return Path(run_dir) / checkpoint.tag_for(step)

    def resume(engine, ckpt_dir, *, trainable_only=False):
        meta = saved[int(Path(ckpt_dir).name.split("_")[1])]
        with torch.no_grad():
            engine.module.weight.copy_(meta["weights"])
        return checkpoint.Record.of({**{k: v for k, v in meta.items() if k != "weights"}, "weights_sha256": "0"})

    monkeypatch.setattr(checkpoint, "save", save)
    monkeypatch.setattr(checkpoint, "resume", resume)
    monkeypatch.setattr(checkpoint, "latest_valid_checkpoint",
                        lambda run_dir, say=print: Path(run_dir) / checkpoint.tag_for(max(saved)) if saved else None)
    return saved


class InfAt(Engine):
    """An engine whose gradient norm is infinite after update ``bad`` (what DeepSpeed reports for an inf gradient)."""

    def __init__(self, model: torch.nn.Module, bad: int):
        super().__init__(model)
        self.updates, self.bad = 0, bad

    def step(self) -> None:
        super().step()
        self.updates += 1

    def get_global_grad_norm(self) -> float:
        return float("inf") if self.updates == self.bad else 1.0


def loop(tmp_path, stream, steps=6, engine=Engine, unchecked=False, profile=0, **stage_options) -> Loop:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    stage = Stage(name="toy", model=model, loss_fn=mse, flops_per_update=10.0, meta={"variant": "toy"}, **stage_options)
    cfg = TrainConfig(steps=steps, log_every=2, save_every=4, prefetch=0, profile_updates=profile)
    return Loop(stage, stream, engine(model), train_cfg=cfg, batch=BatchSizes(micro=4, accumulation=1, world_size=1),
                run_dir=tmp_path / "run", unchecked=unchecked)


def test_the_loop_counts_logs_and_saves_on_its_cadence_and_resumes_where_it_saved(one_rank, saves, tmp_path,
                                                                                    capsys):
    result = loop(tmp_path, Stream(), save_initial=True).run(resume=False)
    # Rank 0's progress in a log (no terminal): loss, tokens per second, and the time left until the last update.
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[toy] update")]
    assert [line.split()[2] for line in lines] == ["2", "4", "6"], lines
    pattern = r"\[toy\] update \d loss \d+\.\d{4}, [\d,]+ tokens/s(, \d+ s left)?"
    assert all(re.fullmatch(pattern, line) for line in lines) and "left" in lines[0] and "left" not in lines[-1]
    assert (duration(35.2), duration(250), duration(3900)) == ("35 s", "4 min 10 s", "1 h 05 min")
    assert (result.step, result.samples, result.tokens, result.flops) == (6, 24, 24, 60.0)
    assert sorted(saves) == [0, 4, 6] and result.checkpoint == tmp_path / "run" / checkpoint.tag_for(6)
    assert saves[4]["data_position"] == {"position": 4} and saves[4]["tokens"] == 16 and saves[4]["flops"] == 40.0
    logged = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [2, 4, 6] and logged[-1]["loss"] < logged[0]["loss"]
    final = saves.pop(6)["weights"]
    # From update 4's checkpoint, the same data position and weights: the same final weights.
    stream = Stream()
    again = loop(tmp_path, stream).run(resume=True)
    assert stream.loaded == {"position": 4} and again.step == 6 and again.samples == 24
    assert torch.equal(saves[6]["weights"], final)


def test_a_stop_request_saves_that_update_and_stops_and_a_nan_names_the_last_checkpoint(one_rank, saves, tmp_path):
    result = loop(tmp_path, Stream({3: "stop"})).run(resume=False)
    assert result.stopped_by == "SIGTERM" and result.step == 3 and sorted(saves) == [3]
    with pytest.raises(TrainingError, match=r"non-finite loss nan at update 5; .* the last good checkpoint is "
                                            r".*step_00000004"):
        loop(tmp_path / "other", Stream({5: "nan"})).run(resume=False)


def test_without_the_bf16_overflow_check_an_update_with_an_infinite_gradient_is_never_saved(one_rank, saves, tmp_path):
    # Update 4 is a save point and its gradient was infinite: with the check off DeepSpeed applied it, so its weights
    # are not written and the error names update 0's checkpoint; an infinite norm between saves is left to the next
    # update's loss check.
    with pytest.raises(TrainingError, match=r"gradient norm inf at update 4, applied .* check_grad_overflow off; "
                                            r"update 4 was not saved, the last good checkpoint is .*step_00000000"):
        loop(tmp_path, Stream(), engine=lambda m: InfAt(m, 4), unchecked=True, save_initial=True).run(resume=False)
    assert sorted(saves) == [0]
    saves.clear()
    assert loop(tmp_path / "b", Stream(), engine=lambda m: InfAt(m, 3), unchecked=True).run(resume=False).step == 6
    # With the check on, DeepSpeed skipped that update (its norm reads inf): the weights are fine and are saved.
    saves.clear()
    assert loop(tmp_path / "c", Stream(), engine=lambda m: InfAt(m, 4)).run(resume=False).step == 6
    assert sorted(saves) == [4, 6]
    assert unchecked_bf16({"bf16": {"enabled": True, "check_grad_overflow": False}})
    assert not unchecked_bf16({"bf16": {"enabled": True}}) and not unchecked_bf16({"fp16": {"enabled": True}})


def test_profile_updates_profiles_that_many_updates_after_the_warm_up_and_classifies_their_time(one_rank, saves,
                                                                                              tmp_path):
    # 14 updates: the first 10 are the warm-up, 11-13 are profiled; a 6-update run profiles its last 3 (4-6).
    for steps, first in ((14, 11), (6, 4)):
        loop(tmp_path / str(steps), Stream(), steps=steps, profile=3).run(resume=False)
        record = json.loads((tmp_path / str(steps) / "run/profile.json").read_text())
        assert (record["first_update"], record["updates"]) == (first, 3)
        assert record["basis"] == "aten operators' self CPU time" and record["seconds"]["matmul"] > 0
        assert record["seconds_per_update"] == pytest.approx(record["wall_s"] / 3)
        assert sum(record["shares"].values()) == pytest.approx(1.0)  # the classes and idle make up the wall clock
        assert f"# updates {first}-{first + 2}" in (tmp_path / str(steps) / "run/profile.txt").read_text()
    profiled = saves[6]["weights"]
    loop(tmp_path / "none", Stream()).run(resume=False)
    assert not (tmp_path / "none/run/profile.json").exists() and torch.equal(saves[6]["weights"], profiled)


@pytest.mark.parametrize(("settings", "device", "expected"), [
    ({}, "cpu", (0, False)),  # a CPU's cores compute the model: nothing built ahead
    ({}, "cuda", (2, True)),  # a GPU's loop launches kernels: a builder that takes no turns of the interpreter's lock
    ({"prefetch_process": False}, "cuda", (2, False)),
    ({"prefetch": 0}, "cuda", (0, True)),
    ({"prefetch_process": True}, "cpu", (2, True)),
    ({"prefetch": 3}, "cpu", (3, False)),
])
def test_where_micro_batches_are_built_ahead_by_default_and_when_asked(settings, device, expected):
    assert prefetching(TrainConfig(steps=1, **settings), torch.device(device)) == expected


def test_the_closing_summary_is_one_readable_line_and_a_file(tmp_path):
    from ds_minimodel.stages.cli import SUMMARY_FILE, summary_line, write_summary

    finetune = {"run": "step3-lohelp-base-seed1", "step": 186, "steps": 186, "loss": 1.34, "stopped_by": None,
                "checkpoint": "runs/x/checkpoints/step_00000186", "dev": {"accuracy": 38.9535, "macro_f1": 16.06,
                                                                          "language": "en"}}
    assert summary_line(finetune, tmp_path) == (
        "[step3-lohelp-base-seed1] finished at update 186 of 186; loss 1.3400; dev accuracy 38.95, macro_f1 16.06; "
        f"checkpoint runs/x/checkpoints/step_00000186; every figure in {tmp_path / SUMMARY_FILE}")
    stopped = {"run": "step1-base", "step": 1377, "steps": 3000, "loss": 4.1, "stopped_by": "SIGTERM",
               "checkpoint": "c"}
    assert summary_line(stopped, tmp_path).startswith("[step1-base] stopped by SIGTERM at update 1,377 of 3,000; ")
    write_summary(tmp_path, finetune)
    assert json.loads((tmp_path / SUMMARY_FILE).read_text()) == finetune
    assert [p.name for p in tmp_path.iterdir()] == [SUMMARY_FILE]  # no temporary file left


def test_time_left_follows_the_recent_pace_not_the_runs_average(monkeypatch, capsys):
    """Issue 48: "time left" was far off when the machine's load changed mid-run (the pace since the start)."""
    from ds_minimodel.train import engine

    clock = iter([0.0, *(10.0 * k for k in range(1, 11)), *(100.0 + 40.0 * k for k in range(1, 11))])
    monkeypatch.setattr(engine.time, "perf_counter", lambda: next(clock))
    progress = engine._progress("step2", 0, 1000, enabled=True)
    for k in range(1, 21):  # a line every 10 updates: 1 s an update for 100 updates, then 4 s an update
        progress.update(10 * k, 1.0, 100.0)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(", 53 min 20 s left"), last  # 800 updates at 4 s, not at the run's 2.5 s average

"""Model folders: checksums recorded and checked, and loading never runs code from a file."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from ds_minimodel.config import get_preset
from ds_minimodel.errors import InputError
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.train import checkpoint


class _RunsCode:
    """Unpickling this calls Path.touch(marker): what a malicious checkpoint would do with os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    model = MaskedLM(get_preset("tiny").replace(vocab_size=100))
    checkpoint.save_model_folder(tmp_path / "model", model.state_dict(), {"model_config": model.cfg.to_dict()})
    return tmp_path / "model"


def test_model_folder_round_trip_with_its_checksum(folder: Path) -> None:
    meta = checkpoint.load_meta(folder)
    assert meta.files["model.pt"]["bytes"] == (folder / "model.pt").stat().st_size
    assert checkpoint.verify(folder) is None
    model, _ = load_mlm(folder)
    assert checkpoint.weights_sha256(model.state_dict()) == meta.weights_sha256


def test_a_checkpoint_crafted_to_run_code_is_refused_without_running_it(folder: Path, tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    with open(folder / "model.pt", "wb") as f:
        pickle.dump({"embeddings.tokens.weight": _RunsCode(marker)}, f)
    with pytest.raises(InputError, match="does not match the size and checksum"):  # caught by its checksum first
        load_mlm(folder)
    meta_file = folder / "meta.json"  # and with no checksum to catch it, by weights_only unpickling
    meta_file.write_text(json.dumps({k: v for k, v in json.loads(meta_file.read_text()).items() if k != "files"}))
    with pytest.raises(InputError, match="refused: not loadable without running code from it") as err:
        load_mlm(folder)
    assert str(folder / "model.pt") in str(err.value)
    assert not marker.exists()
    torch.save({"x": _RunsCode(marker)}, folder / "model.pt")  # torch's own zip format, same refusal
    with pytest.raises(InputError, match="refused: not loadable without running code from it"):
        load_mlm(folder)
    assert not marker.exists()


def test_a_path_that_is_not_a_checkpoint_says_what_it_is_and_a_runs_folder_names_its_newest(folder: Path,
                                                                                          tmp_path: Path) -> None:
    def problem(path: Path) -> str:
        with pytest.raises(InputError) as err:
            load_mlm(path)
        return str(err.value)

    assert problem(tmp_path / "nowhere") == f"{tmp_path / 'nowhere'}: does not exist"
    assert "a file, not a checkpoint" in problem(folder / "model.pt")
    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000005").mkdir(parents=True)  # written halfway: no meta.json
    assert "no complete checkpoint yet" in problem(run)
    for step in (10, 20):
        checkpoint.save_model_folder(run / "checkpoints" / checkpoint.tag_for(step),
                                     checkpoint.load_weights(folder), checkpoint.load_meta(folder))
    newest = run / "checkpoints" / "step_00000020"
    for path in (run, run / "checkpoints"):
        assert problem(path) == (f"{path}: a training run's folder, not a checkpoint; pass one of its checkpoints "
                                 f"(the newest: {newest})")
    assert problem(tmp_path) == f"{tmp_path}: not a complete checkpoint (meta.json missing)"
    load_mlm(newest)  # what the message names loads


def test_flipped_byte_and_truncation_are_named(folder: Path) -> None:
    weights = folder / "model.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    assert "checksum differs" in checkpoint.verify(folder)
    weights.write_bytes(bytes(data[:100]))
    assert "truncated" in checkpoint.verify(folder)
    with pytest.raises(InputError, match="truncated or corrupted"):
        load_mlm(folder)


def test_a_meta_json_describing_another_shape_is_one_line_naming_the_first_tensor(folder: Path) -> None:
    """A meta.json edited by hand or copied from another checkpoint (its weights' checksum still holds): one line,
    not torch's line per tensor."""
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["model_config"]["hidden_size"] *= 2
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(InputError) as err:
        load_mlm(folder)
    message = str(err.value)
    assert len(message.splitlines()) == 1 and message.startswith(f"{folder / 'model.pt'}: weights do not match")
    assert "embeddings.tokens.weight is [100, 64] in the weights, [100, 128] by the config (and " in message


def test_a_task_model_loads_from_its_recorded_head_and_one_written_before_heads_were_recorded_too(tmp_path):
    """model.loading rebuilds a finetuned model's head from meta.json alone: ``task.kind`` where recorded, the
    format's kind for task models written before it was (no ``kind`` key); a head of unknown kind is refused."""
    from ds_minimodel.model.encoder import TaskModel
    from ds_minimodel.model.loading import load
    from ds_minimodel.tasks.formats import load_task_model

    cfg = get_preset("tiny").replace(vocab_size=60, num_layers=2)
    model = TaskModel(cfg, "token", 4, "cls")
    task = {"name": "pos", "format": "conllu", "labels": ["A", "B", "C", "D"], "max_len": 64, "doc_stride": 64,
            "pooling": "cls"}
    for name, recorded in (("old", task), ("new", {**task, "kind": "token"})):
        checkpoint.save_model_folder(tmp_path / name, model.state_dict(), {
            "kind": checkpoint.Kind.TASK_MODEL.value, "model_config": cfg.to_dict(), "task": recorded})
        loaded, spec, _ = load_task_model(tmp_path / name)
        assert loaded.kind == "token" and spec.kind == "token" and spec.num_labels == 4
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    checkpoint.save_model_folder(tmp_path / "odd", model.state_dict(), {
        "kind": checkpoint.Kind.TASK_MODEL.value, "model_config": cfg.to_dict(), "task": {**task, "format": "odd"}})
    with pytest.raises(InputError, match="task head of unknown kind"):
        load(tmp_path / "odd")


def test_meta_json_is_a_typed_record_and_files_written_before_it_still_load(folder: Path) -> None:
    """checkpoint alone reads meta.json, into a Record: named fields typed, the producer's own keys in details. A
    Step-1 checkpoint's meta.json as written before kinds and checksums existed loads, and round-trips unchanged."""
    old = {"weights_sha256": "ab" * 32, "step": 40, "samples": 1280, "tokens": 163840, "flops": 1.5e12,
           "data_position": {"epoch": 0, "position": 7}, "model_config": get_preset("tiny").to_dict(),
           "tokenizer": {"path": "/data/en/spm.model", "sha256": "cd" * 32}, "variant": "base", "stage": "x"}
    record = checkpoint.Record.from_json(old, "old/meta.json")
    assert record.kind == checkpoint.Kind.PRETRAINED and record.lineage == old["weights_sha256"]
    assert record.step == 40 and record.tokenizer.path == "/data/en/spm.model"
    assert record.details == {"variant": "base", "stage": "x"} and record.to_json() == old
    assert checkpoint.Record.from_json({**old, "kind": None}, "old/meta.json") == record  # null: no kind
    for bad, message in (({**old, "step": "40"}, "step must be int | None, got '40'"),
                         ({**old, "kind": "weights"}, "unknown kind 'weights'"),
                         ({**old, "tokenizer": {"path": "spm.model"}}, "tokenizer: sha256 is required"),
                         ({"step": 3}, "no 'weights_sha256'")):
        with pytest.raises(InputError, match=rf"^old/meta.json: .*{message}"):
            checkpoint.Record.from_json(bad, "old/meta.json")
    (folder / "meta.json").write_text(json.dumps({**old, "step": 4.5}))
    with pytest.raises(InputError, match=rf"{folder / 'meta.json'}: step must be int"):
        checkpoint.load_meta(folder)


def test_resuming_a_zero_run_on_another_rank_count_is_refused_with_the_count_that_saved_it(tmp_path: Path) -> None:
    """DeepSpeed cannot re-partition ZeRO's optimizer state for another world size and says so in a traceback from
    deep inside load_checkpoint; resume names the checkpoint and the number of ranks to resume with instead."""
    from deepspeed.runtime.zero.utils import ZeRORuntimeException

    folder = tmp_path / "checkpoints" / "step_00000060"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"weights_sha256": "0" * 64, "step": 60}))

    class Engine:
        checkpoint_engine = type("CheckpointEngine", (), {})()

        def load_checkpoint(self, *args, **kwargs):
            raise ZeRORuntimeException("The checkpoint being loaded used a DP world size of 1 but the current world "
                                       "size is 2. Automatic adjustment of ZeRO's optimizer state partitioning with a "
                                       "new world size is not currently supported.")

    with pytest.raises(InputError, match=rf"{folder}: saved by 1 rank\(s\) under ZeRO, resumed here by 2: .*resume "
                                         r"with 1 rank\(s\)"):
        checkpoint.resume(Engine(), folder)


def test_pruning_after_a_resume_past_damaged_checkpoints_keeps_the_one_just_written(tmp_path: Path) -> None:
    # Updates 2000 and 3000 are damaged; the run resumed from 1000 with --keep-checkpoints 2 and saves at 1500.
    root = checkpoint.checkpoint_root(tmp_path)
    for step in (500, 1000, 1500, 2000, 3000):
        (root / f"step_{step:08d}").mkdir(parents=True)
        (root / f"step_{step:08d}" / checkpoint.META).write_text("{}")
    checkpoint.prune_checkpoints(tmp_path, keep=2, step=1500)
    assert [p.name for p in checkpoint.complete_checkpoints(tmp_path)] == [
        "step_00001000", "step_00001500", "step_00002000", "step_00003000"]
    # The usual case, nothing newer: the two newest stay.
    (root / "step_00004000").mkdir()
    (root / "step_00004000" / checkpoint.META).write_text("{}")
    checkpoint.prune_checkpoints(tmp_path, keep=2, step=4000)
    assert [p.name for p in checkpoint.complete_checkpoints(tmp_path)] == ["step_00003000", "step_00004000"]


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_frozen_parameters_are_saved_at_their_full_precision_not_as_a_16_bit_engine_holds_them(tmp_path: Path,
                                                                                               half) -> None:
    """DeepSpeed converts the whole module to 16 bits and keeps fp32 masters of the trainable parameters only: model.pt
    takes a frozen parameter from the values taken before, where they round to the module's; otherwise (a resume
    loaded other values) from the module."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    model[0].requires_grad_(False)
    model[1].requires_grad_(False)
    with torch.no_grad():
        model[1].weight.add_(torch.rand(8) * 1e-3)  # a norm weight near 1: 16 bits round these coarsest
    source = {name: t.clone() for name, t in model.state_dict().items()}
    frozen = checkpoint.frozen_values(model)
    assert sorted(frozen) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    tied = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 2), "b": torch.nn.Linear(2, 2)})
    tied["b"].weight = tied["a"].weight  # a trained parameter under a second name is not frozen
    assert sorted(checkpoint.frozen_values(tied)) == []
    model.to(half)

    class Engine:
        module = model

        @staticmethod
        def zero_optimization_stage() -> int:
            return 0

    rounded = checkpoint._full_precision_weights(Engine, tmp_path, trainable_only=False)
    assert not torch.equal(rounded["1.weight"], source["1.weight"])  # the bug this guards against
    saved = checkpoint._full_precision_weights(Engine, tmp_path, trainable_only=False, frozen=frozen)
    for name in frozen:
        assert saved[name].dtype == torch.float32 and torch.equal(saved[name], source[name]), name
    assert torch.equal(saved["2.weight"], model[2].weight.float())  # trainable: the engine's (here, the module's)
    with torch.no_grad():
        model[0].weight.mul_(2)  # as if a resume had loaded another body
    saved = checkpoint._full_precision_weights(Engine, tmp_path, trainable_only=False, frozen=frozen)
    assert torch.equal(saved["0.weight"], model[0].weight.float())
    assert torch.equal(saved["1.weight"], source["1.weight"])
    assert sorted(checkpoint._full_precision_weights(Engine, tmp_path, trainable_only=True, frozen=frozen)) == [
        "2.bias", "2.weight"]

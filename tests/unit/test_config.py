"""Unit tests of ds_minimodel.config: presets, validation, dict/JSON round trips, error messages naming the source."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ds_minimodel.config import PRESETS, ModelConfig, TrainConfig, get_preset, read_json, write_json
from ds_minimodel.errors import InputError

# --- presets ---------------------------------------------------------------------------------------------------------


def test_base_preset_is_roberta_base_with_the_papers_vocabulary() -> None:
    base = get_preset("base")
    assert (base.vocab_size, base.hidden_size, base.num_layers, base.num_heads, base.ffn_size, base.max_positions) == (
        50_000, 768, 12, 12, 3072, 512)
    assert (base.dropout, base.attention_dropout, base.layer_norm_eps, base.init_std) == (0.1, 0.1, 1e-5, 0.02)
    assert base.aux_head_layer is None
    assert base.head_dim == 64


def test_small_preset_is_base_with_four_layers() -> None:
    assert get_preset("small") == get_preset("base").replace(num_layers=4)


def test_tiny_preset_keeps_the_papers_depth_at_a_small_width() -> None:
    tiny = get_preset("tiny")
    assert (tiny.vocab_size, tiny.hidden_size, tiny.num_layers, tiny.num_heads, tiny.ffn_size, tiny.max_positions) == (
        50_000, 64, 12, 4, 256, 128)
    assert tiny.replace(aux_head_layer=4).aux_head_layer == 4  # MiniJoint's N=4 fits


def test_unknown_preset_is_an_input_error_listing_the_known_names() -> None:
    with pytest.raises(InputError, match="'huge'") as err:
        get_preset("huge")
    assert "base, demo, reference, reference_gpu, small, tiny" in str(err.value)
    assert set(PRESETS) == {"base", "demo", "reference", "reference_gpu", "small", "tiny"}
    assert issubclass(InputError, ValueError)


# --- ModelConfig validation ------------------------------------------------------------------------------------------


def test_hidden_size_not_divisible_by_heads_is_rejected() -> None:
    with pytest.raises(InputError, match="hidden_size 100 is not divisible by num_heads 12"):
        ModelConfig(hidden_size=100)


@pytest.mark.parametrize("layer", [0, -1, 13])
def test_aux_head_layer_out_of_range_is_rejected(layer: int) -> None:
    with pytest.raises(InputError, match="aux_head_layer"):
        ModelConfig(num_layers=12, aux_head_layer=layer)


@pytest.mark.parametrize("layer", [1, 4, 11, 12])  # 12: both heads on the top layer (the depth study's N=12)
def test_aux_head_layer_in_range_is_accepted(layer: int) -> None:
    assert ModelConfig(aux_head_layer=layer).aux_head_layer == layer


@pytest.mark.parametrize("field", ["vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_size", "max_positions"])
@pytest.mark.parametrize("value", [-1, 0, True, 2.0])
def test_sizes_must_be_positive_integers(field: str, value: object) -> None:
    with pytest.raises(InputError, match=f"{field} must be a positive integer"):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("field", ["dropout", "attention_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_dropout_must_be_in_zero_one(field: str, value: float) -> None:
    with pytest.raises(InputError, match=field):
        ModelConfig(**{field: value})


def test_configs_are_frozen_and_replace_validates() -> None:
    cfg = ModelConfig()
    with pytest.raises(AttributeError):
        cfg.hidden_size = 1  # type: ignore[misc]
    with pytest.raises(InputError):
        cfg.replace(num_heads=7)


# --- TrainConfig validation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes", [
    {"steps": 0}, {"seq_len": -1}, {"save_every": 0}, {"log_every": True},
    {"mask_prob": 0.0}, {"mask_prob": 1.0}, {"keep_checkpoints": 0}, {"prefetch": -1}, {"prefetch": 1.5},
    {"packing": "documents"}, {"profile_updates": -1}, {"profile_updates": True},
    {"prefetch_process": True, "prefetch": 0},
])
def test_train_config_rejects_bad_values(changes: dict) -> None:
    with pytest.raises(InputError, match=next(iter(changes))):
        TrainConfig(**{"steps": 10, **changes})


# --- from_dict / to_dict ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [ModelConfig(), get_preset("tiny").replace(aux_head_layer=4, dropout=0.0)])
def test_model_config_round_trips_through_a_dict(cfg: ModelConfig) -> None:
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg  # and through JSON text


def test_train_config_round_trips_through_a_dict() -> None:
    cfg = TrainConfig(steps=100, seq_len=128, keep_checkpoints=3)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_from_dict_accepts_a_partial_dict_and_ints_for_floats() -> None:
    cfg = ModelConfig.from_dict({"num_layers": 4, "dropout": 0})
    assert cfg == ModelConfig(num_layers=4, dropout=0.0)


def test_from_dict_rejects_unknown_keys_naming_the_source() -> None:
    with pytest.raises(InputError) as err:
        ModelConfig.from_dict({"hidden_size": 64, "num_head": 4, "colour": "red"}, source="runs/a/model.json")
    message = str(err.value)
    assert message.startswith("runs/a/model.json:")
    assert "colour, num_head" in message and "num_heads" in message  # the unknown keys and the known ones


@pytest.mark.parametrize("key, value", [
    ("hidden_size", "768"), ("hidden_size", 768.0), ("num_layers", True), ("dropout", "0.1"),
    ("dropout", None), ("aux_head_layer", 4.0), ("aux_head_layer", "4"), ("aux_head_layer", False),
])
def test_from_dict_rejects_wrong_types_naming_the_source_and_key(key: str, value: object) -> None:
    with pytest.raises(InputError) as err:
        ModelConfig.from_dict({key: value}, source="cfg/model.json")
    message = str(err.value)
    assert message.startswith("cfg/model.json:") and key in message


def test_from_dict_rejects_a_non_object() -> None:
    with pytest.raises(InputError, match="train.json: expected a JSON object, got list"):
        TrainConfig.from_dict([1, 2], source="train.json")


def test_from_dict_reports_a_missing_required_key_and_invalid_values_with_the_source() -> None:
    with pytest.raises(InputError, match="^train.json:.*steps"):
        TrainConfig.from_dict({"seq_len": 128}, source="train.json")
    with pytest.raises(InputError, match="^model.json:.*divisible"):
        ModelConfig.from_dict({"hidden_size": 100}, source="model.json")


# --- read_json / write_json ------------------------------------------------------------------------------------------


def test_read_json_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(InputError, match="file not found") as err:
        read_json(path)
    assert str(path) in str(err.value)


def test_read_json_malformed_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "a": 1,\n  "b": ,\n}\n', encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_json(path)
    message = str(err.value)
    assert str(path) in message and "line 3" in message


def test_read_json_of_a_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_json(tmp_path)


def test_write_json_then_read_json_round_trips_a_config(tmp_path: Path) -> None:
    cfg = get_preset("tiny").replace(aux_head_layer=4)
    path = tmp_path / "model.json"
    write_json(path, cfg.to_dict())
    assert ModelConfig.from_dict(read_json(path), source=str(path)) == cfg


def test_write_json_replaces_old_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_json(path, {"step": 1, "long": "x" * 1000})
    write_json(path, {"step": 2})
    assert read_json(path) == {"step": 2}  # fully replaced, no tail of the longer old file
    assert os.listdir(tmp_path) == ["state.json"]


def test_write_json_failure_keeps_old_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    # A value json cannot serialise fails half-way through the dump. The old file must survive untouched (that part
    # holds), and the half-written temporary must be removed, or every failed write litters the run folder.
    path = tmp_path / "state.json"
    write_json(path, {"step": 1})
    with pytest.raises(TypeError):
        write_json(path, {"step": 2, "bad": object()})
    assert read_json(path) == {"step": 1}
    assert os.listdir(tmp_path) == ["state.json"]


def test_pre_norm_is_a_boolean_and_defaults_to_the_papers_post_ln() -> None:
    assert ModelConfig().pre_norm is False and get_preset("reference").pre_norm is True
    assert ModelConfig.from_dict({"pre_norm": True}).pre_norm is True
    with pytest.raises(InputError, match="pre_norm must be bool, got 'yes'"):
        ModelConfig.from_dict({"pre_norm": "yes"}, source="overrides.json")


def test_attention_bias_defaults_to_robertas_none_and_names_a_bad_value() -> None:
    assert ModelConfig().attention_bias == "none" and get_preset("reference").attention_bias == "alibi"
    assert ModelConfig.from_dict({"attention_bias": "alibi"}).attention_bias == "alibi"
    with pytest.raises(InputError, match="attention_bias must be 'none' or 'alibi', got 'rope'"):
        ModelConfig.from_dict({"attention_bias": "rope"}, source="overrides.json")


def test_csv_and_a_resumed_runs_metrics_are_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    # A full disk or a kill while results.csv or a resumed run's metrics.jsonl is rewritten: the old file survives
    # (metrics.jsonl is the run's only loss history; a resume trims it to the checkpoint's step).
    from ds_minimodel.config import write_csv
    from ds_minimodel.train.metrics import MetricsLogger

    table, metrics = tmp_path / "results.csv", tmp_path / "metrics.jsonl"
    write_csv(table, [{"a": 1}])
    metrics.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (10, 20, 30)))
    before = {p: p.read_text() for p in (table, metrics)}

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_csv(table, [{"a": 2}, {"a": 3}])
    with pytest.raises(OSError, match="No space"):
        MetricsLogger(metrics, None, enabled=True, resume_step=20)
    assert {p: p.read_text() for p in (table, metrics)} == before
    assert sorted(os.listdir(tmp_path)) == ["metrics.jsonl", "results.csv"]
    monkeypatch.undo()
    MetricsLogger(metrics, None, enabled=True, resume_step=20).close()
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [10, 20]

"""Typed stage specs (stages.specs): the command line builds them, files hold them, and every value is checked."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.stages import adapt, finetune, pretrain
from ds_minimodel.stages.cli import spec_from_command_line
from ds_minimodel.stages.specs import SPECS, AdaptSpec, FinetuneSpec, PretrainSpec, help_of, read_spec
from ds_minimodel.train.distributed import DEFAULT_DIST_TIMEOUT

PARSERS = {PretrainSpec: pretrain.build_parser, AdaptSpec: adapt.build_parser, FinetuneSpec: finetune.build_parser}
REQUIRED = {
    PretrainSpec: ["--ds-config", "d.json", "--data", "data/en", "--out", "o"],
    AdaptSpec: ["--ds-config", "d.json", "--data", "data/de", "--out", "o", "--system", "bl_base", "--body", "b"],
    FinetuneSpec: ["--ds-config", "d.json", "--out", "o", "--model", "m", "--task", "lohelp", "--format", "generic",
                   "--train", "t.jsonl"],
}


@pytest.mark.parametrize("spec", list(PARSERS))
def test_every_option_is_a_spec_field_with_the_same_default_and_every_field_an_option(spec):
    parser = PARSERS[spec]()
    options = {a.dest: a for a in parser._actions if a.dest not in ("help", "config", "local_rank")}
    fields = {f.name: f for f in dataclasses.fields(spec)}
    assert set(options) == set(fields)
    for name, f in fields.items():
        if f.default is not dataclasses.MISSING:
            assert options[name].default == f.default, name
        assert options[name].help and help_of(spec, name)  # documented once, in the spec
    built = spec_from_command_line(parser, spec, REQUIRED[spec])
    required = {f.name: built.__dict__[f.name] for f in fields.values() if f.default is dataclasses.MISSING}
    assert built == spec(**required)  # the options' defaults are the spec's


@pytest.mark.parametrize("spec", list(PARSERS))
def test_a_spec_survives_its_file_and_the_command_line_reads_it(spec, tmp_path):
    parser = PARSERS[spec]()
    built = spec_from_command_line(parser, spec, [*REQUIRED[spec], "--seed", "7", "--resume"])
    built.write(tmp_path / "spec.json")
    assert read_spec(tmp_path / "spec.json") == built == spec.from_file(tmp_path / "spec.json")
    assert spec_from_command_line(parser, spec, ["--config", str(tmp_path / "spec.json"), "--local_rank=0"]) == built
    assert isinstance(built.out, Path) and built.seed == 7 and built.resume
    with pytest.raises(SystemExit):  # a file, or options: not both
        spec_from_command_line(parser, spec, ["--config", str(tmp_path / "spec.json"), "--seed", "3"])


def test_spec_files_are_checked_value_by_value_with_the_file_named(tmp_path, capsys):
    good = PretrainSpec(ds_config=Path("d.json"), out=Path("o"), data=Path("data")).to_dict()
    cases = {
        "unknown key(s) stepz": {**good, "stepz": 3},
        "steps: input should be a valid integer": {**good, "steps": "3"},
        "steps: input should be greater than or equal to 1": {**good, "steps": 0},
        "mask_prob: input should be less than 1": {**good, "mask_prob": 1.0},
        "resume: input should be a valid boolean": {**good, "resume": 1},
        "a spec for stage 'adapt', not 'pretrain'": {**good, "stage": "adapt"},
        "missing key(s) data": {k: v for k, v in good.items() if k != "data"},
    }
    for expected, data in cases.items():
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        with pytest.raises(InputError, match=rf"{re.escape(str(path))}: .*{re.escape(expected)}"):
            PretrainSpec.from_file(path)
    path.write_text(json.dumps({**good, "stage": "nope"}))
    with pytest.raises(InputError, match=r"\"stage\" must be one of pretrain, adapt, finetune"):
        read_spec(path)
    with pytest.raises(SystemExit) as stop:  # the command line: one line, exit 2, no traceback
        spec_from_command_line(pretrain.build_parser(), PretrainSpec, ["--config", str(path)])
    assert stop.value.code == 2 and "error: " in capsys.readouterr().err


def test_specs_name_their_stage_and_take_the_launcher_timeout_default():
    assert set(SPECS) == {"pretrain", "adapt", "finetune"}
    assert all(cls.STAGE == name for name, cls in SPECS.items())
    assert PretrainSpec.__dataclass_fields__["dist_timeout"].default == DEFAULT_DIST_TIMEOUT.total_seconds()
    with pytest.raises(KeyError):
        help_of(PretrainSpec, "no_such_field")
    assert isinstance(pretrain.build_parser(), argparse.ArgumentParser)


def test_a_bf16_run_on_a_cpu_without_native_bf16_says_so_before_it_starts():
    from ds_minimodel.stages.runner import bf16_notice

    bf16 = {"bf16": {"enabled": True}}
    notice = bf16_notice(bf16, "ds_configs/cpu_bf16_zero2.json", cuda=False, native=False)
    assert notice.startswith("note: ds_configs/cpu_bf16_zero2.json trains in bf16, but this CPU")
    assert "ds_configs/cpu_fp32.json" in notice
    assert bf16_notice(bf16, "x.json", cuda=False, native=True) is None  # AVX-512 BF16 or AMX: nothing to say
    assert bf16_notice(bf16, "x.json", cuda=True, native=False) is None  # a GPU run
    assert bf16_notice({"bf16": {"enabled": False}}, "x.json", cuda=False, native=False) is None
    assert bf16_notice({}, "x.json", cuda=False, native=False) is None


def test_deepspeeds_scheduler_start_warning_is_dropped_and_other_warnings_are_kept():
    import logging

    from ds_minimodel.stages.cli import SCHEDULER_START, drop_scheduler_start

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("DeepSpeed", logging.WARNING, "lr_schedules.py", 759, message, None, None)

    assert not drop_scheduler_start(record(SCHEDULER_START))
    assert drop_scheduler_start(record("gradient overflow, skipping the step"))

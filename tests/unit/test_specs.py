"""Typed stage specs (stages.specs): the command line builds them, files hold them, and every value is checked."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.stages import adapt, finetune, pretrain
from ds_minimodel.stages.cli import option_name, spec_from_command_line
from ds_minimodel.stages.specs import (
    SPECS,
    AdaptSpec,
    FinetuneSpec,
    HeadSpec,
    MiniPostSpec,
    PretrainSpec,
    help_of,
    read_spec,
)
from ds_minimodel.train.distributed import DEFAULT_DIST_TIMEOUT

STAGES = {PretrainSpec: pretrain.CHECKS, MiniPostSpec: {}, HeadSpec: {}, AdaptSpec: adapt.CHECKS,
          FinetuneSpec: finetune.CHECKS}
REQUIRED = {
    PretrainSpec: ["--ds-config", "d.json", "--data", "data/en", "--out", "o"],
    MiniPostSpec: ["--ds-config", "d.json", "--data", "data/en", "--out", "o", "--from", "runs/en/step_1"],
    HeadSpec: ["--ds-config", "d.json", "--data", "data/en", "--out", "o", "--from", "models/encoder"],
    AdaptSpec: ["--ds-config", "d.json", "--data", "data/de", "--out", "o", "--system", "bl_base", "--body", "b"],
    FinetuneSpec: ["--ds-config", "d.json", "--out", "o", "--model", "m", "--task", "lohelp", "--format", "generic",
                   "--train", "t.jsonl"],
}


def parse(spec, argv):
    return spec_from_command_line(spec, argv, checks=STAGES[spec])


@pytest.mark.parametrize("spec", list(STAGES))
def test_every_field_is_an_option_with_its_default_and_docstring(spec, capsys):
    with pytest.raises(SystemExit) as stop:
        parse(spec, ["--help"])
    assert stop.value.code == 0
    page = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(spec):
        assert option_name(f.name) in page, f.name
        assert " ".join(help_of(spec, f.name).split()[:4]) in page, f.name  # documented once, in the spec
    assert "--config SPEC_JSON" in page
    built = parse(spec, REQUIRED[spec])
    required = {f.name: built.__dict__[f.name] for f in dataclasses.fields(spec) if f.default is dataclasses.MISSING}
    assert built == spec(**required)  # the options' defaults are the spec's


def test_todays_option_spellings_give_the_spec_they_always_gave():
    got = parse(MiniPostSpec, ["--from", "runs/x", "--keep-layers", "2", "--new-layers", "3",
                               "--ds-config", "d.json", "--data", "d", "--out", "o", "--resume", "--local_rank=1",
                               "--allow-config-change", "--prefetch", "0", "--dist-timeout", "60"])
    assert got == MiniPostSpec(from_=Path("runs/x"), keep_layers=2, new_layers=3,
                               ds_config=Path("d.json"), data=Path("d"), out=Path("o"), resume=True,
                               allow_config_change=True, prefetch=0, dist_timeout=60.0)
    got = parse(PretrainSpec, [*REQUIRED[PretrainSpec], "--variant", "minijoint", "--aux-layer", "2", "--preset",
                               "tiny", "--forget-every", "100"])
    assert (got.variant, got.aux_layer, got.preset, got.forget_every) == ("minijoint", 2, "tiny", 100)
    got = parse(AdaptSpec, [*REQUIRED[AdaptSpec], "--init", "wechsel", "--word-list", "w.tsv", "--source-data", "en",
                            "--freeze-copied", "--body-dropout", "off", "--local_rank", "0"])
    assert (got.init, got.word_list, got.source_data, got.freeze_copied, got.body_dropout) == (
        "wechsel", Path("w.tsv"), Path("en"), True, "off")
    got = parse(FinetuneSpec, [*REQUIRED[FinetuneSpec], "--epochs", "0.5", "--dev-format", "xnli", "--pooling", "mean"])
    assert (got.epochs, got.dev_format, got.pooling) == (0.5, "xnli", "mean")


@pytest.mark.parametrize("spec", list(STAGES))
def test_a_spec_survives_its_file_and_the_command_line_reads_it(spec, tmp_path):
    built = parse(spec, [*REQUIRED[spec], "--seed", "7", "--resume"])
    built.write(tmp_path / "spec.json")
    assert read_spec(tmp_path / "spec.json") == built == spec.from_file(tmp_path / "spec.json")
    assert parse(spec, ["--config", str(tmp_path / "spec.json"), "--local_rank=0"]) == built
    assert parse(spec, [f"--config={tmp_path / 'spec.json'}"]) == built
    assert isinstance(built.out, Path) and built.seed == 7 and built.resume
    with pytest.raises(SystemExit):  # a file, or options: not both
        parse(spec, ["--config", str(tmp_path / "spec.json"), "--seed", "3"])


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
    with pytest.raises(InputError, match=r"\"stage\" must be one of pretrain, minipost, head, adapt, finetune"):
        read_spec(path)
    with pytest.raises(SystemExit) as stop:  # the command line: one line, exit 2, no traceback
        parse(PretrainSpec, ["--config", str(path)])
    assert stop.value.code == 2 and "error: " in capsys.readouterr().err


def test_what_is_not_a_result_and_what_resume_may_change_come_from_the_roles_on_the_fields():
    from ds_minimodel.config import Role, TrainConfig, role_of
    from ds_minimodel.train.run_record import HARMLESS

    assert MiniPostSpec.not_results() == {"out", "resume", "allow_config_change", "log_root", "run_name", "save_every",
                                          "log_every", "keep_checkpoints", "prefetch", "compile",
                                          "activation_checkpointing", "dist_timeout", "profile_updates",
                                          "prefetch_process", "qkv_views"}
    assert FinetuneSpec.not_results() <= set(MiniPostSpec.not_results())  # no keep_checkpoints there
    # a spec's copy of a training setting has TrainConfig's role; what the run learns is identity by default
    assert role_of(AdaptSpec, "steps") == Role.LENGTH and role_of(AdaptSpec, "warmup_ratio") == Role.SETUP
    assert role_of(AdaptSpec, "init") == role_of(TrainConfig, "seq_len") == Role.IDENTITY
    assert HARMLESS == {"train.steps", "train.save_every", "train.log_every", "train.keep_checkpoints",
                        "train.prefetch", "train.compile", "train.activation_checkpointing",
                        "train.profile_updates", "train.prefetch_process", "train.qkv_views"}


def test_specs_name_their_stage_and_take_the_launcher_timeout_default():
    from ds_minimodel.cluster.launch import ENTRY_SCRIPTS
    from ds_minimodel.stages.worker import STAGE_MAINS

    assert set(SPECS) == {"pretrain", "minipost", "head", "adapt", "finetune"}
    assert all(cls.STAGE == name for name, cls in SPECS.items())
    # one entry script per job kind, each in the repository, each known to the launcher and the shared launch
    entries = {cls.ENTRY for cls in SPECS.values()}
    assert len(entries) == len(SPECS) and set(ENTRY_SCRIPTS) == entries == set(STAGE_MAINS)
    assert all((Path(__file__).parents[2] / entry).is_file() for entry in entries)
    assert PretrainSpec.__dataclass_fields__["dist_timeout"].default == DEFAULT_DIST_TIMEOUT.total_seconds()
    with pytest.raises(KeyError):
        help_of(PretrainSpec, "no_such_field")


def test_a_bf16_run_on_a_cpu_without_native_bf16_says_so_before_it_starts():
    from ds_minimodel.stages.runner import bf16_notice

    bf16 = {"bf16": {"enabled": True}}
    notice = bf16_notice(bf16, "ds_configs/cpu_bf16_zero2.json", cuda=False, native=False)
    assert notice.startswith("note: ds_configs/cpu_bf16_zero2.json trains in bf16, but this CPU")
    assert "ds_configs/cpu_fp32.json" in notice
    reference = Path(__file__).resolve().parents[2] / "ds_configs/cpu_bf16_reference.json"  # it has an fp32 twin
    loaded = json.loads(reference.read_text())
    notice = bf16_notice(loaded, reference, cuda=False, native=False)
    assert notice.endswith(f"; {reference.with_name('cpu_fp32_reference.json')} is the same file in fp32"), notice
    other = bf16_notice({**loaded, "gradient_clipping": 0.5}, reference, cuda=False, native=False)
    assert "ds_configs/cpu_fp32.json" in other and "cpu_fp32_reference" not in other  # the file beside differs
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

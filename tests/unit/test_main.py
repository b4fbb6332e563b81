"""``ds-minimodel <command>``: one entry for every tool; each command is the module's own ``main``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ds_minimodel.__main__ import COMMANDS, entry, main

REPO = Path(__file__).resolve().parents[2]


def test_every_command_names_a_module_with_a_main():
    for name in COMMANDS:
        assert callable(entry(name)), name


def test_a_command_runs_its_module_and_an_unknown_one_is_refused(capsys):
    assert main(["flops", "paper"]) == 0
    assert "Step 1, 12 layers (A1)" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err
    assert main([]) == 0  # alone: what it is, the commands and the hint (issue 31)
    out = capsys.readouterr().out
    assert out.startswith("ds-minimodel: mini-model adaptation") and "commands:" in out
    assert "`ds-minimodel <command> --help`" in out and all(name in out for name in COMMANDS)


def test_a_bad_input_a_command_does_not_report_itself_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the checkout: the defaults are the checkout's files, wherever it runs from
    assert main(["bench", "prepare", "--corpus", str(tmp_path / "nope.txt")]) == 2  # a traceback before
    missing = tmp_path / "nope.txt"
    assert capsys.readouterr().err == f"error: {missing}: corpus file not found (bench prepare --corpus)\n"
    from ds_minimodel.tools.bench import build_parser

    assert build_parser().parse_args(["loader"]).corpus == REPO / "demo_data/corpus/en.txt"
    assert build_parser().parse_args(["one-stage", "step1"]).ds_config == REPO / "ds_configs/cpu_fp32.json"


@pytest.mark.parametrize("entry", [["-m", "ds_minimodel"], None])
def test_the_console_script_and_python_m_list_the_commands(entry):
    cmd = [sys.executable, *entry, "--help"] if entry else [str(sys.executable).rsplit("/", 1)[0] + "/ds-minimodel",
                                                             "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert all(name in out for name in COMMANDS)


def test_every_option_of_every_command_says_what_it_is(monkeypatch, capsys):
    """Issue 31: each command's --help, with every add_argument call recorded; an option without help text fails."""
    import argparse

    missing, original = [], argparse._ActionsContainer.add_argument

    def recording(self, *args, **kwargs):
        action = original(self, *args, **kwargs)
        if action.option_strings and action.help is None:
            missing.append(f"{command} {action.option_strings[0]}")
        return action

    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", recording)
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            entry(command)(["--help"])
    capsys.readouterr()
    assert missing == []


def test_no_deepspeed_accelerator_notice_without_ds_accelerator_set(tmp_path, monkeypatch, capfd):
    """Issue 48: DeepSpeed's "Setting accelerator to CPU ..." came once per process of a CPU run unless the caller
    set DS_ACCELERATOR (only demo.sh did). The package drops it in its own processes and sets DS_ACCELERATOR=cpu for
    the jobs it launches where DeepSpeed would find no accelerator (their launchers do not import the package)."""
    from ds_minimodel.pipeline import launching

    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    proc = subprocess.run([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", "configs/demo.json", "--list"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert "accelerator" not in proc.stdout + proc.stderr and "step1-base" in proc.stdout
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    job = tmp_path / "job.py"
    job.write_text("import os\nprint('DS_ACCELERATOR', os.environ.get('DS_ACCELERATOR'))\n")
    launching.launch(str(job), [], 1)
    import torch

    shown = capfd.readouterr().out
    assert f"DS_ACCELERATOR {'None' if torch.cuda.is_available() else 'cpu'}" in shown, shown

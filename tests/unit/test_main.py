"""``ds-minimodel <command>``: one entry for every tool; each command is the module's own ``main``."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from ds_minimodel.__main__ import COMMANDS, main


def test_every_command_names_a_module_with_a_main():
    for name, (module, _) in COMMANDS.items():
        assert callable(importlib.import_module(module).main), name


def test_a_command_runs_its_module_and_an_unknown_one_is_refused(capsys):
    assert main(["flops", "paper"]) == 0
    assert "Step 1, 12 layers (A1)" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err
    assert main([]) == 0  # alone: what it is, the commands and the hint (issue 31)
    out = capsys.readouterr().out
    assert out.startswith("ds-minimodel: mini-model adaptation") and "commands:" in out
    assert "`ds-minimodel <command> --help`" in out and all(name in out for name in COMMANDS)


@pytest.mark.parametrize("entry", [["-m", "ds_minimodel"], None])
def test_the_console_script_and_python_m_list_the_commands(entry):
    cmd = [sys.executable, *entry, "--help"] if entry else [str(sys.executable).rsplit("/", 1)[0] + "/ds-minimodel",
                                                             "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert all(name in out for name in COMMANDS)

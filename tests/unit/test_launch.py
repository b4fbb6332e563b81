"""The hostfile launcher: checks first, then DeepSpeed's command line (the real multi-host run is in
tests/integration/test_cluster.py)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from ds_minimodel.cluster import launch
from ds_minimodel.cluster.launch import ENTRY_SCRIPTS, entry_script, local_command, main, option_value
from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.workers import SCRIPT, launch_command

REPO = Path(__file__).resolve().parents[2]


def test_option_value_forms():
    assert option_value(["--a", "1", "--ds-config", "x.json"], "--ds-config") == "x.json"
    assert option_value(["--ds-config=y.json"], "--ds-config") == "y.json"
    assert option_value(["--ds-configs", "z"], "--ds-config") is None


def test_per_node_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    hostfile = tmp_path / "h"
    hostfile.write_text("node-a slots=1\nnode-b slots=1\n")
    assert main(["--hostfile", str(hostfile), "--no-ssh", "--node-rank", "1", "--master-addr", "10.0.0.1",
                 "--print", "run_pretrain.py", "--ds-config", "ds_configs/cpu_fp32.json", "--steps", "3"]) == 0
    cmd = capsys.readouterr().out.split()
    assert cmd[1:] == ["--hostfile", str(hostfile), "--master_addr", "10.0.0.1", "--master_port", "29500", "--no_ssh",
                       "--node_rank=1", "--num_nodes", "2", "--num_gpus", "1", "run_pretrain.py", "--ds-config",
                       "ds_configs/cpu_fp32.json", "--steps", "3"]


@pytest.mark.parametrize("hosts, args, problem", [
    ("a slots=1\nb slots=2\n", ["--no-ssh"], "--no-ssh needs the same slots on every host"),
    ("a slots=1\n", ["--no-ssh", "--node-rank", "1"], "--node-rank 1 but the hostfile has 1 host"),
    ("a slots=1\n", ["--master-addr", "$(reboot)"], "is not a host name"),
    ("a slots=3\n", [], "cpu_fp32.json on .* \\(3 ranks\\)"),
    ("a slots=x\n", [], ":1: slots must be a positive integer"),
])
def test_nothing_starts_when_a_check_fails(tmp_path, capsys, monkeypatch, hosts, args, problem):
    monkeypatch.chdir(REPO)
    hostfile = tmp_path / "h"
    hostfile.write_text(hosts)
    assert main(["--hostfile", str(hostfile), *args, "run_pretrain.py", "--ds-config", "ds_configs/cpu_fp32.json"]
                ) == 2
    assert re.search(problem, capsys.readouterr().err)


def test_an_entry_script_without_its_ds_config_starts_no_rank(tmp_path, capsys, monkeypatch):
    """Issue 30: both ranks used to start and die in argparse, 40 lines."""
    monkeypatch.chdir(REPO)
    hostfile = tmp_path / "h"
    hostfile.write_text("localhost slots=2\n")
    assert main(["--hostfile", str(hostfile), "run_pretrain.py", "--steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: run_pretrain.py needs --ds-config <DeepSpeed JSON> (or --config <spec JSON>) among its " \
                  "arguments (after the script name); no rank was started"
    # A spec file names it: its batch is checked against the hostfile's slots as the option's would be.
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"stage": "pretrain", "ds_config": "ds_configs/cpu_fp32.json"}))
    assert main(["--hostfile", str(hostfile), "--print", "run_pretrain.py", "--config", str(spec)]) == 0
    spec.write_text(json.dumps({"stage": "pretrain"}))
    assert main(["--hostfile", str(hostfile), "run_pretrain.py", "--config", str(spec)]) == 2
    assert f"{spec}: a stage spec names its DeepSpeed JSON" in capsys.readouterr().err


def test_local_command_for_each_single_machine_launcher() -> None:
    assert local_command("torchrun", 2, 29500, "run_adapt.py", ["--steps", "3"]) == [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29500",
        "run_adapt.py", "--steps", "3"]
    deepspeed = local_command("deepspeed", 2, 29500, "run_adapt.py", [])
    assert Path(deepspeed[0]).name == "deepspeed" and deepspeed[1:] == [
        "--num_gpus", "2", "--master_port", "29500", "--log_level=error", "run_adapt.py"]
    assert "--log_level=info" in local_command("deepspeed", 2, 29500, "run_adapt.py", [], verbose=True)
    assert local_command("fork", 2, 29500, "run_adapt.py", ["--steps", "3"]) == [
        sys.executable, "-m", "ds_minimodel.stages.forkrun", "--nproc", "2", "--master-port", "29500",
        "run_adapt.py", "--steps", "3"]
    with pytest.raises(ValueError, match="srun"):
        local_command("srun", 2, 29500, "run_adapt.py", [])


def test_the_pipelines_launches_start_its_entry_scripts_by_path_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the checkout: a user's own folder
    for name in (SCRIPT, *ENTRY_SCRIPTS):
        assert entry_script(name) == str(REPO / name)
    assert launch_command(SCRIPT, ["--queue", "q"], 1, "fork") == [sys.executable, str(REPO / SCRIPT), "--queue", "q"]
    assert launch_command("run_adapt.py", [], 2, "srun")[-1] == str(REPO / "run_adapt.py")
    assert str(REPO / SCRIPT) in launch_command(SCRIPT, [], 2, "torchrun")
    # An install that is not editable has them beside the interpreter (setup.cfg's scripts); with neither, one line.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / SCRIPT).write_text("")
    monkeypatch.setattr(launch, "CHECKOUT", tmp_path / "site-packages")
    monkeypatch.setattr(launch.sysconfig, "get_path", lambda name: str(bin_dir))
    assert entry_script(SCRIPT) == str(bin_dir / SCRIPT)
    with pytest.raises(InputError, match=r"run_adapt.py: the package's entry script is neither in .*site-packages"
                                         r" nor in .*bin; install the package from its checkout"):
        entry_script("run_adapt.py")

"""The fork launcher (``ds_minimodel/stages/forkrun.py``, ``--launcher fork``): CPU ranks forked from one interpreter
that imported torch and DeepSpeed once. That its ranks train what torchrun's train is test_cluster.py's; here, what a
launcher owes its ranks: a signal to its process group (a terminal's Ctrl-C) reaches each rank once, and they save
and exit 130; a launcher killed outright leaves ranks that notice, save and exit; a rank that fails stops the others
and is the launch's status; a machine where DeepSpeed would use an accelerator is refused before anything starts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ds_minimodel.cluster.launch import free_port, local_command
from ds_minimodel.stages.forkrun import _status
from ds_minimodel.train import checkpoint
from tests.integration.conftest import RANK_VARS, REPO, fork_cmd, run_cmd, updates_logged

pytestmark = pytest.mark.slow

# test_reliability.py's tiny two-layer run, here on two ranks
TINY = ["--variant", "base", "--preset", "tiny", "--model-config", "tests/fixtures/two_layers.json", "--seq-len", "64",
        "--ds-config", "ds_configs/cpu_fp32.json", "--log-every", "1", "--save-every", "100", "--steps", "400"]


def start(cmd: list[str], **env: str) -> subprocess.Popen:
    """In a session of its own, as the pipeline starts a job (its process group is the launcher's alone)."""
    base = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    base.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **env)
    return subprocess.Popen(cmd, cwd=REPO, env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.mark.parametrize("how", ["Ctrl-C", "SIGKILL"])
def test_the_ranks_save_and_exit_once_their_launcher_is_signalled_or_killed(en_data, tmp_path, how):
    out = tmp_path / "run"
    launcher = start(fork_cmd(2, "run_pretrain.py", *TINY, "--data", str(en_data), "--out", str(out)))
    try:
        deadline = time.monotonic() + 180
        while updates_logged(out) < 3:
            assert launcher.poll() is None, launcher.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "timed out waiting for training"
            time.sleep(0.05)
        if how == "Ctrl-C":  # what a terminal does: SIGINT to the foreground process group, here the launcher's
            os.killpg(launcher.pid, signal.SIGINT)
        else:
            launcher.send_signal(signal.SIGKILL)
        output, _ = launcher.communicate(timeout=120)  # EOF: every process holding the pipe (the ranks) has ended
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    latest = checkpoint.latest_checkpoint(out)
    assert latest is not None, output[-3000:]  # saved where they stopped (a second SIGINT stops without saving)
    step = checkpoint.load_meta(latest).step
    assert 3 <= step < 400, output[-3000:]
    if how == "Ctrl-C":
        # one SIGINT each: a second one would have stopped them at once, without saving
        assert launcher.returncode == 130, output[-3000:]
        assert "SIGINT: saved" in output and "KeyboardInterrupt" not in output, output[-3000:]
        assert f"stopped by SIGINT at update {step:,} of 400" in output, output[-3000:]
    else:
        assert launcher.returncode == -signal.SIGKILL
        # rank 0 prints; when rank 1 notices first, rank 0 stops for its peer (they stop together, as under any
        # launcher)
        assert "its launcher ended: saved" in output or "a peer's signal: saved" in output, output[-3000:]


def test_a_failed_rank_stops_the_others_and_is_the_launchs_status(tmp_path):
    script = tmp_path / "job.py"
    ready = tmp_path / "rank0-said-it"
    script.write_text("import os, sys, time\n"
                      "rank = int(os.environ['RANK'])\n"
                      "print(f\"rank {rank} of {os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']} at "
                      "{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}\", flush=True)\n"
                      "if rank == 1:  # once rank 0 has said its line\n"
                      f"    while not os.path.exists({str(ready)!r}):\n        time.sleep(0.01)\n"
                      "    sys.exit(3)\n"
                      f"open({str(ready)!r}, 'w').close()\n"
                      "time.sleep(120)\n")
    port = free_port()
    launcher = start(local_command("fork", 2, port, str(script), []))
    try:
        output, _ = launcher.communicate(timeout=60)  # rank 0 would sleep 120 s unless stopped
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 3, output
    lines = output.splitlines()
    for rank in (0, 1):
        assert f"rank {rank} of 2 local {rank} at 127.0.0.1:{port}" in lines, output
    assert "forkrun: a rank exited with 3; stopping the other ranks" in lines, output


def test_an_accelerator_is_refused_before_anything_starts(tmp_path):
    proc = run_cmd([sys.executable, "-m", "ds_minimodel.stages.forkrun", "--nproc", "2", "--master-port", "29500",
                    str(tmp_path / "never.py")], check=False, timeout=60, env={"DS_ACCELERATOR": "cuda"})
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.strip() == (
        "forkrun: the fork launcher starts CPU ranks only and DS_ACCELERATOR is 'cuda' (CUDA cannot be used in a "
        "process forked after it was looked for): use --launcher deepspeed or torchrun"), proc.stderr


def test_a_rank_ended_by_a_signal_is_128_plus_its_number():
    assert _status(3 << 8) == 3 and _status(0) == 0
    assert _status(signal.SIGKILL) == 128 + signal.SIGKILL  # the wait status of a process killed by SIGKILL

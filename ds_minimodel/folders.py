"""Output folders: what a command may write into, and one live writer per folder.

A command writes only into a folder that is new, empty, or already its own output of the same kind (a run it
resumes, a data folder it re-prepares); anything else is refused with one line saying what the folder holds, before
any work starts. A folder being written is claimed with an exclusive ``flock`` on ``<folder>/.writer.lock``: the
kernel releases it when the writer ends, however it ends (SIGKILL included), so a dead writer never blocks a
resume, while a live one (another run, another pipeline) makes the second refuse, naming its host and process.
No torch here.
"""
from __future__ import annotations

import fcntl
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ds_minimodel.errors import InputError

LOCK = ".writer.lock"
_HIDDEN = (LOCK,)
_held: dict[Path, IO[str]] = {}  # this process's claims, held until it exits


def describe(folder: Path) -> str:
    """What an existing folder holds, in a few words, for refusals."""
    folder = Path(folder)
    names = sorted(p.name for p in folder.iterdir() if p.name not in _HIDDEN)
    if "run.json" in names or "checkpoints" in names:
        return "a training run (run.json, checkpoints/)"
    if "meta.json" in names and "model.pt" in names:
        return "a model folder or checkpoint (meta.json, model.pt)"
    if "meta.json" in names and any(n.startswith("tokens_") for n in names):
        return "a prepared data folder (meta.json, token shards)"
    if "config.json" in names:
        return "a Hugging Face model folder (config.json)"
    if "results.json" in names or "step1" in names:
        return "a pipeline's output (results.json, step folders)"
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"{len(names)} other {'entry' if len(names) == 1 else 'entries'} ({shown})"


def require_output(out: Path, *, option: str = "--out", own: Callable[[Path], bool] | None = None,
                   what: str = "its output", source: Path | str | None = None) -> None:
    """Refuse ``out`` unless it is new, an empty folder, or (``own``) already this command's output of the same
    kind, which the command then continues or replaces as it documents. ``source``: the file whose ``option``
    names ``out`` (a config), which the error then names first."""
    out = Path(out)
    if not out.exists():
        return
    named = f"{out}: {option}" if source is None else f"{source}: {option} {out}"
    if not out.is_dir():
        raise InputError(f"{named} names an existing file, not a folder; choose another {option}")
    if not any(p.name not in _HIDDEN for p in out.iterdir()):
        return
    if own is not None and own(out):
        return
    raise InputError(f"{named} already holds {describe(out)}; this command writes {what} only into a new "
                     f"or empty folder; choose another {option}")


def live_writer(folder: Path) -> str | None:
    """Who writes ``folder`` now (its lock file's line, as ``claim`` wrote it) when a process of this machine holds
    the lock, else None: no writer, or one on another host, whose lock this kernel cannot see. Reads the kernel's
    table of locks (``/proc/locks``; None where there is none) rather than trying the lock, which for that instant
    would refuse a writer starting. A lock counts when it is on the lock file's inode number and held by the process
    the file names: the table's device numbers differ from ``stat``'s on some filesystems (btrfs, overlayfs)."""
    path = Path(folder) / LOCK
    try:
        inode = str(path.stat().st_ino)
        text = path.read_text(encoding="utf-8").strip()
        table = Path("/proc/locks").read_text(encoding="utf-8")
    except OSError:
        return None
    named = re.search(r"\(pid (\d+) on ", text)
    for line in table.splitlines():  # "1: FLOCK  ADVISORY  WRITE 26567 fe:00:5505663 0 EOF": pid, major:minor:inode
        fields = line.split()
        if (len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == inode
                and (named is None or fields[4] == named.group(1))):
            return text or "a process"
    return None


def claim(folder: Path, what: str) -> None:
    """Make this process the one live writer of ``folder`` until it exits (see the module docstring)."""
    folder = Path(folder).resolve()
    if folder in _held:
        return
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the process's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise InputError(f"{folder}: in use by {holder}; one run writes a folder at a time (wait for it to end, "
                         "or stop it first)") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{what} (pid {os.getpid()} on {socket.gethostname()})\n")
    handle.flush()
    _held[folder] = handle

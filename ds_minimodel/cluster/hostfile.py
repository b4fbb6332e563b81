"""DeepSpeed hostfiles, checked before anything starts (``python -m ds_minimodel hostfile``).

The format is DeepSpeed's (and Open MPI's): one ``<host> slots=<N>`` per line, where N is the number of processes
(GPUs) on that host; ``#`` starts a comment; blank lines are ignored. Refused, each naming the file and line:
a line that is not ``host slots=N``, a missing, non-integer or non-positive slot count, a host listed twice, and a
host name that is not a valid host name (RFC 1123 letters, digits, hyphens and dots, plus the underscores of names
such as Docker Compose's ``project_service_1``, which resolvers and ssh accept; or an IPv4 address), so that nothing
a shell would interpret reaches pdsh or ssh.

    python -m ds_minimodel hostfile hostfiles/v100_64gpu --ds-config ds_configs/v100_fp16_zero1.json

prints the hosts, the total slots and the batch arithmetic for that many ranks.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from ds_minimodel.config import read_text
from ds_minimodel.ds_config import BatchSizes, load_ds_config, resolve_batch
from ds_minimodel.errors import InputError, report

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_IPV4 = re.compile(r"^(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)$")


def valid_host(name: str) -> bool:
    return len(name) <= 253 and bool(_HOSTNAME.match(name) or _IPV4.match(name))


def read_hostfile(path: Path) -> dict[str, int]:
    """{host: slots} in file order; an InputError names the file, the line and the problem."""
    path = Path(path)
    text = read_text(path, "hostfile")
    if text.startswith("\ufeff"):
        # DeepSpeed's launcher reads the file too, and would take the mark as part of the first host's name.
        raise InputError(f"{path}:1: starts with a byte-order mark (some editors add one); save it as plain UTF-8")
    hosts: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        fields = line.split()
        host = fields[0]
        if not valid_host(host):
            raise InputError(f"{where}: {host!r} is not a valid host name (letters, digits, '-', '_' and '.' only, "
                             "not starting with '-')")
        slots = [f for f in fields[1:] if f.startswith("slots=")]
        if len(fields) != 2 or len(slots) != 1:
            raise InputError(f"{where}: expected '<host> slots=<number of GPUs>', got {line!r}")
        value = slots[0][len("slots="):]
        if not value.isdigit() or int(value) <= 0:
            raise InputError(f"{where}: slots must be a positive integer, got {value!r}")
        if host in hosts:
            raise InputError(f"{where}: host {host!r} is listed twice")
        hosts[host] = int(value)
    if not hosts:
        raise InputError(f"{path}: no hosts (only comments or blank lines)")
    return hosts


def check_batch(hostfile: Path, hosts: dict[str, int], ds_config: Path) -> BatchSizes:
    """The batch sizes of ``ds_config`` on the hostfile's total slots; an InputError says what does not divide."""
    total = sum(hosts.values())
    return resolve_batch(load_ds_config(Path(ds_config)), total, source=f"{ds_config} on {hostfile} ({total} ranks)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ds-minimodel hostfile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("hostfile", type=Path)
    p.add_argument("--ds-config", type=Path, help="check the batch sizes against the hostfile's total slots")
    args = p.parse_args(argv)
    try:
        hosts = read_hostfile(args.hostfile)
        total = sum(hosts.values())
        print(f"{args.hostfile}: {len(hosts)} host(s), {total} slot(s): "
              + ", ".join(f"{h} x{n}" for h, n in hosts.items()))
        if args.ds_config is not None:
            batch = check_batch(args.hostfile, hosts, args.ds_config)
            print(f"{args.ds_config}: global batch {batch.global_batch} = micro {batch.micro} x accumulation "
                  f"{batch.accumulation} x {batch.world_size} ranks")
    except InputError as err:
        return report(err)
    return 0

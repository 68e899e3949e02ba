"""Observing a process from the outside: its TCP connections (from /proc) and its metrics."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_ESTABLISHED = "01"


def established_local_ports(pid: int, remote_port: int) -> set[int]:
    """Local ports of `pid`'s ESTABLISHED TCP connections to `remote_port` (any address): which
    connections a process holds, without asking it (Linux /proc; the sockets' inodes are matched
    to the process's file descriptors)."""
    inodes: set[str] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state == _ESTABLISHED and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def metric_value(text: str, name: str, labels: dict[str, str]) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0

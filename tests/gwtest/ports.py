"""Ports for the tests' private servers (throwaway brokers, cluster nodes, proxies, operators' metrics),
chosen below the kernel's ephemeral range.

A port found free by binding port 0 comes from the ephemeral range (net.ipv4.ip_local_port_range,
32768-60999 by default), the range the kernel also hands out as the local port of every outgoing
connection. Between the moment a test picks such a port and the moment its server binds it (a JVM,
seconds later), or while a throwaway broker is down for an outage or a node restart, any client socket
on the machine may take it, and the server fails with "Address already in use" though nothing listens
a second later (CI failed this way: a throwaway broker's `kafka.sh up`). Ports below that range are
never given to a connect, only to an explicit bind, so a port checked free here stays free until a
test server binds it. Each pytest-xdist worker draws from its own slice of the pool, so two workers
never pick the same port, and one process never hands out the same port twice.

Ports are handed out on a stride of 8, each with its next 3 checked free too: the scripts derive
ports from the ones they are given (etcd's peer port is ETCD_PORT+1, Kafka's pod listener
KAFKA_PORT+3), and consecutive ports once made a control plane's apiserver port its etcd's peer port.

The devstack's fixed ports (docs/devstack-kafka.md, docs/devstack-k8s.md) sit in 22000-29999, above
this pool and below the ephemeral range, for the same reason.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

POOL_START, POOL_END = 12000, 20000  # [start, end); the kubelet's 10250-10251 stay below it
_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_lock = threading.Lock()
_next: int | None = None


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for connections' local ports (Linux's default when unreadable)."""
    try:
        low, high = _PORT_RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def worker_slice(worker: str | None, workers: int) -> range:
    """This process's ports: the pool below the ephemeral range, split evenly among xdist workers
    (`gw0`, `gw1`, ...); the whole pool when not under xdist."""
    end = min(POOL_END, ephemeral_range()[0])
    if end - POOL_START < 64:  # a machine whose ephemeral range starts very low: no safe pool
        return range(0)
    if not worker or not worker.startswith("gw") or workers < 2:
        return range(POOL_START, end)
    index = int(worker[2:]) % workers
    size = (end - POOL_START) // workers
    start = POOL_START + index * size
    return range(start, start + size)


STRIDE, NEIGHBOURS = 8, 3


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _usable(port: int) -> bool:
    return all(_bindable(p) for p in range(port, port + NEIGHBOURS + 1))


def free_port() -> int:
    """A port nothing on 127.0.0.1 holds now, that no connection will take before a server binds it."""
    ports = worker_slice(
        os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    )
    if not ports:
        with socket.socket() as sock:  # the old way, the only one left on such a machine
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    slots = range(ports.start, ports.stop - NEIGHBOURS, STRIDE)
    global _next
    with _lock:
        if _next is None:
            # A different start per process: a rerun soon after does not meet ports in TIME_WAIT.
            _next = os.getpid() % len(slots)
        for _ in range(len(slots)):
            port = slots[_next % len(slots)]
            _next += 1
            if _usable(port):
                return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")

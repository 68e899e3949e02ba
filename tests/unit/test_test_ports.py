"""The tests' port pool (tests/gwtest/ports.py): below the ephemeral range, one slice per xdist
worker, never the same port twice, never a port someone holds."""

from __future__ import annotations

import os
import socket
from itertools import pairwise
from pathlib import Path

import pytest

from gwtest import ports


def test_the_pool_lies_below_the_kernels_ephemeral_range() -> None:
    low, _ = ports.ephemeral_range()
    pool = ports.worker_slice(None, 1)
    if low < ports.POOL_START + 64:
        pytest.skip(reason=f"this machine's ephemeral range starts at {low}: no pool below it")
    assert pool.start == ports.POOL_START and pool.stop <= low


def test_workers_draw_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "_PORT_RANGE_FILE", range_file)
    slices = [set(ports.worker_slice(f"gw{i}", 3)) for i in range(3)]
    assert all(len(s) > 2000 for s in slices)
    assert not (slices[0] & slices[1]) and not (slices[1] & slices[2]) and not (slices[0] & slices[2])
    assert max(max(s) for s in slices) < 20000


def test_a_machine_whose_ephemeral_range_starts_low_has_no_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "_PORT_RANGE_FILE", range_file)
    assert ports.worker_slice("gw0", 2) == range(0)
    port = ports.free_port()  # falls back to a port the kernel chooses
    assert 0 < port < 65536


@pytest.fixture
def private_pool(monkeypatch: pytest.MonkeyPatch) -> int:
    """A pool of 256 ports of this test's own, handed out from its start: between the tests' pool
    and the devstack's ports, where no server binds, so a server that another xdist worker's test
    runs meanwhile cannot hold one of them (the tests' own pool is in use while the suite runs)."""
    start = 20_000 + (os.getpid() % 7) * 256
    if ports.ephemeral_range()[0] < start + 256:
        pytest.skip(reason="no room below this machine's ephemeral range")
    monkeypatch.setattr(ports, "POOL_START", start)
    monkeypatch.setattr(ports, "POOL_END", start + 256)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(ports, "_next", 0)
    return start


def test_free_ports_are_distinct_bindable_and_skip_a_held_one(private_pool: int) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", private_pool))
        held.listen()
        handed = [ports.free_port() for _ in range(20)]
    assert private_pool not in handed  # held: skipped
    assert len(set(handed)) == len(handed)
    for port in handed:
        for neighbour in range(port, port + ports.NEIGHBOURS + 1):  # e.g. etcd's peer port, +1
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", neighbour))
    handed.sort()
    assert all(b - a >= ports.STRIDE for a, b in pairwise(handed))


def test_a_port_whose_neighbour_is_held_is_skipped(private_pool: int) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", private_pool + 1))  # the first slot's +1
        held.listen()
        assert ports.free_port() == private_pool + ports.STRIDE

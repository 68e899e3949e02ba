"""A local session returns with its Python workers started (fleet/session.py `start_python_workers`):
the worker daemon and a worker per core are up before the audit's first task asks for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")


def _children(pid: int) -> list[int]:
    """The process's children, from each of its threads' `children` list (Linux)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def python_workers_of(jvm_pid: int) -> tuple[list[int], list[int]]:
    """(daemons, workers): the JVM's worker daemons and the workers they forked."""
    daemons = [p for p in _children(jvm_pid) if "groupwarden.fleet.worker_daemon" in _cmdline(p)]
    workers = [w for d in daemons for w in _children(d)]
    return daemons, workers


def test_a_local_session_starts_with_a_python_worker_per_core() -> None:
    from groupwarden.fleet.session import start_session

    session: Any
    session, owned = start_session("local[2]", kafka_source=False)
    try:
        assert owned
        jvm_pid = int(session.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        # before anything else runs in the session
        daemons, workers = python_workers_of(jvm_pid)
        assert len(daemons) == 1, daemons
        assert len(workers) >= session.sparkContext.defaultParallelism == 2, workers
    finally:
        if owned:
            session.stop()


def test_the_workers_job_has_a_task_per_core() -> None:
    from groupwarden.fleet import session as module

    ran: list[tuple[int, int, int, int]] = []

    class Frame:
        def __init__(self, start: int, end: int, step: int, slices: int) -> None:
            self.args = (start, end, step, slices)

        def mapInArrow(self, function: Any, schema: str) -> Frame:
            assert schema == "id long"
            return self

        def toArrow(self) -> None:
            ran.append(self.args)

    class Context:
        defaultParallelism = 3

    class Session:
        sparkContext = Context()

        def range(self, start: int, end: int, step: int, slices: int) -> Frame:
            return Frame(start, end, step, slices)

    module.start_python_workers(Session())
    assert ran == [(0, 3, 1, 3)]

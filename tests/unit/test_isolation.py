"""The parallel run's declarations (tests/gwtest/isolation.py): the table names real modules and
tests, the schedule puts long units first and alone tests last, and the run lock lets an alone
test run with nothing else."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from gwtest import isolation


def test_every_declared_module_and_alone_test_exists() -> None:
    for name, (reason, modules) in isolation.SERIAL_GROUPS.items():
        assert reason and modules, name
        for module in modules:
            assert (isolation.TESTS / module).exists(), f"group {name}: {module} does not exist"
    for nodeid, reason in isolation.ALONE.items():
        module, function = nodeid.split("::")
        source = (isolation.TESTS / module).read_text()
        assert re.search(rf"^def {function}\(", source, re.M), nodeid
        assert reason


def test_a_module_is_in_one_group_at_most() -> None:
    for module in (p.relative_to(isolation.TESTS).as_posix() for p in isolation.TESTS.rglob("test_*.py")):
        owners = [
            name
            for name, (_, modules) in isolation.SERIAL_GROUPS.items()
            if any(module == m or (m.endswith("/") and module.startswith(m)) for m in modules)
        ]
        assert len(owners) <= 1, (module, owners)


def test_units_are_modules_groups_or_alone() -> None:
    assert isolation.group_of("tests/unit/test_crd.py::test_x[a-b]") == "unit/test_crd.py"
    assert isolation.group_of("tests/unit/fleet/test_fleet_pipeline.py::test_x") == "spark"
    assert isolation.group_of("tests/e2e/test_node_image.py::test_x") == "node"
    alone = next(iter(isolation.ALONE))
    assert isolation.group_of(f"tests/{alone}") == isolation.ALONE_GROUP
    module = alone.split("::")[0]
    assert isolation.group_of(f"tests/{module}::another_test") == module


def test_the_schedule_starts_the_longest_unit_and_ends_with_the_alone_tests() -> None:
    alone = f"tests/{next(iter(isolation.ALONE))}"
    ids = [
        "tests/unit/test_a.py::t1",
        alone,
        "tests/integration/test_streams_groups.py::t1",
        "tests/unit/test_a.py::t2",
        "tests/e2e/test_b.py::t1",
        "tests/integration/test_offsets_log_modern_groups.py::t1",
    ]
    durations = {
        "unit/test_a.py": 1.0,
        "e2e/test_b.py": 100.0,
        "integration/test_streams_groups.py": 60.0,
        "integration/test_offsets_log_modern_groups.py": 50.0,
    }
    assert isolation.unit_order(ids, durations) == [
        "tests/integration/test_streams_groups.py::t1",  # wordcount: 110 s in all
        "tests/integration/test_offsets_log_modern_groups.py::t1",
        "tests/e2e/test_b.py::t1",
        "tests/unit/test_a.py::t1",
        "tests/unit/test_a.py::t2",
        alone,
    ]


def test_an_exclusive_holder_waits_for_every_shared_one_and_blocks_new_ones(tmp_path: Path) -> None:
    lock = isolation.RunLock(tmp_path)
    first = lock.acquire(exclusive=False)
    writer_has_it, reader_has_it = threading.Event(), threading.Event()
    order: list[str] = []

    def writer() -> None:
        fd = lock.acquire(exclusive=True)
        order.append("writer")
        writer_has_it.set()
        lock.release(fd)

    def reader() -> None:
        fd = lock.acquire(exclusive=False)
        order.append("reader")
        reader_has_it.set()
        lock.release(fd)

    threads = [threading.Thread(target=writer)]
    threads[0].start()
    assert not writer_has_it.wait(0.3), "an exclusive lock while a unit holds it shared"
    threads.append(threading.Thread(target=reader))
    threads[1].start()
    assert not reader_has_it.wait(0.3), "a new unit started while an alone test was waiting"
    lock.release(first)
    assert writer_has_it.wait(10) and reader_has_it.wait(10)
    for thread in threads:
        thread.join(10)
    assert order == ["writer", "reader"]


def test_shared_holders_do_not_wait_for_each_other(tmp_path: Path) -> None:
    lock = isolation.RunLock(tmp_path)
    held = [lock.acquire(exclusive=False) for _ in range(4)]
    for fd in held:
        lock.release(fd)

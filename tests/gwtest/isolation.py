"""How the suite runs in parallel (pytest-xdist, `--dist loadgroup`): what may share the machine,
declared here in one table instead of assumed.

- Every module is one work unit: its tests run in order on one worker, so module fixtures (a
  private broker, a Spark session, Toxiproxy, the image venv) start once.
- `SERIAL_GROUPS`: modules that share one resource run one after another on one worker (a group
  is one work unit). Different groups and ordinary modules run side by side.
- `ALONE`: tests that must have the machine to themselves (an assertion about the whole broker).
  They run last, each under an exclusive lock that waits until every other worker has finished
  the module it is in and lets none start (`RunLock`).
- Units start longest first (`tests/durations.json`, measured by `make test-durations`), so the
  long real-system modules do not end up as a tail on one worker while the others idle.

Uniqueness of names stays the rule for everything else: each test makes its own groups, topics,
namespaces and policies (`unique_name`), operators watch only their test's namespace, and private
brokers and API servers take free ports.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DURATIONS_FILE = TESTS / "durations.json"

# group -> (the shared resource, its modules or directories). A module is in at most one group.
SERIAL_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "wordcount": (
        "Kafka's WordCountDemo reads and writes the fixed topics streams-plaintext-input and "
        "streams-wordcount-output from the earliest offset: two apps at once count each other's words",
        (
            "integration/test_streams_groups.py",
            "integration/test_offsets_log_modern_groups.py",
            "integration/test_fleet_audit_share_streams.py",
            "e2e/test_operator_share_streams.py",
        ),
    ),
    "node": (
        "the devstack's one node, its dockerd and containerd: the modules build the Dockerfile "
        "with devstack/node.sh (one build directory, one wheelhouse, one stamp), the chart and image "
        "ones the tag groupwarden:dev, the release its version's tag",
        (
            "e2e/test_node_chart.py",
            "e2e/test_node_image.py",
            "e2e/test_node_release.py",
            "e2e/test_node_upgrade.py",
        ),
    ),
    "spark": (
        "CPU and memory: Spark JVMs (a local[2] session per module, a standalone master with two "
        "workers, audit drivers) would starve each other and the brokers' request threads",
        (
            "unit/fleet/",
            "integration/test_fleet_audit.py",
            "integration/test_fleet_standalone.py",
            "integration/test_fleet_jvm_class_data_archive.py",
        ),
    ),
    "private-jvms": (
        "CPU and memory: each module runs a private Kafka broker JVM or a private etcd + "
        "kube-apiserver that it stops and restarts; the operators under test use 5 s Leases",
        (
            "e2e/test_operator_faults.py",
            "e2e/test_operator_proxy_faults.py",
            "e2e/test_operator_outage.py",
            "e2e/test_operator_apiserver_faults.py",
            "integration/test_oauthbearer.py",
            "e2e/test_operator_oauthbearer.py",
        ),
    ),
    "cluster3": (
        "CPU and memory: a private 3-node Kafka cluster (three broker JVMs, started once per "
        "worker: the session fixture kafka_cluster3) whose nodes are killed and restarted under "
        "plan, apply and operator passes; the failover modules share it one at a time",
        ("integration/test_failover_cluster.py", "e2e/test_operator_failover.py"),
    ),
    "race": (
        "CPU: the race campaigns run many client threads, a Kafka Streams JVM and dozens of "
        "Kafka tool JVMs against time windows of the oracle",
        (
            "integration/test_race_campaign.py",
            "e2e/test_race_campaign_operator.py",
            "integration/test_race_on_real_broker.py",
        ),
    ),
}

# Test node ids (relative to tests/) that run with nothing else running, and why.
ALONE: dict[str, str] = {
    "integration/test_offsets_log_real.py::test_a_second_read_returns_only_new_records": (
        "asserts that nothing at all was written to __consumer_offsets between two reads"
    ),
}

ALONE_GROUP = "alone"


def relative(nodeid: str) -> str:
    return nodeid.removeprefix("tests/")


def module_of(nodeid: str) -> str:
    return relative(nodeid).split("::", 1)[0]


def group_of(nodeid: str) -> str:
    """The work unit of a test: `alone`, its serial group, or its module."""
    rel = relative(nodeid)
    if rel in ALONE:
        return ALONE_GROUP
    module = module_of(rel)
    for name, (_, modules) in SERIAL_GROUPS.items():
        # An entry is a module, or a directory ("unit/fleet/") for every module under it.
        if any(module == m or (m.endswith("/") and module.startswith(m)) for m in modules):
            return name
    return module


def load_durations() -> dict[str, float]:
    """Seconds per module as last measured (setup + call + teardown of its tests)."""
    if not DURATIONS_FILE.exists():
        return {}
    data: dict[str, float] = json.loads(DURATIONS_FILE.read_text())["modules"]
    return data


def unit_order(nodeids: list[str], durations: dict[str, float]) -> list[str]:
    """The node ids ordered by work unit: longest unit first, `alone` last; tests keep their
    collection order inside a unit. A module never measured counts as a minute (a new real-system
    module is more likely long than short)."""
    modules: dict[str, set[str]] = {}
    first_seen: dict[str, int] = {}
    for index, nodeid in enumerate(nodeids):
        group = group_of(nodeid)
        first_seen.setdefault(group, index)
        modules.setdefault(group, set()).add(module_of(nodeid))
    seconds = {group: sum(durations.get(m, 60.0) for m in found) for group, found in modules.items()}

    def key(nodeid: str) -> tuple[bool, float, int]:
        group = group_of(nodeid)
        return (group == ALONE_GROUP, -seconds[group], first_seen[group])

    return sorted(nodeids, key=key)


class RunLock:
    """A readers-writer lock over files, shared by the workers of one run: every test holds it
    shared while its module is running on a worker (module fixtures included), an `ALONE` test
    holds it exclusive. A writer waiting in the turnstile stops new readers, so it is not starved
    by workers that keep starting modules."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._turnstile = directory / "turnstile.lock"
        self._lock = directory / "run.lock"

    @contextmanager
    def _flock(self, path: Path, mode: int) -> Iterator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases its lock

    def acquire(self, exclusive: bool) -> int:
        """Returns a descriptor holding the lock; `release` it."""
        with self._flock(self._turnstile, fcntl.LOCK_EX):
            fd = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        return fd

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)

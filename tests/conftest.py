"""Fixtures for all tiers. The tier of a test is its directory: tests/unit, tests/integration, tests/e2e."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import tracemalloc
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from gwtest import isolation

if TYPE_CHECKING:
    from gwtest.kafka_cluster import KafkaCluster

IVY_CACHE_ENV = "GROUPWARDEN_SPARK_IVY_CACHE"  # groupwarden.fleet.session (pyspark is an extra)
os.environ.setdefault(
    "GROUPWARDEN_SPARK_CDS", "0"
)  # no AppCDS dumper (fleet/jvm_class_data.py) outlives a run


def _audit_key_environment() -> None:
    """Every `apply`, operator and `restore` a test starts signs with, and trusts, the suite's fixed
    audit key (groupwarden.testing.audit_keys): what one process writes, another verifies."""
    from groupwarden.testing.audit_keys import write_key_files

    private, public = write_key_files(Path(tempfile.mkdtemp(prefix="groupwarden-audit-keys-")))
    os.environ["GROUPWARDEN_AUDIT_SIGNING_KEY"] = str(private)
    os.environ["GROUPWARDEN_AUDIT_PUBLIC_KEYS"] = str(public)


_audit_key_environment()
_TIER_BY_DIR = {"unit": "unit", "integration": "integration", "e2e": "e2e"}
_GROUP = pytest.StashKey[str]()

# Property tests in `make test` are deterministic: the same examples on every run (a red run is
# reproducible, never a seed that one machine drew), and no per-example deadline (Hypothesis's
# 200 ms default fails a correct test when a parallel suite loads the machine). The wide random
# search is the bench/fuzz_* campaigns' (docs/benchmarks.md, "Fuzzing"); HYPOTHESIS_PROFILE=explore runs the
# property tests with fresh random examples.
settings.register_profile("make-test", deadline=None, derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "make-test"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="write the measured seconds per module to tests/durations.json (make test-durations)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).parent
    for item in items:
        relative = Path(str(item.path)).relative_to(tests_root)
        tier = _TIER_BY_DIR.get(relative.parts[0])
        if tier and not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
        item.stash[_GROUP] = isolation.group_of(item.nodeid)
    order = isolation.unit_order([item.nodeid for item in items], isolation.load_durations())
    position = {nodeid: index for index, nodeid in enumerate(order)}
    items.sort(key=lambda item: position[item.nodeid])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadgroup` with our work units (gwtest/isolation.py) in the order collected here
    (longest first). xdist's own loadgroup reads `xdist_group` marks through the `_nodeid`
    attribute, which pytest 9 no longer uses for `nodeid`: every test became a unit of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return isolation.group_of(nodeid)

    config.option.loadscopereorder = False
    return UnitScheduling(config, log)


class _UnitLock:
    """Holds the run's lock (gwtest/isolation.RunLock) from the first test of a work unit on this
    worker to the teardown of its last one: shared for every unit, exclusive for `alone`."""

    def __init__(self, lock: isolation.RunLock) -> None:
        self.lock = lock
        self.held: tuple[str, int] | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
        group = item.stash[_GROUP]
        if self.held is None:
            self.held = (group, self.lock.acquire(exclusive=group == isolation.ALONE_GROUP))
        try:
            return (yield)
        finally:
            if nextitem is None or nextitem.stash[_GROUP] != group or group == isolation.ALONE_GROUP:
                _, fd = self.held
                self.held = None
                self.lock.release(fd)


class _DurationRecorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = isolation.module_of(report.nodeid)
        self.seconds[module] = self.seconds.get(module, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        rounded = {module: round(s, 1) for module, s in sorted(self.seconds.items())}
        isolation.DURATIONS_FILE.write_text(json.dumps({"modules": rounded}, indent=1) + "\n")


def _session_basetemp(prefix: str) -> Path:
    """`<tmp>/<prefix>-<pid>`, after removing the directories of sessions whose process is gone."""
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"{prefix}-*"):
        owner = old.name.rsplit("-", 1)[-1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(old, ignore_errors=True)
    return base / f"{prefix}-{os.getpid()}"


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None:
        # One base directory per checkout, not pytest's default /tmp/pytest-of-<user>/pytest-N:
        # pytest keeps only a user's last 3 sessions there and deletes older ones when a session
        # starts, so a run in another checkout (a second working tree, a quick unit run) deleted
        # a running suite's directories (seen: a private Kafka cluster and a control plane lost
        # their files while starting). pytest empties a given --basetemp when a session starts,
        # so the directory is also the session's own (its pid): two sessions in one checkout (a
        # unit run beside an integration run) emptied each other's (seen: a private 3-node
        # cluster's data and logs gone while it formatted). Directories of ended sessions go.
        checkout = hashlib.sha1(str(config.rootpath).encode()).hexdigest()[:10]
        config.option.basetemp = str(_session_basetemp(f"groupwarden-tests-{checkout}"))
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if os.environ.get("PYTEST_XDIST_WORKER") and run:
        directory = Path(tempfile.gettempdir()) / f"groupwarden-run-{run}"
        config.pluginmanager.register(_UnitLock(isolation.RunLock(directory)), "groupwarden-unit-lock")
    if config.getoption("--record-durations") and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(_DurationRecorder(), "groupwarden-durations")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The broker the integration and e2e tiers use: KAFKA_BOOTSTRAP_SERVERS, else the devstack's."""
    from gwtest.env import setting

    return setting("KAFKA_BOOTSTRAP_SERVERS", "kafka")


@pytest.fixture(scope="session")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """The private 3-node KRaft cluster of the failover modules (serial group `cluster3`: they
    run one after another on one worker, so it starts once and is purged at the end). Each module
    asks for it `restored()`: a module before it may have left nodes killed."""
    from gwtest.kafka_cluster import kafka_cluster

    with kafka_cluster(tmp_path_factory.mktemp("cluster3")) as started:
        yield started


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names unique to this test run (groups, topics, namespaces never collide between tests)."""
    token = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        return f"{prefix}-{token}"

    return make


@pytest.fixture(autouse=True)
def private_cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own cache home: the CLI's ledger checkpoints (~/.cache/groupwarden) never
    carry state from one test to another (the CLI subprocesses inherit the variable)."""
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    if not os.environ.get(IVY_CACHE_ENV):
        # ... except Spark's Kafka source, which `groupwarden audit` would otherwise fetch from
        # Maven Central into every test's empty cache. One Ivy cache per worker (a worker runs one
        # test at a time; Ivy's cache is not safe for concurrent resolution), kept across runs.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        ivy = Path.home() / ".cache" / "groupwarden" / "test-ivy" / worker
        monkeypatch.setenv(IVY_CACHE_ENV, str(ivy))
    return home


@pytest.fixture(autouse=True)
def tracing_ends_with_its_test() -> Iterator[None]:
    """A test (or the fuzz harness it drives) that leaves tracemalloc running would make every
    later test slower and every later memory measurement count the earlier test's allocations."""
    was_tracing = tracemalloc.is_tracing()
    yield
    if not was_tracing and tracemalloc.is_tracing():
        tracemalloc.stop()

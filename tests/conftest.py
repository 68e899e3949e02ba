"""Fixtures for all tiers. The tier of a test is its directory: tests/unit, tests/integration, tests/e2e."""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_TIER_BY_DIR = {"unit": "unit", "integration": "integration", "e2e": "e2e"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).parent
    for item in items:
        relative = Path(str(item.path)).relative_to(tests_root)
        tier = _TIER_BY_DIR.get(relative.parts[0])
        if tier and not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))


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
    return home


@pytest.fixture(autouse=True)
def tracing_ends_with_its_test() -> Iterator[None]:
    """A test (or the fuzz harness it drives) that leaves tracemalloc running would make every
    later test slower and every later memory measurement count the earlier test's allocations."""
    was_tracing = tracemalloc.is_tracing()
    yield
    if not was_tracing and tracemalloc.is_tracing():
        tracemalloc.stop()

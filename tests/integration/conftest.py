"""Integration tier: a real Kafka broker (KAFKA_BOOTSTRAP_SERVERS, else the devstack's)."""

from __future__ import annotations

import pytest

from gwtest.env import setting


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return setting("KAFKA_BOOTSTRAP_SERVERS", "kafka")

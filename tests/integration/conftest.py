"""Integration tier: a real Kafka broker (KAFKA_BOOTSTRAP_SERVERS, else the devstack's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
from groupwarden.connectivity.settings import settings_from_properties


@pytest.fixture
def gateway(kafka_bootstrap: str) -> Iterator[KafkaAdminGateway]:
    """groupwarden's own Kafka gateway on the broker (unauthenticated listener)."""
    gw = KafkaAdminGateway(settings_from_properties({"bootstrap.servers": kafka_bootstrap}))
    yield gw
    gw.close()

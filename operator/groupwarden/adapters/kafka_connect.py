"""Entry points' one-liner: bootstrap servers + an optional client properties file -> a gateway."""

from __future__ import annotations

from pathlib import Path

from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
from groupwarden.connectivity.settings import settings_from_file


def open_gateway(
    bootstrap_servers: str | None, command_config: str | Path | None = None
) -> KafkaAdminGateway:
    """A gateway for `bootstrap_servers` (wins over `bootstrap.servers` in the file) with the
    Kafka client properties of `command_config` (the `--command-config` file of Kafka's tools).

    Raises ValueError for unreadable or invalid properties (the message names the key, never a
    secret). Connecting happens lazily, on the first call."""
    return KafkaAdminGateway(settings_from_file(bootstrap_servers, command_config))

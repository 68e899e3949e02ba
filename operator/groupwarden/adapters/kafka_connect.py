"""Entry points' one-liner: bootstrap servers + an optional client properties file -> a gateway."""

from __future__ import annotations

from pathlib import Path

from groupwarden.adapters.kafka_config import load_properties_file, settings_from_properties
from groupwarden.adapters.kafka_gateway import KafkaAdminGateway


def open_gateway(
    bootstrap_servers: str | None, command_config: str | Path | None = None
) -> KafkaAdminGateway:
    """A gateway for `bootstrap_servers` (wins over `bootstrap.servers` in the file) with the
    Kafka client properties of `command_config` (the `--command-config` file of Kafka's tools).

    Raises ValueError for unreadable or invalid properties (the message names the key, never a
    secret). Connecting happens lazily, on the first call."""
    properties = load_properties_file(command_config) if command_config else {}
    return KafkaAdminGateway(settings_from_properties(properties, bootstrap_servers=bootstrap_servers))

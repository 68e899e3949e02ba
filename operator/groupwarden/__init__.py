"""groupwarden: declarative, broker-semantics-aware cleanup of Kafka consumer groups."""

__version__ = "0.1.0"

"""Kafka-style JSON message schemas for APIs kafka-python 3.x does not ship (loaded by its
`kafka.protocol.schemas.load_json`). Written for groupwarden from the Kafka protocol definition."""

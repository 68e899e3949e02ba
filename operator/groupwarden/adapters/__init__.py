"""Adapters: the only code holding Kafka clients (kafka-python for the Admin API, confluent-kafka
for reading `__consumer_offsets`). The core and the offsets-log codec never import them."""

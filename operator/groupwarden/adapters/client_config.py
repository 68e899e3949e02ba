"""`ConnectionSettings` -> the configuration of our two Kafka client libraries: kafka-python (the
admin gateway, restore) and confluent-kafka (the offsets-log reader, the audit topic, Spark's
offset ranges). The one place the secret values are handed to a client, and the one place every
librdkafka client gets its `logger` (client_logs.py: never librdkafka's own lines on stderr).
Spark's options (spark_kafka.py) are the Java client's, strings for the JVM, and not built here."""

from __future__ import annotations

from typing import Any

from groupwarden.adapters.client_logs import librdkafka_logger
from groupwarden.adapters.oauth_token import token_provider
from groupwarden.connectivity.settings import ConnectionSettings


def kafka_python_config(settings: ConnectionSettings) -> dict[str, Any]:
    """Keyword arguments for kafka-python 3.x clients (`KafkaAdminClient`, `KafkaConsumer`)."""
    config: dict[str, Any] = {
        "bootstrap_servers": list(settings.bootstrap_servers),
        "client_id": settings.client_id,
        "security_protocol": settings.security_protocol,
        "request_timeout_ms": settings.request_timeout_ms,
    }
    if settings.uses_sasl and settings.oauth is not None:
        config["sasl_mechanism"] = settings.sasl_mechanism
        config["sasl_oauth_token_provider"] = token_provider(settings.oauth)
    elif settings.uses_sasl:
        config["sasl_mechanism"] = settings.sasl_mechanism
        config["sasl_plain_username"] = settings.sasl_username
        config["sasl_plain_password"] = settings.sasl_password.reveal() if settings.sasl_password else None
    if settings.uses_ssl:
        config["ssl_check_hostname"] = settings.ssl_check_hostname
        config["ssl_cafile"] = settings.ssl_ca_file
        config["ssl_certfile"] = settings.ssl_cert_file
        config["ssl_keyfile"] = settings.ssl_key_file
        config["ssl_password"] = settings.ssl_key_password.reveal() if settings.ssl_key_password else None
    return config


def confluent_config(settings: ConnectionSettings) -> dict[str, Any]:
    """librdkafka properties for confluent-kafka clients (Python objects: the `logger` too)."""
    config: dict[str, Any] = {
        # Every client, admin clients included: without one, librdkafka writes to stderr itself.
        "logger": librdkafka_logger(),
        "bootstrap.servers": ",".join(settings.bootstrap_servers),
        "client.id": settings.client_id,
        "security.protocol": settings.security_protocol.lower(),
        "socket.timeout.ms": settings.request_timeout_ms,
    }
    if settings.uses_sasl and settings.oauth is not None:
        oauth = settings.oauth
        config["sasl.mechanism"] = settings.sasl_mechanism
        config["sasl.oauthbearer.method"] = "oidc"
        config["sasl.oauthbearer.token.endpoint.url"] = oauth.token_endpoint_url
        config["sasl.oauthbearer.client.id"] = oauth.client_id
        config["sasl.oauthbearer.client.secret"] = oauth.client_secret.reveal()
        if oauth.scope:
            config["sasl.oauthbearer.scope"] = oauth.scope
        if oauth.extensions:
            config["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in oauth.extensions)
        if oauth.ca_file:
            config["https.ca.location"] = oauth.ca_file
    elif settings.uses_sasl:
        config["sasl.mechanism"] = settings.sasl_mechanism
        config["sasl.username"] = settings.sasl_username
        config["sasl.password"] = settings.sasl_password.reveal() if settings.sasl_password else ""
    if settings.uses_ssl:
        config["ssl.endpoint.identification.algorithm"] = "https" if settings.ssl_check_hostname else "none"
        for key, value in (
            ("ssl.ca.location", settings.ssl_ca_file),
            ("ssl.certificate.location", settings.ssl_cert_file),
            ("ssl.key.location", settings.ssl_key_file),
        ):
            if value:
                config[key] = value
        if settings.ssl_key_password:
            config["ssl.key.password"] = settings.ssl_key_password.reveal()
    return config

"""What the fleet audit needs to read `__consumer_offsets` live with Spark's Kafka source.

- `offsets_log_bounds`: the first offset and the last stable offset of every partition, from
  ListOffsets with read_committed (confluent-kafka's admin client): the exact range the core's
  read_committed reader would deliver right now, handed to Spark as explicit start/end offsets.
- `spark_kafka_options`: the Java client properties of `ConnectionSettings` as `kafka.*` options.
  They contain the SASL password (inside `sasl.jaas.config`): never log them. Spark redacts
  `sasl.jaas.config` in its own logs.
"""

from __future__ import annotations

from typing import Final

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # OffsetSpec is not re-exported in the stubs
    AdminClient,
    OffsetSpec,
)

from groupwarden.adapters.client_config import confluent_config
from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogUnavailable
from groupwarden.connectivity.settings import ConnectionSettings

OFFSETS_TOPIC: Final = "__consumer_offsets"
_LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


_OAUTH_LOGIN_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OAUTH_LOGIN_CALLBACK_HANDLER: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(settings: ConnectionSettings) -> dict[str, str]:
    """`kafka.`-prefixed options for `spark.read.format("kafka")`."""
    options = {
        "kafka.bootstrap.servers": ",".join(settings.bootstrap_servers),
        "kafka.security.protocol": settings.security_protocol,
        "kafka.client.id": settings.client_id,
        "kafka.request.timeout.ms": str(settings.request_timeout_ms),
        "kafka.default.api.timeout.ms": str(settings.api_timeout_ms),
    }
    if settings.uses_sasl and settings.oauth is not None:
        options.update(_oauth_options(settings))
    elif settings.uses_sasl:
        mechanism = settings.sasl_mechanism or "PLAIN"
        password = settings.sasl_password.reveal() if settings.sasl_password else ""
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[mechanism]} required username={_jaas_quote(settings.sasl_username or '')} "
            f"password={_jaas_quote(password)};"
        )
    if settings.uses_ssl:
        if settings.ssl_cert_file or settings.ssl_key_file:
            raise ValueError(
                "client certificates (ssl.certificate.location/ssl.keystore.*) are not passed to Spark's "
                "Kafka source: export the log with `groupwarden export-offsets-log` and audit it with --input"
            )
        if settings.ssl_ca_file:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = settings.ssl_ca_file
        options["kafka.ssl.endpoint.identification.algorithm"] = (
            "https" if settings.ssl_check_hostname else ""
        )
    return options


def _oauth_options(settings: ConnectionSettings) -> dict[str, str]:
    """The Java client's KIP-768 login for OIDC client credentials. The JVM of Kafka clients 4.0+
    also needs the token URL in -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls."""
    oauth = settings.oauth
    assert oauth is not None
    if oauth.ca_file:
        raise ValueError(
            "https.ca.location (the token endpoint's CA) is not passed to Spark's Kafka source: "
            "export the log with `groupwarden export-offsets-log` and audit it with --input"
        )
    jaas = [
        f"clientId={_jaas_quote(oauth.client_id)}",
        f"clientSecret={_jaas_quote(oauth.client_secret.reveal())}",
    ]
    if oauth.scope:
        jaas.append(f"scope={_jaas_quote(oauth.scope)}")
    jaas += [f"extension_{key}={_jaas_quote(value)}" for key, value in oauth.extensions]
    return {
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.login.callback.handler.class": _OAUTH_LOGIN_CALLBACK_HANDLER,
        "kafka.sasl.oauthbearer.token.endpoint.url": oauth.token_endpoint_url,
        "kafka.sasl.jaas.config": f"{_OAUTH_LOGIN_MODULE} required {' '.join(jaas)};",
    }


def offsets_log_bounds(settings: ConnectionSettings) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, last stable offset) of `__consumer_offsets`."""
    timeout = settings.api_timeout_ms / 1000
    try:
        admin = AdminClient(confluent_config(settings))
        metadata = admin.list_topics(OFFSETS_TOPIC, timeout=timeout)
        found = metadata.topics.get(OFFSETS_TOPIC)
        if found is None or found.error is not None or not found.partitions:
            raise OffsetsLogUnavailable(f"{OFFSETS_TOPIC} is not visible to this client")
        partitions = sorted(found.partitions)
        bounds: dict[int, list[int]] = {p: [0, 0] for p in partitions}
        earliest, latest = OffsetSpec.earliest(), OffsetSpec.latest()  # type: ignore[no-untyped-call]
        for index, spec in ((0, earliest), (1, latest)):
            futures = admin.list_offsets(
                {TopicPartition(OFFSETS_TOPIC, p): spec for p in partitions},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=timeout,
            )
            for tp, future in futures.items():
                bounds[tp.partition][index] = int(future.result(timeout).offset)
    except KafkaException as exc:
        error = exc.args[0]
        text = settings.redact(f"{error.name()}: {error.str()}")
        raise KafkaUnavailable(
            f"listing offsets of {OFFSETS_TOPIC} on {settings.describe()} failed: {text}"
        ) from None
    return {p: (low, high) for p, (low, high) in bounds.items()}

"""The gateway through the SASL_SSL listener (SCRAM-SHA-512, CA file) and against dead endpoints."""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
from groupwarden.cleanup.gateway import KafkaAuthenticationFailed, KafkaTlsHandshakeFailed, KafkaUnavailable
from groupwarden.connectivity.settings import load_properties_file, settings_from_properties
from gwtest.env import setting
from gwtest.kafka import commit_offsets, create_topics
from gwtest.ports import free_port

# kafka-python 3.0.12 drops the sockets of failed connects and handshakes without closing them;
# their ResourceWarning is known noise in these failure tests.
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(autouse=True)
def finalize_leaked_sockets() -> Iterator[None]:
    """Finalise leaked sockets inside the test that caused them, not in whichever later test
    (of another module, without the filter) the garbage collector happens to run."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="module")
def sasl() -> dict[str, str]:
    password = Path(setting("GROUPWARDEN_KAFKA_SASL_PASSWORD_FILE", "kafka")).read_text().strip()
    return {
        "bootstrap": setting("GROUPWARDEN_KAFKA_SASL_BOOTSTRAP", "kafka"),
        "username": setting("GROUPWARDEN_KAFKA_SASL_USERNAME", "kafka"),
        "password": password,
        "ca": setting("GROUPWARDEN_KAFKA_CA_FILE", "kafka"),
        "mechanism": setting("GROUPWARDEN_KAFKA_SASL_MECHANISM", "kafka"),
    }


def jaas_properties(sasl: dict[str, str], password: str) -> dict[str, str]:
    """Java-style keys, as a user's client.properties for Kafka's own tools has them."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": sasl["mechanism"],
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{sasl["username"]}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": sasl["ca"],
        "default.api.timeout.ms": "10000",
    }


def test_sasl_ssl_with_the_tools_properties_file(
    sasl: dict[str, str], kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The devstack's client.properties is the one Kafka's CLI uses: the gateway reads it as is."""
    topic, group = unique_name("sasl-t"), unique_name("sasl")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 2})
    gateway = open_gateway(sasl["bootstrap"], setting("GROUPWARDEN_KAFKA_SASL_CLIENT_CONFIG", "kafka"))
    try:
        assert gateway.settings.security_protocol == "SASL_SSL"
        assert gateway.settings.sasl_mechanism == "SCRAM-SHA-512"
        assert gateway.cluster_id()
        assert group in {g.group_id for g in gateway.list_groups()}
        assert gateway.fetch_offsets([group])[group].offsets
        # The librdkafka reader authenticates with the same settings.
        assert any(True for _ in gateway.read_offsets_log({}))
    finally:
        gateway.close()


def test_sasl_ssl_with_librdkafka_style_keys(sasl: dict[str, str]) -> None:
    properties = {
        "bootstrap.servers": sasl["bootstrap"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": sasl["mechanism"],
        "sasl.username": sasl["username"],
        "sasl.password": sasl["password"],
        "ssl.ca.location": sasl["ca"],
    }
    with KafkaAdminGateway(settings_from_properties(properties)) as gateway:
        assert gateway.list_topics()


def test_a_wrong_password_is_a_clean_authentication_error(sasl: dict[str, str]) -> None:
    wrong = "not-the-password-" + sasl["password"][:3] + "-xyz"
    settings = settings_from_properties(jaas_properties(sasl, wrong), bootstrap_servers=sasl["bootstrap"])
    assert wrong not in repr(settings) and wrong not in str(settings)
    gateway = KafkaAdminGateway(settings)
    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationFailed) as admin_error:
        gateway.list_groups()
    assert time.monotonic() - started < 20
    with pytest.raises(KafkaAuthenticationFailed) as reader_error:
        list(gateway.read_offsets_log({}))
    gateway.close()
    for error in (admin_error.value, reader_error.value):
        message = str(error)
        assert "authentication" in message.lower() and "SCRAM-SHA-512" in message
        assert wrong not in message and sasl["password"] not in message
        assert isinstance(error, KafkaUnavailable)  # callers that only know the port handle it


def test_the_ca_is_verified(sasl: dict[str, str], tmp_path: Path) -> None:
    """Without our CA the TLS handshake fails (the system trust store does not know it)."""
    properties = {**jaas_properties(sasl, sasl["password"]), "default.api.timeout.ms": "5000"}
    del properties["ssl.truststore.location"], properties["ssl.truststore.type"]
    with (
        KafkaAdminGateway(
            settings_from_properties(properties, bootstrap_servers=sasl["bootstrap"])
        ) as gateway,
        pytest.raises(KafkaUnavailable) as error,
    ):
        gateway.cluster_id()
    assert sasl["password"] not in str(error.value)
    # Named as what it is (adapters/client_errors.py), with the hint to check the CA.
    assert isinstance(error.value, KafkaTlsHandshakeFailed), repr(error.value)
    assert "not signed by the CA" in str(error.value)


def test_an_unreachable_cluster_raises_kafka_unavailable_in_bounded_time() -> None:
    threads_before = threading.active_count()
    properties = {
        "bootstrap.servers": f"127.0.0.1:{free_port()}",  # bound and released: nothing listens there
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "user",
        "sasl.password": "hunter2-secret",
        "default.api.timeout.ms": "2000",
        "request.timeout.ms": "2000",
    }
    gateway = KafkaAdminGateway(settings_from_properties(properties))
    for call in (gateway.list_groups, gateway.cluster_id, lambda: list(gateway.read_offsets_log({}))):
        started = time.monotonic()
        with pytest.raises(KafkaUnavailable) as error:
            call()
        assert time.monotonic() - started < 10
        assert "hunter2-secret" not in str(error.value)
        assert not isinstance(error.value, KafkaAuthenticationFailed)
    gateway.close()
    # A failed bootstrap leaves no IO thread behind (kafka-python would keep it running).
    assert threading.active_count() <= threads_before


def test_properties_file_parsing_matches_the_tools(tmp_path: Path, sasl: dict[str, str]) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# comment\n! another\n\n"
        f"bootstrap.servers = {sasl['bootstrap']}\n"
        "security.protocol: SASL_SSL\n"
        f"sasl.mechanism={sasl['mechanism']}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{sasl["username"]}" \\\n    password="{sasl["password"]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={sasl['ca']}\n"
    )
    with KafkaAdminGateway(settings_from_properties(load_properties_file(path))) as gateway:
        assert gateway.cluster_id()

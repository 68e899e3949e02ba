"""Pure parts of the Kafka adapter: client properties, secrets, answer parsing, regex decisions.

No broker needed (marked `unit` as well, so `pytest -m unit` runs them); they live beside the
adapter's integration tests. Candidates for tests/unit/ once that directory is shared.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from groupwarden.adapters import consumer_group_describe as cgd
from groupwarden.adapters.client_config import confluent_config, kafka_python_config
from groupwarden.adapters.client_errors import error_from_code, error_from_exception
from groupwarden.adapters.kafka_gateway import _parse_offset_fetch
from groupwarden.cleanup.gateway import KafkaError, ListedGroup
from groupwarden.connectivity.redaction import Secret
from groupwarden.connectivity.settings import (
    ConnectionSettings,
    load_properties_file,
    parse_properties,
    settings_from_properties,
)
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition

pytestmark = pytest.mark.unit

SECRET = 's3cr3t-p@ss=w0rd;"x'
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'


def jaas(password: str = SECRET) -> str:
    return JAAS.format(password.replace("\\", "\\\\").replace('"', '\\"'))


# -- properties files ----------------------------------------------------------------------------


def test_parse_properties_like_java() -> None:
    text = (
        "# comment\n! bang comment\n\n"
        "a=1\n"
        "b = 2\n"
        "c: 3\n"
        "d 4\n"
        "  e=x \\\n    continued\n"
        "f=tab\\there\\u0041\n"
        "g\\=key=v\n"
        "h=\n"
        "i=a=b\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "x continued",
        "f": "tab\there" + "A",
        "g=key": "v",
        "h": "",
        "i": "a=b",
    }


def test_load_properties_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing\.properties"):
        load_properties_file(tmp_path / "missing.properties")


# -- settings ------------------------------------------------------------------------------------


def test_jaas_scram_with_pem_truststore(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = settings_from_properties(
        {
            "bootstrap.servers": "b1:9093, b2:9093",
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
            "client.id": "gw",
            "request.timeout.ms": "5000",
        }
    )
    assert settings.bootstrap_servers == ("b1:9093", "b2:9093")
    assert (settings.security_protocol, settings.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert settings.sasl_username == "alice"
    assert settings.sasl_password == Secret(SECRET)
    assert settings.ssl_ca_file == str(ca) and settings.ssl_check_hostname
    kp = kafka_python_config(settings)
    assert kp["sasl_plain_password"] == SECRET and kp["ssl_cafile"] == str(ca)
    assert kp["bootstrap_servers"] == ["b1:9093", "b2:9093"] and kp["request_timeout_ms"] == 5000
    ck = confluent_config(settings)
    assert ck["sasl.password"] == SECRET and ck["ssl.ca.location"] == str(ca)
    assert ck["security.protocol"] == "sasl_ssl" and ck["client.id"] == "gw"


def test_plain_login_module_implies_plain() -> None:
    jaas_plain = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password="pw";'
    )
    settings = settings_from_properties(
        {"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas_plain}
    )
    assert (settings.sasl_mechanism, settings.sasl_username, settings.sasl_password) == (
        "PLAIN",
        "bob",
        Secret("pw"),
    )


def test_librdkafka_keys_and_hostname_verification_off(tmp_path: Path) -> None:
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("-----BEGIN-----")
    settings = settings_from_properties(
        {
            "bootstrap.servers": "[::1]:9093",
            "security.protocol": "SSL",
            "ssl.ca.location": str(tmp_path / "ca.pem"),
            "ssl.certificate.location": str(tmp_path / "cert.pem"),
            "ssl.key.location": str(tmp_path / "key.pem"),
            "ssl.key.password": SECRET,
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert not settings.ssl_check_hostname
    assert kafka_python_config(settings)["ssl_password"] == SECRET
    assert confluent_config(settings)["ssl.endpoint.identification.algorithm"] == "none"
    assert "sasl_mechanism" not in kafka_python_config(settings)


def test_pem_keystore_gives_certificate_and_key(tmp_path: Path) -> None:
    keystore = tmp_path / "client.pem"
    keystore.write_text("-----BEGIN-----")
    settings = settings_from_properties(
        {
            "bootstrap.servers": "h:1",
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
        }
    )
    assert settings.ssl_cert_file == settings.ssl_key_file == str(keystore)


def test_no_secret_in_repr_str_or_errors(tmp_path: Path) -> None:
    settings = settings_from_properties(
        {
            "bootstrap.servers": "h:1",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": jaas(),
            "ssl.key.password": SECRET,
        }
    )
    for text in (repr(settings), str(settings), settings.describe(), repr(settings.sasl_password)):
        assert SECRET not in text and "s3cr3t" not in text
    assert settings.redact(f"boom {SECRET} boom") == "boom *** boom"
    bad_jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required password="{SECRET}'
    broken = [
        {"sasl.jaas.config": bad_jaas, "sasl.mechanism": "SCRAM-SHA-256"},
        {"sasl.jaas.config": jaas(), "sasl.mechanism": "GSSAPI"},
        {"sasl.jaas.config": jaas().replace("scram.ScramLoginModule", "oauthbearer.OAuthBearerLoginModule")},
        {"sasl.jaas.config": jaas()},  # SCRAM needs an explicit mechanism (256 or 512)
        {"sasl.mechanism": "PLAIN", "sasl.password": SECRET},  # no username
    ]
    for props in broken:
        with pytest.raises(ValueError) as error:
            settings_from_properties({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", **props})
        assert SECRET not in str(error.value) and "s3cr3t" not in str(error.value)
        assert str(error.value).startswith(("sasl.", "--"))  # names the key


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({}, "bootstrap.servers"),
        ({"bootstrap.servers": "nohost"}, "bootstrap.servers"),
        ({"bootstrap.servers": "h:99999"}, "bootstrap.servers"),
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"request.timeout.ms": "soon"}, "request.timeout.ms"),
        ({"default.api.timeout.ms": "0"}, "default.api.timeout.ms"),
        ({"ssl.truststore.location": "/x.jks"}, "ssl.truststore.type"),
        ({"ssl.keystore.location": "/x.p12", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.type"),
        ({"ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification.algorithm"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password"),
    ],
)
def test_invalid_values_name_the_key(props: dict[str, str], key: str) -> None:
    full = props if key == "bootstrap.servers" else {"bootstrap.servers": "h:1", **props}
    with pytest.raises(ValueError, match=f"^{key}"):
        settings_from_properties(full)


def test_bootstrap_override_wins_and_unknown_keys_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        settings = settings_from_properties(
            {"bootstrap.servers": "file:1", "group.id": "ignored", "linger.ms": "5"},
            bootstrap_servers="cli:2",
        )
    assert settings.bootstrap_servers == ("cli:2",)
    assert settings.unknown_keys == ("linger.ms",)  # group.id is known-irrelevant: silent
    assert "linger.ms" in caplog.text and "group.id" not in caplog.text
    assert settings.with_bootstrap_servers("x:3").bootstrap_servers == ("x:3",)


def test_settings_are_hashable_values() -> None:
    props = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    a = settings_from_properties({**props, "sasl.username": "u", "sasl.password": "p"})
    b = settings_from_properties({**props, "sasl.username": "u", "sasl.password": "p"})
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert isinstance(a, ConnectionSettings)


# -- errors --------------------------------------------------------------------------------------


def test_error_codes_keep_name_code_and_retriability() -> None:
    assert error_from_code(0) is None
    assert error_from_code(86) == KafkaError("GROUP_SUBSCRIBED_TO_TOPIC", 86, False)
    assert error_from_code(16, "moved") == KafkaError("NOT_COORDINATOR", 16, True, "moved")
    assert error_from_code(30) == KafkaError("GROUP_AUTHORIZATION_FAILED", 30, False)
    assert error_from_code(9999) == KafkaError("UNKNOWN_ERROR_CODE_9999", 9999, False)
    error = error_from_exception(
        TimeoutError(f"took too long with {SECRET}"), lambda t: t.replace(SECRET, "***")
    )
    assert error.retriable and SECRET not in error.message


# -- describe answers ----------------------------------------------------------------------------


def member(metadata: bytes) -> NS:
    return NS(member_id="m", member_metadata=metadata)


def subscription(*topics: str) -> bytes:
    from groupwarden.testing.offsets_log_encoder import encode_consumer_protocol_subscription

    return encode_consumer_protocol_subscription(list(topics), version=3)


def classic(**fields: object) -> NS:
    base: dict[str, object] = dict(error_code=0, error_message=None, group_id="g", group_state="Stable",
                                   protocol_type="consumer", members=[])  # fmt: skip
    return NS(**{**base, **fields})


def test_classic_answers() -> None:
    stable = cgd.classic_group(classic(members=[member(subscription("a", "b")), member(subscription("c"))]))
    assert not isinstance(stable, KafkaError)
    assert (stable.kind, stable.member_count, stable.subscribed_topics) == (
        GroupKind.CLASSIC,
        2,
        {"a", "b", "c"},
    )
    undecodable = cgd.classic_group(classic(members=[member(subscription("a")), member(b"")]))
    assert not isinstance(undecodable, KafkaError) and undecodable.subscribed_topics is None
    connect = cgd.classic_group(classic(protocol_type="connect", members=[member(b"\x00\x01opaque")]))
    assert not isinstance(connect, KafkaError) and connect.subscribed_topics is None
    simple = cgd.classic_group(classic(protocol_type="", group_state="Empty"))
    assert not isinstance(simple, KafkaError)
    assert (simple.kind, simple.state, simple.subscribed_topics) == (
        GroupKind.SIMPLE,
        GroupState.EMPTY,
        frozenset(),
    )
    assert cgd.classic_group(classic(group_state="Dead")) == KafkaError(
        "GROUP_ID_NOT_FOUND", 69, message="group is Dead"
    )
    assert cgd.classic_group(classic(error_code=30)) == KafkaError("GROUP_AUTHORIZATION_FAILED", 30)


def kip848_member(names: list[str], regex: str | None, assigned: list[str]) -> NS:
    assignment = NS(topic_partitions=[NS(topic_name=t, partitions=[0]) for t in assigned])
    return NS(subscribed_topic_names=names, subscribed_topic_regex=regex, assignment=assignment,
              target_assignment=NS(topic_partitions=[]))  # fmt: skip


def kip848(*members: NS) -> NS:
    return NS(
        error_code=0, error_message=None, group_id="k", group_state="Reconciling", members=list(members)
    )


def test_kip848_answers_and_the_regex_decision() -> None:
    topics = frozenset({"orders-1", "orders-2", "audit", "pay"})
    group = cgd.consumer_group(
        kip848(kip848_member(["pay"], None, ["legacy"]), kip848_member([], "orders-.*", [])), topics
    )
    assert not isinstance(group, KafkaError)
    assert group.kind is GroupKind.CONSUMER and group.state is GroupState.RECONCILING
    assert group.subscribed_topics == {"pay", "legacy", "orders-1", "orders-2"}
    # librdkafka wraps its patterns: "(^orders-.*)"; RE2/J `matches()` is a full match.
    assert cgd.regex_matches("(^orders-.*)", topics) == {"orders-1", "orders-2"}
    assert cgd.regex_matches("orders", topics) == frozenset()
    for unsure in (r"\pL+", "[[:alpha:]]+", "(unclosed", "(?U)a+"):
        assert cgd.regex_matches(unsure, topics) is None, unsure
    assert cgd.regex_matches("orders-.*", None) is None
    unknown = cgd.consumer_group(kip848(kip848_member([], r"\pL+", [])), topics)
    assert not isinstance(unknown, KafkaError) and unknown.subscribed_topics is None


def test_listed_kinds_and_failures() -> None:
    assert cgd.listed_kind(ListedGroup("g", "classic", "", GroupState.EMPTY)) is GroupKind.SIMPLE
    assert cgd.listed_kind(ListedGroup("g", "", "consumer", GroupState.EMPTY)) is GroupKind.CLASSIC
    assert cgd.listed_kind(ListedGroup("g", "streams", "streams", GroupState.EMPTY)) is GroupKind.STREAMS
    assert cgd.listed_kind(ListedGroup("g", "future", "x", GroupState.EMPTY)) is GroupKind.UNKNOWN
    failed = cgd.failed(
        ListedGroup("g", "consumer", "consumer", GroupState.STABLE), KafkaError("GROUP_ID_NOT_FOUND", 69)
    )
    assert (failed.kind, failed.state, failed.subscribed_topics) == (
        GroupKind.CONSUMER,
        GroupState.DEAD,
        None,
    )


def test_consumer_group_describe_schema_round_trips() -> None:
    request = cgd.ConsumerGroupDescribeRequest(group_ids=["a", "b"], include_authorized_operations=False)
    assert bytes(request.encode(version=0)) == b"\x03\x02a\x02b\x00\x00"  # compact array, bool, tags
    response_cls = cgd.ConsumerGroupDescribeResponse
    group_cls = response_cls.DescribedGroup
    response = response_cls(
        throttle_time_ms=0,
        groups=[group_cls(error_code=69, error_message="gone", group_id="a", group_state="", group_epoch=0,
                          assignment_epoch=0, assignor_name="", members=[], authorized_operations=-1)],
        version=0,
    )  # fmt: skip
    decoded = response_cls.decode(response.encode(version=0), version=0)
    assert decoded.groups[0].group_id == "a" and decoded.groups[0].error_code == 69


# -- offsets -------------------------------------------------------------------------------------


def fetch_group(group_id: str, error: int = 0, partitions: list[NS] | None = None) -> NS:
    return NS(group_id=group_id, error_code=error, topics=[NS(name="t", partitions=partitions or [])])


def partition(index: int, offset: int, epoch: int = -1, error: int = 0) -> NS:
    return NS(
        partition_index=index,
        committed_offset=offset,
        committed_leader_epoch=epoch,
        metadata=None,
        error_code=error,
    )


def test_offset_fetch_answers() -> None:
    response = NS(
        error_code=0,
        groups=[
            fetch_group("ok", partitions=[partition(0, 5, 3), partition(1, -1)]),
            fetch_group("denied", error=30),
            fetch_group("unstable", partitions=[partition(0, 5, error=88)]),
        ],
    )
    answer = _parse_offset_fetch(response)
    ok = answer["ok"]
    assert not isinstance(ok, KafkaError)
    assert {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in ok.offsets.items()} == {
        TopicPartition("t", 0): (5, 3, "")
    }
    assert answer["denied"] == KafkaError("GROUP_AUTHORIZATION_FAILED", 30)
    assert isinstance(answer["unstable"], KafkaError) and answer["unstable"].code == 88


def test_kafka_python_debug_logs_never_show_the_password(caplog: pytest.LogCaptureFixture) -> None:
    from groupwarden.adapters.kafka_admin_session import AdminSession

    props = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    settings = settings_from_properties({**props, "sasl.username": "u", "sasl.password": SECRET})
    AdminSession(settings)
    with caplog.at_level(logging.DEBUG, logger="kafka.admin.client"):
        logging.getLogger("kafka.admin.client").debug("configuration: %s", kafka_python_config(settings))
    assert "sasl_plain_password" in caplog.text and SECRET not in caplog.text


@dataclass
class ReaderEvent:
    """An error event as confluent-kafka's consumer hands it out."""

    err: object
    part: int

    def error(self) -> object:
        return self.err

    def partition(self) -> int:
        return self.part

    def offset(self) -> int:
        return -1001


def test_log_reader_maps_authorization_to_unavailable_log() -> None:
    from confluent_kafka import KafkaError as CKError

    from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
    from groupwarden.cleanup.gateway import (
        KafkaAuthenticationFailed,
        KafkaTlsHandshakeFailed,
        KafkaUnavailable,
        OffsetsLogUnavailable,
    )

    reader = OffsetsLogReader(settings_from_properties({"bootstrap.servers": "h:1"}))
    assert isinstance(reader._failure(CKError(CKError.TOPIC_AUTHORIZATION_FAILED)), OffsetsLogUnavailable)
    assert isinstance(reader._failure(CKError(CKError.UNKNOWN_TOPIC_OR_PART)), OffsetsLogUnavailable)
    # The coordinator lookup of the reader's unused group.id, refused: the read goes on.
    ends = {0: 5}
    reader._on_event(None, ReaderEvent(CKError(CKError.GROUP_AUTHORIZATION_FAILED), -1), ends, {0: 0}, 1)  # type: ignore[arg-type]
    assert ends == {0: 5}
    with pytest.raises(OffsetsLogUnavailable):
        reader._on_event(None, ReaderEvent(CKError(CKError.TOPIC_AUTHORIZATION_FAILED), 0), ends, {0: 0}, 1)  # type: ignore[arg-type]
    assert isinstance(reader._failure(CKError(CKError._AUTHENTICATION)), KafkaAuthenticationFailed)
    assert not isinstance(reader._failure(CKError(CKError._AUTHENTICATION)), KafkaTlsHandshakeFailed)
    untrusted = reader._failure(CKError(CKError._SSL, "SSL handshake failed: certificate verify failed"))
    assert isinstance(untrusted, KafkaTlsHandshakeFailed) and "not signed by the CA" in str(untrusted)
    # A timeout whose cause error_cb recorded is reported as that cause.
    reader._errors.append(CKError(CKError._SSL, "SSL handshake failed"))
    assert isinstance(reader._failure(CKError(CKError._TIMED_OUT)), KafkaTlsHandshakeFailed)
    reader._errors.clear()
    transport = reader._failure(CKError(CKError._TRANSPORT))
    assert isinstance(transport, KafkaUnavailable) and not isinstance(transport, KafkaAuthenticationFailed)

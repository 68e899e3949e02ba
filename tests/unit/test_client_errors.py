"""The one translation of the client libraries' exceptions (adapters/client_errors.py, where the tree
is drawn): each client exception class -> the port's exception, or the per-item `KafkaError`.
No broker: the exceptions are the client libraries' own classes, raised where a client call was."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import kafka.errors as Errors
import pytest
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException

from groupwarden.adapters.client_errors import (
    client_errors_translated,
    error_from_code,
    error_from_exception,
    unavailable,
)
from groupwarden.adapters.kafka_admin_session import AdminSession
from groupwarden.adapters.kafka_audit_topic import AuditTopicError, KafkaTopicSink
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.gateway import (
    KafkaAuthenticationFailed,
    KafkaError,
    KafkaTlsHandshakeFailed,
    KafkaUnavailable,
    OffsetsLogGap,
    OffsetsLogUnavailable,
)
from groupwarden.connectivity.settings import ConnectionSettings, settings_from_properties
from groupwarden.core.kafka_error import AUTHORIZATION_ERRORS
from groupwarden.deletion_trail import TrailEntry

pytestmark = pytest.mark.unit

SECRET = "hunter2-secret"
SETTINGS = settings_from_properties(
    {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "gw",
        "sasl.password": SECRET,
    },
    bootstrap_servers="127.0.0.1:9092",
)


def translated(exc: BaseException, settings: ConnectionSettings = SETTINGS) -> BaseException:
    """What leaves an adapter entry point whose client call raised `exc`."""
    try:
        with client_errors_translated(settings):
            raise exc
    except BaseException as leaving:  # the test looks at whatever left
        return leaving
    raise AssertionError("unreachable")


def ck(code: int, text: str | None = None) -> KafkaException:
    return KafkaException(CKError(code, text) if text else CKError(code))


# -- whole calls: client exception -> the port's exception ---------------------------------------

OUTAGES = [
    Errors.KafkaConnectionError("111 ECONNREFUSED"),
    Errors.NodeNotReadyError("node 2"),
    Errors.UnknownBrokerIdError("3"),
    Errors.KafkaTimeoutError("timed out"),
    Errors.MetadataEmptyBrokerList("no brokers"),
    Errors.IncompatibleBrokerVersion("ListGroups v5"),
    Errors.KafkaProtocolError("garbled"),
    Errors.CoordinatorLoadInProgressError(),  # a retriable answer, still failing after the deadline
    Errors.GroupAuthorizationFailedError(),  # a whole call refused (e.g. FindCoordinator)
    ck(CKError._TRANSPORT),
    ck(CKError._ALL_BROKERS_DOWN),
    ck(CKError._TIMED_OUT),
    ck(CKError._MSG_TIMED_OUT),
    ck(CKError.TOPIC_AUTHORIZATION_FAILED),
    KafkaException("no KafkaError inside"),
    ConnectionRefusedError(111, "Connection refused"),
    ConnectionResetError("reset by peer"),
    OSError("No route to host"),
    TimeoutError("timed out"),
]


@pytest.mark.parametrize("exc", OUTAGES, ids=lambda e: f"{type(e).__name__}-{e}"[:60])
def test_a_client_or_network_failure_of_a_whole_call_is_kafka_unavailable(exc: Exception) -> None:
    leaving = translated(exc)
    assert type(leaving) is KafkaUnavailable
    assert leaving.__cause__ is None and leaving.__suppress_context__  # no client frames kept
    assert "127.0.0.1:9092" in str(leaving)
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    named = error.name() if isinstance(error, CKError) else type(exc).__name__
    assert named in str(leaving)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Errors.SaslAuthenticationFailedError("bad password"), KafkaAuthenticationFailed),
        (ck(CKError._AUTHENTICATION, "SASL authentication error"), KafkaAuthenticationFailed),
        (ck(CKError.SASL_AUTHENTICATION_FAILED), KafkaAuthenticationFailed),
        (Errors.KafkaConnectionError("Handshake failed: certificate verify failed"), KafkaTlsHandshakeFailed),
        (ck(CKError._SSL, "SSL handshake failed: certificate verify failed"), KafkaTlsHandshakeFailed),
    ],
    ids=lambda e: type(e).__name__ if isinstance(e, Exception) else e.__name__,
)
def test_authentication_and_tls_failures_are_their_own_port_exceptions(
    exc: Exception, expected: type[KafkaUnavailable]
) -> None:
    leaving = translated(exc)
    assert type(leaving) is expected and isinstance(leaving, KafkaUnavailable)
    if expected is KafkaTlsHandshakeFailed:
        assert "not signed by the CA" in str(leaving)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        KeyError("x"),
        KafkaUnavailable("already the port's"),
        OffsetsLogUnavailable("not readable"),
        OffsetsLogGap(3, 10, 20),
    ],
    ids=lambda e: type(e).__name__,
)
def test_anything_that_is_not_a_client_error_passes_unchanged(exc: Exception) -> None:
    assert translated(exc) is exc


def test_secrets_never_leave_in_the_translation() -> None:
    for exc in (
        Errors.KafkaConnectionError(f"closed while sending {SECRET}"),
        ck(CKError._TRANSPORT, f"broker said {SECRET}"),
        OSError(f"{SECRET}"),
        Errors.SaslAuthenticationFailedError(f"password {SECRET} refused"),
    ):
        leaving = translated(exc)
        assert isinstance(leaving, KafkaUnavailable) and SECRET not in str(leaving)
        assert "***" in str(leaving)


def test_a_caller_that_knows_better_maps_librdkafka_errors_itself() -> None:
    """The offsets-log reader: authorization means "read the observed times instead"."""
    reader = OffsetsLogReader(SETTINGS)
    with pytest.raises(OffsetsLogUnavailable, match="not authorized"), reader._translated():
        raise ck(CKError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaUnavailable, match="_TRANSPORT"), reader._translated():
        raise ck(CKError._TRANSPORT)
    # Not a librdkafka error: the default translation.
    with pytest.raises(KafkaUnavailable, match="OSError"), reader._translated():
        raise OSError("gone")


# -- the adapters' entry points --------------------------------------------------------------------


def test_the_admin_session_raises_only_the_ports_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    session = AdminSession(SETTINGS)
    for exc in (Errors.KafkaTimeoutError("slow"), OSError("reset"), TimeoutError("slow")):

        def failing(_coro: Any, *_args: Any, raised: BaseException = exc) -> Any:
            raise raised

        admin = SimpleNamespace(_manager=SimpleNamespace(run=failing))
        monkeypatch.setattr(session, "_connect", lambda admin=admin: admin)
        with pytest.raises(KafkaUnavailable, match=f"could not use Kafka at .*{type(exc).__name__}"):
            session.run(lambda: None)


class _BrokenConsumer:
    """librdkafka's consumer failing as it does on a fatal error, after the bounds were read."""

    closed = False

    def assign(self, _partitions: object) -> None:
        pass

    def consume(self, *_args: object) -> list[object]:
        raise ck(CKError._FATAL, "fenced")

    def close(self) -> None:
        self.closed = True


def test_the_offsets_log_reader_translates_at_the_call_and_while_records_are_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = OffsetsLogReader(SETTINGS)

    def refused() -> Any:
        raise ck(CKError._INVALID_ARG, "bad config")

    monkeypatch.setattr(reader, "_consumer", refused)
    with pytest.raises(KafkaUnavailable, match="_INVALID_ARG"):
        reader.read({})
    consumer = _BrokenConsumer()
    records: Iterator[Any] = reader._records(consumer, {0: 0}, {0: 5}, timeout=1.0)  # type: ignore[arg-type]
    with pytest.raises(KafkaUnavailable, match="_FATAL"):
        next(records)
    assert consumer.closed


def test_an_audit_topic_write_raises_only_audit_topic_error(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = KafkaTopicSink(SETTINGS, "audit", create=False)
    for exc in (ck(CKError._FATAL, f"fenced {SECRET}"), BufferError("queue full"), OSError("gone")):

        def produce(*_args: Any, raised: BaseException = exc, **_kwargs: Any) -> None:
            raise raised

        monkeypatch.setattr(sink, "_ensure", lambda produce=produce: SimpleNamespace(produce=produce))
        with pytest.raises(AuditTopicError) as raised:
            sink.write(TrailEntry({"group": "g"}, '{"group":"g"}'))
        assert SECRET not in str(raised.value) and raised.value.__cause__ is None


# -- per item: client exception / error code -> KafkaError ----------------------------------------


@pytest.mark.parametrize(
    ("exc", "name", "code"),
    [
        (Errors.GroupAuthorizationFailedError(), "GROUP_AUTHORIZATION_FAILED", 30),
        (Errors.TopicAuthorizationFailedError(), "TOPIC_AUTHORIZATION_FAILED", 29),
        (Errors.ClusterAuthorizationFailedError(), "CLUSTER_AUTHORIZATION_FAILED", 31),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_authorization_errors_keep_their_protocol_name_and_say_so(
    exc: Exception, name: str, code: int
) -> None:
    for error in (error_from_exception(exc), error_from_code(code)):
        assert error is not None and (error.name, error.code) == (name, code)
        assert error.is_authorization
    assert CKError(code).name() == name  # confluent-kafka names them the same
    assert name in AUTHORIZATION_ERRORS


@pytest.mark.parametrize(
    ("exc", "name", "retriable"),
    [
        (Errors.KafkaConnectionError("111 ECONNREFUSED"), "KafkaConnectionError", True),
        (Errors.NodeNotReadyError("2"), "NodeNotReadyError", True),
        (Errors.KafkaTimeoutError("slow"), "KafkaTimeoutError", True),
        (Errors.NotCoordinatorError(), "NOT_COORDINATOR", True),
        (Errors.CoordinatorLoadInProgressError(), "COORDINATOR_LOAD_IN_PROGRESS", True),
        (Errors.GroupIdNotFoundError(), "GROUP_ID_NOT_FOUND", False),
        (ConnectionResetError("reset"), "ConnectionResetError", True),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_other_item_errors_are_named_by_protocol_or_client_class(
    exc: Exception, name: str, retriable: bool
) -> None:
    error = error_from_exception(exc)
    assert (error.name, error.retriable, error.is_authorization) == (name, retriable, False)


def test_authorization_is_decided_on_the_name_and_code_never_on_the_text() -> None:
    # An authorization failure under a client's class name, its text without the protocol name.
    assert KafkaError("GroupAuthorizationFailedError", 30, message="denied").is_authorization
    # A text that mentions the word is not an authorization failure.
    mentioned = KafkaError("UNKNOWN_SERVER_ERROR", -1, message="after GROUP_AUTHORIZATION_FAILED earlier")
    assert "AUTHORIZATION_FAILED" in str(mentioned) and not mentioned.is_authorization


def test_unavailable_names_what_failed() -> None:
    assert str(unavailable(OSError("gone"), SETTINGS, "could not commit offsets on")).startswith(
        "could not commit offsets on Kafka at 127.0.0.1:9092"
    )


# -- nothing sorts escaped client exceptions any more ---------------------------------------------


def test_no_caller_is_handed_a_client_failure_predicate() -> None:
    """The adapters translate once; the controller, the CLI and the pass loop know only the port's
    exceptions (no `client_failure` / `unavailable` injection left anywhere in the product)."""
    import inspect
    from pathlib import Path

    import groupwarden
    from groupwarden.cleanup.pass_deletions import execute_pass
    from groupwarden.commands.plan import plan_or_apply
    from groupwarden.controller.reconcile import Reconciler
    from groupwarden.controller.wiring import build_controller

    for function in (Reconciler.__init__, build_controller, plan_or_apply, execute_pass):
        parameters = inspect.signature(function).parameters
        assert "client_failure" not in parameters and "unavailable" not in parameters, function
    product = Path(groupwarden.__file__).parent
    mentions = [p for p in product.rglob("*.py") if "client_failure" in p.read_text(encoding="utf-8")]
    assert mentions == []

"""Every client library's exceptions, translated once, here: into the port's exceptions (a whole
call failed) or into per-item `KafkaError` values (one group or partition failed). Nothing else
leaves `adapters/`: any other exception that escapes a run is a groupwarden bug (the operator's
`InternalError`; the CLI prints its traceback). Every adapter entry point runs its client calls
inside `client_errors_translated` (the model: httpx's `map_httpcore_exceptions`) or catches them
itself where it knows more (the admin session's recorded SASL/TLS failure, the offsets-log reader's
codes).

The tree. Port exceptions are in cleanup/gateway.py; "retried" means connectivity/retry.py's one
policy (backoff until `default.api.timeout.ms`, metadata refreshed between tries):

    Exception
     |- KafkaUnavailable: the cluster could not be used for this call (an outage, retried later)
     |   |  <- kafka-python: any kafka.errors.KafkaError that fails a whole call (after the retries
     |   |     of `is_transient` ones: KafkaConnectionError, NodeNotReadyError, UnknownBrokerIdError,
     |   |     KafkaTimeoutError, a retriable broker error); any failure to bootstrap the client
     |   |  <- confluent-kafka: KafkaException of any other code (_TRANSPORT, _ALL_BROKERS_DOWN,
     |   |     _TIMED_OUT, ...; the offsets-log reader waits out `_LEADER_CHANGE` codes first)
     |   |  <- OSError, TimeoutError of either client's I/O
     |   '- KafkaAuthenticationFailed (not transient: configuration)
     |       |  <- kafka-python SaslAuthenticationFailedError;
     |       |     confluent _AUTHENTICATION, SASL_AUTHENTICATION_FAILED
     |       '- KafkaTlsHandshakeFailed
     |              <- kafka-python KafkaConnectionError("Handshake failed ..."); confluent _SSL
     |- OffsetsLogUnavailable: __consumer_offsets / __share_group_state / an audit topic cannot be
     |      read (the offsets-log reader): confluent TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED,
     |      UNKNOWN_TOPIC_OR_PART, a topic not visible; callers fall back to observed times
     |- OffsetsLogGap: the log start passed the ledger's position (also confluent _AUTO_OFFSET_RESET)
     '- AuditTopicError (adapters/kafka_audit_topic.py): a record was not stored, whatever the
            client raised; the recorder makes it AuditWriteError (nothing deleted unrecorded)

    KafkaError (a value, core/kafka_error.py): one item's error, never raised
     <- a broker error code in an answer (`error_from_code`: the protocol guide's name and code)
     <- a kafka-python exception that failed one coordinator's request (`error_from_exception`:
        a BrokerResponseError keeps its protocol name and code, a transport failure its class
        name; `unanswered` when the request was sent and the answer lost)
       |- retried (`is_retriable`): connectivity/retry.py RETRIABLE_ERRORS (COORDINATOR_LOAD_IN_PROGRESS,
       |  NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
       |  REQUEST_TIMED_OUT) and TRANSIENT_CLIENT_ERRORS; a deletion whose answer was lost never
       |  (its outcome is unknown)
       |- `is_authorization` (GROUP_/TOPIC_/CLUSTER_AUTHORIZATION_FAILED): AuthorizationFailed
       '- anything else: the item's answer (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import kafka.errors as Errors
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException

from groupwarden.adapters.oauth_token import explain_refused_token
from groupwarden.cleanup.gateway import (
    KafkaAuthenticationFailed,
    KafkaError,
    KafkaTlsHandshakeFailed,
    KafkaUnavailable,
)
from groupwarden.connectivity.retry import is_retriable_name
from groupwarden.connectivity.settings import ConnectionSettings

# What the client libraries and the network raise: never past an adapter's entry point.
CLIENT_EXCEPTIONS: Final = (Errors.KafkaError, KafkaException, OSError, TimeoutError)
# confluent-kafka (librdkafka) codes of a failed SASL authentication or TLS handshake.
CONFLUENT_AUTHENTICATION: Final = frozenset(
    {CKError._AUTHENTICATION, CKError.SASL_AUTHENTICATION_FAILED, CKError._SSL}
)

# kafka-python's transport failures that a failover causes: a refused or reset connection
# (KafkaConnectionError), a node in reconnect backoff (NodeNotReadyError), a coordinator that
# metadata no longer lists (UnknownBrokerIdError), no answer in time (KafkaTimeoutError). Retried
# like the broker errors of `connectivity.retry.RETRIABLE_ERRORS`; any other exception is not.
TRANSIENT_CLIENT_ERRORS: Final = frozenset(
    {"KafkaConnectionError", "NodeNotReadyError", "UnknownBrokerIdError", "KafkaTimeoutError"}
)
# Failures that happen before a request leaves this process: the broker never saw it.
NOT_SENT_CLIENT_ERRORS: Final = frozenset({"NodeNotReadyError", "UnknownBrokerIdError"})


def is_retriable(error: KafkaError) -> bool:
    """Another try may succeed: a retriable broker answer or a transient transport failure."""
    return is_retriable_name(error.name) or error.name in TRANSIENT_CLIENT_ERRORS


def is_transient(exc: BaseException) -> bool:
    """A whole request failed in a way a failover explains (see TRANSIENT_CLIENT_ERRORS)."""
    if isinstance(exc, Errors.BrokerResponseError):
        return is_retriable_name(str(exc.message))
    return type(exc).__name__ in TRANSIENT_CLIENT_ERRORS or isinstance(exc, (OSError, TimeoutError))


def error_from_code(code: int, message: str | None = None) -> KafkaError | None:
    """None for NO_ERROR, else the error named as in the Kafka protocol guide."""
    if code == 0:
        return None
    cls = Errors.for_code(code)
    # Codes newer than kafka-python get a generated UnknownError subclass: keep the number.
    name = cls.message if code in Errors.kafka_errors else f"UNKNOWN_ERROR_CODE_{code}"
    return KafkaError(name=str(name), code=code, retriable=bool(cls.retriable), message=message or "")


def exception_text(exc: BaseException) -> str:
    """`Name: message` of a client exception, its name once. kafka-python's errors already print
    their class name first ("KafkaTimeoutError: Unable to bootstrap ...", a broker error "[Error 3]
    UnknownTopicOrPartitionError: ..."); other exceptions (OSError, TimeoutError, ...) do not. Every
    message that names an exception goes through here: prefixing `type(exc).__name__` to `str(exc)`
    printed "KafkaTimeoutError: KafkaTimeoutError: ..." in the CLI's errors."""
    name = type(exc).__name__
    text = str(exc)
    head = text.split(":", 1)[0]
    if head == name or head.endswith(f"] {name}"):
        return text
    return f"{name}: {text}" if text else name


def exception_message(exc: BaseException) -> str:
    """What a client exception says without its name (for a `KafkaError` whose `name` is it)."""
    name = type(exc).__name__
    text = str(exc)
    if text == name:
        return ""
    return text.removeprefix(f"{name}: ")


def error_from_exception(exc: BaseException, redact: object = None) -> KafkaError:
    """A request that failed on the client side (connection lost, timeout, ...), for one item:
    named by the broker's error name or the exception type, the message without that name (the
    value prints as `name: message`)."""
    text = str(exc) if isinstance(exc, Errors.BrokerResponseError) else exception_message(exc)
    if callable(redact):
        text = str(redact(text))
    if isinstance(exc, Errors.BrokerResponseError) and exc.errno is not None:
        name, code = str(exc.message), int(exc.errno)
        return KafkaError(name=name, code=code, retriable=bool(exc.retriable), message=text)
    retriable = bool(getattr(exc, "retriable", False)) or isinstance(exc, (OSError, TimeoutError))
    return KafkaError(name=type(exc).__name__, code=-1, retriable=retriable, message=text)


def is_authentication_failure(exc: BaseException | None) -> bool:
    if isinstance(exc, Errors.SaslAuthenticationFailedError):
        return True
    return is_tls_failure(exc)


def is_tls_failure(exc: BaseException | None) -> bool:
    """kafka-python's failed TLS handshake (kafka/net/manager.py wraps it like this). Its first
    argument, not `str(exc)`: kafka-python's errors print as "KafkaConnectionError: <argument>"."""
    if not isinstance(exc, Errors.KafkaConnectionError) or not exc.args:
        return False
    return str(exc.args[0]).startswith("Handshake failed")


def confluent_error(exc: BaseException) -> CKError | None:
    """The librdkafka error a confluent-kafka KafkaException carries (None: another exception)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], CKError):
        return exc.args[0]
    return None


def unavailable(
    exc: BaseException, settings: ConnectionSettings, what: str = "could not use"
) -> KafkaUnavailable:
    """The port's exception for a whole call that a client library failed with `exc` (the tree in
    the module docstring); its message names the cluster and the error, redacted."""
    where = settings.describe()
    error = confluent_error(exc)
    if error is not None:
        text = settings.redact(f"{error.name()}: {error.str()}")
        if error.code() == CKError._SSL:
            return tls_failure(where, text)
        if error.code() in CONFLUENT_AUTHENTICATION:
            text = explain_refused_token(settings, text)
            return KafkaAuthenticationFailed(f"authentication to {where} failed: {text}")
        return KafkaUnavailable(f"{what} Kafka at {where}: {text}")
    if is_tls_failure(exc):
        return tls_failure(where, settings.redact(str(exc)))
    if isinstance(exc, Errors.SaslAuthenticationFailedError):
        text = explain_refused_token(settings, settings.redact(str(exc)))
        return KafkaAuthenticationFailed(f"authentication to {where} failed: {text}")
    return KafkaUnavailable(f"{what} Kafka at {where}: {settings.redact(exception_text(exc))}")


@contextmanager
def client_errors_translated(
    settings: ConnectionSettings,
    what: str = "could not use",
    confluent: Callable[[CKError], Exception] | None = None,
) -> Iterator[None]:
    """Runs a block of client calls: a client library's or the network's exception leaves it as
    the port's (`unavailable`; `confluent` maps librdkafka errors where the caller knows better,
    e.g. the offsets-log reader's OffsetsLogUnavailable). Anything else passes unchanged. The
    client's exception is not chained: its frames hold sockets, its text may hold a secret."""
    try:
        yield
    except CLIENT_EXCEPTIONS as exc:
        error = confluent_error(exc)
        if confluent is not None and error is not None:
            raise confluent(error) from None
        raise unavailable(exc, settings, what) from None


def tls_failure(where: str, text: str) -> KafkaTlsHandshakeFailed:
    """A failed TLS handshake, with the likely fix when the broker's certificate was not trusted
    (the most common cause: a CA in the Secret that did not sign the broker's certificate)."""
    hint = ""
    if "certificate verify failed" in text:
        hint = (
            ": the broker's certificate is not signed by the CA the client trusts "
            "(check ssl.ca.pem / ssl.truststore.certificates / ssl.ca.location)"
        )
    return KafkaTlsHandshakeFailed(f"TLS handshake with {where} failed{hint} ({text})")

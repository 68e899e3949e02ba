"""Broker error codes and client exceptions -> the port's per-item `KafkaError` values."""

from __future__ import annotations

from typing import Final

import kafka.errors as Errors
from confluent_kafka import KafkaException

from groupwarden.cleanup.gateway import KafkaError, KafkaTlsHandshakeFailed
from groupwarden.cleanup.retry import is_retriable_name

# kafka-python's transport failures that a failover causes: a refused or reset connection
# (KafkaConnectionError), a node in reconnect backoff (NodeNotReadyError), a coordinator that
# metadata no longer lists (UnknownBrokerIdError), no answer in time (KafkaTimeoutError). Retried
# like the broker errors of `cleanup.retry.RETRIABLE_ERRORS`; any other exception is not.
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


def error_from_exception(exc: BaseException, redact: object = None) -> KafkaError:
    """A request that failed on the client side (connection lost, timeout, ...), for one item."""
    text = str(exc)
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
    """kafka-python's failed TLS handshake (kafka/net/manager.py wraps it like this)."""
    return isinstance(exc, Errors.KafkaConnectionError) and str(exc).startswith("Handshake failed")


def is_client_failure(exc: BaseException) -> bool:
    """An error of a Kafka client library or the network that an adapter let through: the cluster
    could not be used (transient). Anything else escaping a run is a groupwarden bug."""
    return isinstance(exc, (Errors.KafkaError, KafkaException, OSError, TimeoutError))


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

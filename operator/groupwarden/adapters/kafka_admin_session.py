"""`AdminSession`: one kafka-python 3.x admin connection, plus per-coordinator batching.

kafka-python's public admin methods raise on the first group error, so the gateway sends its
protocol messages through the client's connection manager (`_manager.send`, the path kafka-python's
own admin methods use) and parses the answers itself. This module owns that connection:

- connects lazily, bounded by the settings' API timeout; a cluster we cannot reach raises
  `KafkaUnavailable`, failed SASL authentication or TLS handshake `KafkaAuthenticationFailed`
  (kafka-python itself only logs those and retries until its bootstrap timeout);
- counts requests by API name (`request_counts`), so batching is observable and tested;
- `per_coordinator`: one batched FindCoordinator (v4+, KIP-699), then one request per coordinator
  and chunk, sent to all coordinators concurrently. Every group ends up with an answer or its own
  `KafkaError`;
- retries (`cleanup.retry`, the one policy of every request path): a group whose coordinator
  moved, is loading or cannot be reached, and a whole request that failed in transit, are tried
  again with backoff until the settings' API timeout, metadata refreshed between tries. A group's
  non-retriable error is its answer at once. Destructive requests (`per_coordinator(...,
  before_send=...)`) ask the caller's guard before every send, never re-send a request whose
  answer was lost, and read a re-send's "not found" as done by the earlier attempt: see
  `per_coordinator`.

The errors, from the wire up (the one place they are sorted):

    kafka-python exception / broker error code
      |- per item (a group, a partition): KafkaError value in the answer (error_from_code,
      |    error_from_exception; `unanswered` when the request was sent and the answer lost)
      |    |- retriable (cleanup.retry.RETRIABLE_ERRORS, TRANSIENT_CLIENT_ERRORS): retried here
      |    '- anything else: the item's answer
      '- whole call (`run`): KafkaUnavailable (connection, bootstrap, an answer we cannot read,
           ListGroups of a broker after the deadline); KafkaAuthenticationFailed /
           KafkaTlsHandshakeFailed for SASL and TLS failures
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeAlias, TypeVar

import kafka.errors as Errors
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest

from groupwarden.adapters.client_config import kafka_python_config
from groupwarden.adapters.kafka_errors import (
    NOT_SENT_CLIENT_ERRORS,
    error_from_code,
    error_from_exception,
    is_authentication_failure,
    is_retriable,
    is_tls_failure,
    is_transient,
    tls_failure,
)
from groupwarden.adapters.oauth_token import explain_refused_token
from groupwarden.cleanup.connection_settings import ConnectionSettings
from groupwarden.cleanup.gateway import KafkaAuthenticationFailed, KafkaError, KafkaUnavailable
from groupwarden.cleanup.retry import (
    DONE_BY_EARLIER_ATTEMPT,
    NOT_RESENT,
    RetryDeadline,
    RetryPolicy,
)

BOOTSTRAP_TIMEOUT_MS = 15_000

log = logging.getLogger(__name__)

T = TypeVar("T")
Outcome: TypeAlias = T | KafkaError  # one item's answer: its value, or its own broker error
_GROUP_KEY_TYPE = 0  # FindCoordinator key type GROUP
# kafka-python's reconnect backoff grows to 30 s by default: a node back from a restart would be
# shunned for most of a call's deadline. The Java clients' reconnect.backoff.max.ms is 1 s.
RECONNECT_BACKOFF_MAX_MS = 1000
# Asked before each send of a destructive request: a reason to stop (the run guard), or None.
SendGuard: TypeAlias = Callable[[], str | None]


class _RedactSecrets(logging.Filter):
    """kafka-python logs its whole configuration, SASL password included, at DEBUG level
    ("Starting KafkaAdminClient with configuration"): scrub known secrets from its records."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            for secret in self.secrets:
                message = message.replace(secret, "***")
            record.msg, record.args = message, None
        return True


_REDACT = _RedactSecrets()
logging.getLogger("kafka.admin.client").addFilter(_REDACT)


class AdminSession:
    """A lazily connected kafka-python admin client. Thread-safe: calls from several threads
    are serialised onto kafka-python's IO thread."""

    def __init__(
        self,
        settings: ConnectionSettings,
        max_groups_per_request: int = 1000,
        diagnose: Callable[[], BaseException | None] | None = None,
    ) -> None:
        if max_groups_per_request <= 0:
            raise ValueError("max_groups_per_request must be positive")
        self.settings = settings
        self.max_groups_per_request = max_groups_per_request
        self.request_counts: Counter[str] = Counter()
        self.retry_policy = RetryPolicy.from_api_timeout_ms(settings.api_timeout_ms)
        self.clock: Callable[[], float] = time.monotonic
        self._admin: KafkaAdminClient | None = None
        self._net_client: KafkaNetClient | None = None
        self._auth_error: BaseException | None = None
        self._lock = threading.Lock()
        # Asked when connecting fails without a recorded SASL/TLS error: kafka-python sometimes
        # sees only "socket disconnected" when the broker closes after a failed authentication.
        self._diagnose = diagnose
        _REDACT.secrets.update(settings.secrets())

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> KafkaAdminClient:
        with self._lock:
            if self._admin is not None:
                return self._admin
            config = kafka_python_config(self.settings)
            # Reaching a live broker takes milliseconds; waiting the whole API timeout (60 s) for a
            # dead one only delays the KafkaUnavailable that the CLI and the operator act on.
            config["bootstrap_timeout_ms"] = min(self.settings.api_timeout_ms, BOOTSTRAP_TIMEOUT_MS)
            config["reconnect_backoff_max_ms"] = RECONNECT_BACKOFF_MAX_MS
            config["kafka_client"] = self._make_net_client
            self._auth_error = None
            try:
                self._admin = KafkaAdminClient(**config)
                return self._admin
            except Exception as exc:
                failure = self._unavailable("could not connect to", exc)
            # Outside the except block: the failed client's frames (and sockets) must not stay
            # reachable through the exception's context.
            self._release_failed_client()
            if not isinstance(failure, KafkaAuthenticationFailed) and self._diagnose is not None:
                diagnosis = self._diagnose()
                if isinstance(diagnosis, KafkaAuthenticationFailed):
                    failure = diagnosis
            raise failure

    def _make_net_client(self, **configs: Any) -> KafkaNetClient:
        # Kept so a failed bootstrap can be cleaned up (KafkaAdminClient.__init__ leaves its IO
        # thread running when bootstrapping times out), and hooked so that SASL/TLS failures,
        # which kafka-python only logs, can be reported as what they are.
        client = KafkaNetClient(**configs)
        self._net_client = client
        manager = client._manager
        get_connection = manager.get_connection

        def recording_get_connection(node_id: Any, *args: Any, **kwargs: Any) -> Any:
            conn = get_connection(node_id, *args, **kwargs)
            conn.close_future.add_errback(self._record_connection_failure)
            return conn

        manager.get_connection = recording_get_connection
        return client

    def _record_connection_failure(self, exc: BaseException) -> None:
        if is_authentication_failure(exc):
            self._auth_error = exc

    def _release_failed_client(self) -> None:
        client, self._net_client = self._net_client, None
        if client is None:
            return
        try:
            net = client._net
            net.stop(timeout_ms=5000)
            # kafka-python 3.0.12 never closes the socket of a connect that is still pending
            # (or that failed) when bootstrapping gives up: close what the selector still holds.
            for key in list(net._selector.get_map().values()):
                if key.fileobj not in (net._wakeup_r, net._wakeup_w):
                    key.fileobj.close()
            client.close()
        except Exception:  # cleanup of a client that never worked: nothing more to do
            log.debug("closing a failed Kafka client", exc_info=True)
        # ... and drops failed sockets unclosed: finalise them now, not at a random later GC
        # (their ResourceWarning is known noise here).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()

    def _unavailable(self, what: str, exc: BaseException) -> KafkaUnavailable:
        where = self.settings.describe()
        if self._auth_error is not None:
            reason = self.settings.redact(str(self._auth_error))
            if is_tls_failure(self._auth_error):
                return tls_failure(where, reason)
            reason = explain_refused_token(self.settings, reason)
            return KafkaAuthenticationFailed(f"authentication to {where} failed: {reason}")
        reason = self.settings.redact(f"{type(exc).__name__}: {exc}")
        return KafkaUnavailable(f"{what} Kafka at {where}: {reason}")

    def run(self, coro: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `coro(*args)` on the client's IO thread; whole-call failures -> KafkaUnavailable."""
        admin = self._connect()
        try:
            return admin._manager.run(coro, *args)  # type: ignore[no-any-return]
        except Errors.SaslAuthenticationFailedError as exc:
            self._auth_error = exc
            raise self._unavailable("could not authenticate to", exc) from None
        except Errors.KafkaError as exc:
            # Connection lost, timeouts, a broker too old for an API we need: the whole call
            # failed (per-group broker errors never get here, they are answers).
            raise self._unavailable("could not use", exc) from None

    def close(self) -> None:
        with self._lock:
            admin, self._admin, self._net_client = self._admin, None, None
        if admin is not None:
            admin.close()

    # -- requests (coroutines: run them through `run`) -------------------------------------------

    @property
    def manager(self) -> Any:
        assert self._admin is not None, "call through AdminSession.run"
        return self._admin._manager

    def send(self, request: Any, node_id: Any = None) -> Any:
        """Send now (to the least loaded broker when `node_id` is None); await the result."""
        self.request_counts[str(request.name).removesuffix("Request")] += 1
        return self.manager.send(request, node_id=node_id)

    async def sleep(self, seconds: float) -> None:
        assert self._admin is not None
        await self._admin._net.sleep(seconds)

    def deadline(self) -> RetryDeadline:
        """The retry deadline of a call starting now."""
        return self.retry_policy.start(self.clock())

    async def backoff(self, deadline: RetryDeadline, what: str) -> bool:
        """Wait before the next try and refresh metadata (a failed-over partition or a fenced node
        shows there); False when the deadline has passed (give up with the last error)."""
        delay = deadline.next_delay(self.clock())
        if delay is None:
            return False
        log.info("Kafka: retrying %s in %.2fs (%.1fs left)", what, delay, deadline.remaining(self.clock()))
        await self.sleep(delay)
        await self.refresh_metadata()
        return True

    async def refresh_metadata(self) -> None:
        """Best effort: the next try works with what it has when no node answers."""
        try:
            await self.manager.cluster.refresh_metadata()
        except Errors.KafkaError as exc:
            log.debug("Kafka: metadata refresh failed: %s", exc)

    async def send_retrying(self, build: Callable[[], Any], node_id: Any = None) -> Any:
        """`send(build())` to one node (the least loaded when None), again after a transient
        failure until the deadline; then the last failure is raised (`run`: KafkaUnavailable)."""
        deadline = self.deadline()
        while True:
            request = build()
            try:
                return await self.send(request, node_id)
            except Errors.KafkaError as exc:
                if not is_transient(exc) or not await self.backoff(deadline, str(request.name)):
                    raise

    async def find_coordinators(
        self, group_ids: Sequence[str]
    ) -> tuple[dict[Any, list[str]], dict[str, KafkaError]]:
        """Batched FindCoordinator: group ids by coordinator node, and per-group lookup errors. A
        lookup that fails in transit raises (`per_coordinator` tries it again)."""
        by_node: dict[Any, list[str]] = defaultdict(list)
        errors: dict[str, KafkaError] = {}
        cluster = self.manager.cluster
        for chunk in chunks(group_ids, self.max_groups_per_request):
            request = FindCoordinatorRequest(key_type=_GROUP_KEY_TYPE, coordinator_keys=chunk, min_version=4)
            response = await self.send(request)
            for row in response.coordinators:
                error = error_from_code(row.error_code, row.error_message)
                if error is not None:
                    errors[row.key] = error
                    continue
                node_id = cluster.add_coordinator(row, _GROUP_KEY_TYPE, row.key, synthesize_node_id=False)
                by_node[node_id].append(row.key)
        return by_node, errors

    async def per_coordinator(
        self,
        group_ids: Sequence[str],
        build: Callable[[list[str]], Any],
        parse: Callable[[Any], Mapping[str, Outcome[T]]],
        *,
        before_send: SendGuard | None = None,
    ) -> dict[str, Outcome[T]]:
        """Send `build(chunk)` to every coordinator concurrently and `parse` the answers; groups
        with a retriable error are tried again (coordinators found again) until the deadline. A
        FindCoordinator that fails in transit is tried again too; when it never gets through, the
        whole call fails (`run`: KafkaUnavailable) unless earlier tries answered some groups (the
        others then keep the transport error).

        `before_send` makes it a destructive request (DeleteGroups, OffsetDelete): the guard is
        asked before every send, the first included (a reason stops the groups not yet answered:
        NOT_RESENT). A group whose answer was lost (sent, then the connection reset or the request
        timed out) is never sent again: its outcome is unknown, and a re-send long after could
        delete what a client committed since the run's re-check. A group whose coordinator
        answered a retriable error is sent again; when that re-send finds it gone, the earlier
        attempt's write may have landed (a write that timed out is still replicated and replayed
        by the next coordinator): DONE_BY_EARLIER_ATTEMPT, not a failure."""
        destructive = before_send is not None
        results: dict[str, Outcome[T]] = {}
        answered_retriable: set[str] = set()  # a coordinator answered, retriably: it may have written
        pending = list(dict.fromkeys(group_ids))
        deadline = self.deadline()
        while pending:
            if before_send is not None:
                stop = before_send()
                if stop is not None:
                    for group_id in pending:
                        results[group_id] = _not_resent(results.get(group_id), stop)
                    break
            try:
                attempt, reached = await self._attempt(pending, build, parse)
            except Errors.KafkaError as exc:  # FindCoordinator failed in transit: nothing was sent
                if not is_transient(exc):
                    raise
                if await self.backoff(deadline, f"FindCoordinator for {len(pending)} groups"):
                    continue
                if not results:
                    raise
                error = error_from_exception(exc, self.settings.redact)
                results.update(dict.fromkeys(pending, error))
                break
            for group_id, result in attempt.items():
                if destructive and group_id in answered_retriable:
                    result = _after_resend(result)
                results[group_id] = result
                if isinstance(result, KafkaError) and is_retriable(result) and group_id in reached:
                    answered_retriable.add(group_id)
            pending = [g for g in pending if _retriable(results.get(g), destructive)]
            if pending and not await self.backoff(deadline, f"{len(pending)} groups"):
                break
        return results

    async def _attempt(
        self,
        group_ids: list[str],
        build: Callable[[list[str]], Any],
        parse: Callable[[Any], Mapping[str, Outcome[T]]],
    ) -> tuple[dict[str, Outcome[T]], set[str]]:
        """One try: find the coordinators, send to each. Returns every group's outcome and the
        groups whose coordinator answered (a lookup error or a lost answer is not an answer)."""
        results: dict[str, Outcome[T]] = {}
        reached: set[str] = set()
        by_node, errors = await self.find_coordinators(group_ids)
        results.update(errors)
        # Waves with one request in flight per coordinator: coordinators answer concurrently,
        # while a connection never exceeds the client's max in-flight requests (sending all
        # chunks at once fails the excess with NodeNotReadyError at ~5k+ groups).
        queues = {node: list(chunks(ids, self.max_groups_per_request)) for node, ids in by_node.items()}
        while any(queues.values()):
            wave = [(queue.pop(0), node) for node, queue in queues.items() if queue]
            sent = [(chunk, self.send(build(chunk), node)) for chunk, node in wave]
            for chunk, future in sent:
                try:
                    answer = parse(await future)
                    reached.update(chunk)  # answered (per group: maybe a retriable error)
                except Errors.KafkaError as exc:  # this coordinator only: its groups fail
                    error = error_from_exception(exc, self.settings.redact)
                    if isinstance(exc, Errors.BrokerResponseError):
                        reached.update(chunk)
                    elif error.name not in NOT_SENT_CLIENT_ERRORS:
                        # Sent, unanswered (connection lost, timeout): whether the broker
                        # executed it is unknown.
                        error = replace(error, unanswered=True)
                    answer = dict.fromkeys(chunk, error)
                for group_id in chunk:
                    results[group_id] = answer.get(group_id, _MISSING)
        return results, reached


_MISSING = KafkaError("MISSING_FROM_RESPONSE", message="the broker did not answer for this item")


def _retriable(result: object, destructive: bool = False) -> bool:
    """Worth another try. Never a destructive request whose answer was lost (an unknown outcome)."""
    if not isinstance(result, KafkaError) or not is_retriable(result):
        return False
    return not (destructive and result.unanswered)


def _after_resend(result: Outcome[T]) -> Outcome[T]:
    """A re-sent deletion's answer, after its coordinator answered an earlier attempt retriably."""
    if isinstance(result, KafkaError) and result.name == "GROUP_ID_NOT_FOUND":
        return KafkaError(
            DONE_BY_EARLIER_ATTEMPT,
            message="an earlier attempt of this call was answered retriably during a failover; "
            "the re-send found nothing to delete",
        )
    return result


def _not_resent(last: object, reason: str) -> KafkaError:
    before = f" (last answer: {last})" if isinstance(last, KafkaError) else ""
    return KafkaError(NOT_RESENT, retriable=True, message=f"not sent again: {reason}{before}")


def chunks(items: Sequence[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])

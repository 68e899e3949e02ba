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
- retries (`connectivity.retry`, the one policy of every request path): a group whose coordinator
  moved, is loading or cannot be reached, and a whole request that failed in transit, are tried
  again with backoff until the settings' API timeout, metadata refreshed between tries. A group's
  non-retriable error is its answer at once. Destructive requests (`per_coordinator(...,
  before_send=...)`) ask the caller's guard before every send, never re-send a request whose
  answer was lost, and read a re-send's "not found" as done by the earlier attempt: see
  `per_coordinator`;
- a stopping process (`connectivity/stopping.py`, the operator's SIGTERM): no new call starts, a
  retried request gives up at once, a destructive call sends none of its remaining requests, and
  `abort_sessions` ends what still waits (a bootstrap, an answer: a lost answer is an unknown
  outcome);
- its client's log records are attributed to its cluster, and a successful call tells the log
  filter that the cluster is reachable again (`client_logs`: a repeated failure is logged once).

Its errors (the tree: adapters/client_errors.py): a group's or a partition's error is its
`KafkaError` in the answer; a whole call that fails raises `KafkaUnavailable` (or
`KafkaAuthenticationFailed` / `KafkaTlsHandshakeFailed`), never a kafka-python exception.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import warnings
import weakref
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeAlias, TypeVar

import kafka.errors as Errors
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest

from groupwarden.adapters.client_config import kafka_python_config
from groupwarden.adapters.client_errors import (
    CLIENT_EXCEPTIONS,
    NOT_SENT_CLIENT_ERRORS,
    client_errors_translated,
    error_from_code,
    error_from_exception,
    is_authentication_failure,
    is_retriable,
    is_transient,
    unavailable,
)
from groupwarden.adapters.client_logs import REPEATED, REPEATED_FAILURES
from groupwarden.cleanup.gateway import KafkaAuthenticationFailed, KafkaError, KafkaUnavailable
from groupwarden.connectivity.redaction import redact
from groupwarden.connectivity.retry import (
    DONE_BY_EARLIER_ATTEMPT,
    NOT_RESENT,
    RetryDeadline,
    RetryNotice,
    RetryObserver,
    RetryPolicy,
)
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.connectivity.stopping import stopping

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
            record.msg, record.args = redact(record.getMessage(), self.secrets), None
        return True


_REDACT = _RedactSecrets()
logging.getLogger("kafka.admin.client").addFilter(_REDACT)

# Every session of the process, for `abort_sessions` (a stopping operator).
_SESSIONS: weakref.WeakSet[AdminSession] = weakref.WeakSet()
# How long an abort waits for a client's IO thread to end.
ABORT_TIMEOUT_MS = 1000


def abort_sessions(*, connecting_only: bool = False) -> int:
    """A stopping process: stop the IO of every session's client (only of those still
    bootstrapping with `connecting_only`, which have sent nothing), so every call waiting on it
    fails at once (`KafkaUnavailable`; a destructive request whose answer is lost is an unknown
    outcome). Returns how many clients were stopped."""
    return sum(session.abort(connecting_only=connecting_only) for session in list(_SESSIONS))


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
        # Told before each pause of a retried request (the operator's "waiting for Kafka" status).
        self.on_retry: RetryObserver | None = None
        self._admin: KafkaAdminClient | None = None
        self._net_client: KafkaNetClient | None = None
        self._auth_error: BaseException | None = None
        self._lock = threading.Lock()
        # Asked when connecting fails without a recorded SASL/TLS error: kafka-python sometimes
        # sees only "socket disconnected" when the broker closes after a failed authentication.
        self._diagnose = diagnose
        self._aborted = False
        self._cluster = ",".join(settings.bootstrap_servers)  # how the log filter names it
        _REDACT.secrets.update(settings.secrets())
        _SESSIONS.add(self)

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
            diagnose = self._diagnose if not stopping() else None
            if not isinstance(failure, KafkaAuthenticationFailed) and diagnose is not None:
                diagnosis = diagnose()
                if isinstance(diagnosis, KafkaAuthenticationFailed):
                    failure = diagnosis
            raise failure

    def _make_net_client(self, **configs: Any) -> KafkaNetClient:
        # Kept so a failed bootstrap can be cleaned up (KafkaAdminClient.__init__ leaves its IO
        # thread running when bootstrapping times out), and hooked so that SASL/TLS failures,
        # which kafka-python only logs, can be reported as what they are.
        client = KafkaNetClient(**configs)
        self._net_client = client
        self._aborted = False
        manager = client._manager
        net = client._net
        start = net.start

        def start_attributed() -> None:
            # Its IO thread logs the connection failures, most without naming the broker.
            start()
            REPEATED_FAILURES.attribute_thread(net._io_thread, self._cluster)

        net.start = start_attributed
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
        """The port's exception (adapters/client_errors.py): a SASL or TLS failure recorded on a
        connection (kafka-python only logs those) comes first, whatever the call then saw."""
        return unavailable(self._auth_error or exc, self.settings, what)

    def run(self, coro: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `coro(*args)` on the client's IO thread; whole-call failures -> KafkaUnavailable.
        A stopping process starts no call."""
        if stopping():
            raise KafkaUnavailable(f"{self.settings.describe()}: not asked: the operator is stopping")
        admin = self._connect()
        try:
            result: T = admin._manager.run(coro, *args)
        except Errors.SaslAuthenticationFailedError as exc:
            self._auth_error = exc
            raise self._unavailable("could not authenticate to", exc) from None
        except CLIENT_EXCEPTIONS as exc:
            # Connection lost, timeouts, a broker too old for an API we need: the whole call
            # failed (per-group broker errors never get here, they are answers).
            raise self._unavailable("could not use", exc) from None
        return result

    def abort(self, *, connecting_only: bool = False) -> bool:
        """Stop the client's IO (see `abort_sessions`), without the lock (a bootstrap holds it).
        True when there was a client to stop."""
        client = self._net_client
        if client is None or (connecting_only and self._admin is not None):
            return False
        self._aborted = True
        try:
            client._net.stop(timeout_ms=ABORT_TIMEOUT_MS)
        except Exception:  # a client already closing: nothing more to stop
            log.debug("stopping a Kafka client", exc_info=True)
        return True

    def close(self) -> None:
        with self._lock:
            admin, self._admin, self._net_client = self._admin, None, None
            aborted, self._aborted = self._aborted, False
        if admin is None:
            return
        if aborted:  # its IO already stopped: close what is left, quietly
            try:
                admin.close()
            except Exception:
                log.debug("closing an aborted Kafka client", exc_info=True)
            return
        with client_errors_translated(self.settings, "could not close the connection to"):
            admin.close()

    # -- requests (coroutines: run them through `run`) -------------------------------------------

    @property
    def manager(self) -> Any:
        assert self._admin is not None, "call through AdminSession.run"
        return self._admin._manager

    def send(self, request: Any, node_id: Any = None) -> Any:
        """Send now (to the least loaded broker when `node_id` is None); await the result."""
        self.request_counts[str(request.name).removesuffix("Request")] += 1
        future = self.manager.send(request, node_id=node_id)
        future.add_callback(self._answered)
        return future

    def _answered(self, _response: Any) -> None:
        """On the IO thread, for every answer: the cluster is reachable (the log filter ends its
        kinds of failure, with one line when they repeated)."""
        admin = self._admin
        if REPEATED_FAILURES.failing and admin is not None:
            REPEATED_FAILURES.reachable(self._cluster, _broker_addresses(admin))

    async def sleep(self, seconds: float) -> None:
        assert self._admin is not None
        await self._admin._net.sleep(seconds)

    def deadline(self) -> RetryDeadline:
        """The retry deadline of a call starting now."""
        return self.retry_policy.start(self.clock())

    async def backoff(self, deadline: RetryDeadline, what: str, error: str = "") -> bool:
        """Wait before the next try and refresh metadata (a failed-over partition or a fenced node
        shows there); False when the deadline has passed (give up with the last error). `error`
        (the last answer's name) goes to `on_retry` with `what`."""
        now = self.clock()
        delay = deadline.next_delay(now)
        if delay is None:
            return False
        # Logged once per kind while it repeats (client_logs), not once per try.
        log.info(
            "Kafka %s: %s failed (%s): retrying for up to %.0fs",
            self._cluster,
            what,
            error or "no answer",
            deadline.remaining(now),
            extra=REPEATED,
        )
        self._notify(RetryNotice(what, error, deadline.waited(now), deadline.remaining(now)))
        await self.sleep(delay)
        await self.refresh_metadata()
        return True

    def _notify(self, notice: RetryNotice) -> None:
        observer = self.on_retry
        if observer is None:
            return
        try:
            observer(notice)
        except Exception:  # telling someone must never fail the request being retried
            log.warning("a retry observer failed", exc_info=True)

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
                if not is_transient(exc) or not await self.backoff(
                    deadline, str(request.name), _failure_name(exc)
                ):
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
        parse: Callable[[Any], Mapping[str, Outcome[T]]] | None,
        *,
        before_send: SendGuard | None = None,
        chunk_size: int | None = None,
        in_flight: int = 1,
        parse_chunk: Callable[[list[str], Any], Mapping[str, Outcome[T]]] | None = None,
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
        by the next coordinator): DONE_BY_EARLIER_ATTEMPT, not a failure.

        `chunk_size` groups a request (default `max_groups_per_request`), up to `in_flight` requests
        per coordinator at a time (below the client's max in-flight requests per connection), and
        `parse_chunk(chunk, response)` instead of `parse(response)` for an API whose answer does
        not name its groups (OffsetDelete: one group a request)."""
        destructive = before_send is not None
        size = chunk_size or self.max_groups_per_request

        def read(chunk: list[str], response: Any) -> Mapping[str, Outcome[T]]:
            if parse_chunk is not None:
                return parse_chunk(chunk, response)
            assert parse is not None
            return parse(response)

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
                attempt, reached = await self._attempt(pending, build, read, size, in_flight)
            except Errors.KafkaError as exc:  # FindCoordinator failed in transit: nothing was sent
                if not is_transient(exc):
                    raise
                if await self.backoff(
                    deadline, f"FindCoordinator for {len(pending)} groups", _failure_name(exc)
                ):
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
            if pending and not await self.backoff(
                deadline, f"{len(pending)} groups", _last_error_name(results, pending)
            ):
                break
        return results

    async def _attempt(
        self,
        group_ids: list[str],
        build: Callable[[list[str]], Any],
        read: Callable[[list[str], Any], Mapping[str, Outcome[T]]],
        size: int,
        in_flight: int,
    ) -> tuple[dict[str, Outcome[T]], set[str]]:
        """One try: find the coordinators, send to each. Returns every group's outcome and the
        groups whose coordinator answered (a lookup error or a lost answer is not an answer)."""
        results: dict[str, Outcome[T]] = {}
        reached: set[str] = set()
        by_node, errors = await self.find_coordinators(group_ids)
        results.update(errors)
        # Waves of `in_flight` requests per coordinator: coordinators answer concurrently, while
        # a connection never exceeds the client's max in-flight requests (sending all chunks at
        # once fails the excess with NodeNotReadyError at ~5k+ groups).
        queues = {node: list(chunks(ids, size)) for node, ids in by_node.items()}
        while any(queues.values()):
            if stopping():  # a stopping process sends nothing more (what was sent has its answer)
                for chunk in (chunk for queue in queues.values() for chunk in queue):
                    results.update(dict.fromkeys(chunk, _STOPPING_ERROR))
                break
            wave: list[tuple[list[str], Any]] = []
            for node, queue in queues.items():
                taken, queue[:] = queue[:in_flight], queue[in_flight:]
                wave.extend((chunk, node) for chunk in taken)
            sent = [(chunk, self.send(build(chunk), node)) for chunk, node in wave]
            for chunk, future in sent:
                try:
                    answer = read(chunk, await future)
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
_STOPPING_ERROR = KafkaError(NOT_RESENT, retriable=True, message="not sent: the operator is stopping")


def _broker_addresses(admin: KafkaAdminClient) -> list[str]:
    """`host:port` of the brokers the client knows (how librdkafka and kafka-python name them)."""
    brokers = admin._manager.cluster.brokers()
    return [f"[{b.host}]:{b.port}" if ":" in b.host else f"{b.host}:{b.port}" for b in brokers]


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


def _failure_name(exc: BaseException) -> str:
    """A client exception as a notice names it: the broker's error name, or the exception type."""
    if isinstance(exc, Errors.BrokerResponseError):
        return str(exc.message)
    return type(exc).__name__


def _last_error_name(results: Mapping[str, object], pending: Sequence[str]) -> str:
    """The error name of the first group still waiting for an answer (e.g. COORDINATOR_LOAD_IN_PROGRESS)."""
    for group_id in pending:
        result = results.get(group_id)
        if isinstance(result, KafkaError):
            return result.name
    return ""

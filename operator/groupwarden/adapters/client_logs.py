"""What the Kafka client libraries log, in the operator's log: through Python logging, and a
repeated failure once.

- Every librdkafka client (confluent-kafka: the offsets-log reader, the audit topic, the
  observation store, their admin clients) logs to the Python logger `groupwarden.librdkafka`
  (`client_config.confluent_config` sets it), never straight to stderr in librdkafka's own
  `%3|1796186739.753|FAIL|...` format past every filter. kafka-python logs to `kafka.*`.
- `RepeatedFailures`, a filter on the operator's log handlers (`install`): a record of a client
  library (and one of ours marked `extra=REPEATED`, the retry lines) passes the first time its
  kind is seen, a kind being the logger, the text with its numbers masked, and the broker or
  cluster it is about. Its repeats are counted and summarised in one line at most every
  `summary_every` seconds ("... (and 212 more like it in the last 10m 3s)"). When that cluster
  answers again (`reachable`, told by the admin session for every answer) and the kind has not
  been seen for `RECOVERED_AFTER_S`, one line says so ("Kafka 127.0.0.1:9092 reachable again
  (recovered): 7 kinds of client errors since 05:06:01 UTC, 430 repeats not logged") and the
  kinds start afresh. An error that is not repeated is logged as it is.
- A kind is about the broker its text names (`host:port`), else the cluster of the client whose
  IO thread logged it (most of kafka-python's failures name no broker: "Connection failed:
  KafkaConnectionError: 111 ECONNREFUSED"; `attribute_thread`, registered by the admin session).
- The filter adds no text of a record's arguments beyond what the record already said, so what
  the clients' own redaction (`kafka_admin_session._RedactSecrets`) removed stays removed.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

LIBRDKAFKA_LOGGER: Final = "groupwarden.librdkafka"
# Loggers of the client libraries (kafka-python's package logger and its children).
_LIBRARY_PREFIXES: Final = ("kafka.", LIBRDKAFKA_LOGGER)
# `log.info(..., extra=REPEATED)`: one of our own lines that repeats while a failure lasts.
REPEATED: Final = {"gw_repeated": True}
# A kind that keeps failing is summarised this often (seconds).
SUMMARY_EVERY_S: Final = 600.0
# A kind ends (recovered) at an answer of its cluster once it has not been seen for this long:
# longer than the clients' reconnect backoff (librdkafka's reconnect.backoff.max.ms, 10 s), so a
# broker still down while the others answer stays one kind.
RECOVERED_AFTER_S: Final = 12.0

log = logging.getLogger(__name__)

# `host:port` or `[v6]:port`, not a part of a longer token ("thrd:10.0.0.1:9092" holds one, a
# clock "05:06:01" none).
_ADDRESS = re.compile(r"(?<![\w.:-])(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}(?![\d.:])")
_NUMBER = re.compile(r"\d+")
# librdkafka's own count of what it held back is not a kind of its own.
_SUPPRESSED = re.compile(r", \d+ identical error\(s\) suppressed")


def librdkafka_logger() -> logging.Logger:
    """The logger every librdkafka client of groupwarden logs to (its `logger` property)."""
    return logging.getLogger(LIBRDKAFKA_LOGGER)


def _is_client_record(record: logging.LogRecord) -> bool:
    name = record.name
    return name == "kafka" or name.startswith(_LIBRARY_PREFIXES) or getattr(record, "gw_repeated", False)


def _address(text: str) -> str:
    """The first `host:port` in a record's text ('' when there is none)."""
    found = _ADDRESS.search(text)
    return found.group(0) if found else ""


def _masked(text: str) -> str:
    """The text with its numbers masked, addresses kept: 'after 0ms ..., 5 identical error(s)'
    and 'after 3ms ...' are the same kind, a failure at another broker is not."""
    text = _SUPPRESSED.sub("", text)
    parts: list[str] = []
    last = 0
    for found in _ADDRESS.finditer(text):
        parts.append(_NUMBER.sub("N", text[last : found.start()]))
        parts.append(found.group(0))
        last = found.end()
    parts.append(_NUMBER.sub("N", text[last:]))
    return "".join(parts)


def _librdkafka_text(record: logging.LogRecord) -> str:
    """confluent-kafka logs `'%s [%s] %s' % (facility, client name, message)`: the facility and
    the message (the client's name, e.g. `rdkafka#producer-3`, changes with every client)."""
    args = record.args
    if record.name == LIBRDKAFKA_LOGGER and isinstance(args, tuple) and len(args) == 3:
        return f"{args[0]} {args[2]}"
    return record.getMessage()


@dataclass
class _Kind:
    where: str  # the cluster (bootstrap servers) or broker address it is about; '' unknown
    since: float  # wall clock of the first record
    logged_at: float  # monotonic time of the last line logged for it
    last_seen: float  # monotonic time of its last record
    repeats: int = 0  # records since that line, not logged
    total_repeats: int = 0
    seen: int = 1


@dataclass
class _State:
    kinds: dict[tuple[str, str, str], _Kind] = field(default_factory=dict)
    # kafka-python IO thread ident -> the cluster of its client
    threads: dict[int, str] = field(default_factory=dict)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


class RepeatedFailures(logging.Filter):
    """A repeated client-library failure passes once per kind, then a summary at most every
    `summary_every` seconds, then one line when its cluster is reachable again. Thread-safe
    (records come from client threads)."""

    def __init__(
        self,
        summary_every: float = SUMMARY_EVERY_S,
        recovered_after: float = RECOVERED_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.summary_every = summary_every
        self.recovered_after = recovered_after
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._state = _State()

    # -- attribution -----------------------------------------------------------------------------

    def attribute_thread(self, thread: threading.Thread | None, cluster: str) -> None:
        """Records logged on `thread` (a kafka-python client's IO thread) are about `cluster`."""
        if thread is None or thread.ident is None:
            return
        with self._lock:
            threads = self._state.threads
            for ident in [i for i in threads if i not in _alive_idents()]:
                del threads[ident]  # threads of closed clients
            threads[thread.ident] = cluster

    def _where(self, record: logging.LogRecord, text: str) -> str:
        return _address(text) or self._state.threads.get(record.thread or 0, "")

    # -- the filter ------------------------------------------------------------------------------

    def filter(self, record: logging.LogRecord) -> bool:
        if not _is_client_record(record) or record.levelno < logging.INFO:
            return True
        text = _librdkafka_text(record)
        now = self.clock()
        with self._lock:
            where = self._where(record, text)
            key = (record.name, _masked(text), where)
            kind = self._state.kinds.get(key)
            if kind is None:
                self._state.kinds[key] = _Kind(where, self.wall(), now, now)
                return True
            kind.seen += 1
            kind.last_seen = now
            if now - kind.logged_at < self.summary_every:
                kind.repeats += 1
                kind.total_repeats += 1
                return False
            repeats, elapsed = kind.repeats, now - kind.logged_at
            kind.repeats, kind.logged_at = 0, now
        if repeats:
            message = record.getMessage()
            record.msg = f"{message} (and {repeats} more like it in the last {_duration(elapsed)})"
            record.args = None
        return True

    # -- recovery ---------------------------------------------------------------------------------

    @property
    def failing(self) -> bool:
        """Some kind of failure is being counted (`reachable` has something to end)."""
        return bool(self._state.kinds)

    def reachable(self, cluster: str, addresses: Iterable[str] = ()) -> None:
        """`cluster` (its bootstrap servers, as the kinds name it) answered; `addresses` are its
        brokers' `host:port`. Its kinds not seen for `recovered_after` end, with one line when
        some of them repeated."""
        if not self._state.kinds:  # the healthy path: nothing to look at
            return
        names = {cluster, "", *addresses, *cluster.split(",")}
        quiet_since = self.clock() - self.recovered_after
        with self._lock:
            ended = [
                key
                for key, kind in self._state.kinds.items()
                if kind.where in names and kind.last_seen <= quiet_since
            ]
            kinds = [self._state.kinds.pop(key) for key in ended]
        repeated = [kind for kind in kinds if kind.seen > 1]
        if not repeated:
            return
        since = datetime.fromtimestamp(min(kind.since for kind in repeated), UTC).strftime("%H:%M:%S")
        hidden = sum(kind.total_repeats for kind in repeated)
        log.info(
            "Kafka %s reachable again (recovered): %d kinds of client errors since %s UTC, "
            "%d repeats not logged",
            cluster,
            len(repeated),
            since,
            hidden,
        )

    def forget(self) -> None:
        """Tests: no kind, no thread."""
        with self._lock:
            self._state = _State()


def _alive_idents() -> set[int]:
    return {thread.ident for thread in threading.enumerate() if thread.ident is not None}


# The process's one filter: the operator installs it on its log handlers, the admin session tells
# it which cluster is reachable again and which IO thread is whose.
REPEATED_FAILURES = RepeatedFailures()


def install(verbose: bool = False, root: logging.Logger | None = None) -> None:
    """For `groupwarden run`, after the log handlers exist (kopf.configure): the filter on every
    handler of the root logger (a filter on a logger would not see its children's records), and
    the client libraries' loggers at WARNING unless `verbose` (kafka-python logs every connection
    and coordinator lookup at INFO, librdkafka every idle disconnect)."""
    root = root or logging.getLogger()
    for handler in root.handlers:
        if REPEATED_FAILURES not in handler.filters:
            handler.addFilter(REPEATED_FAILURES)
    if not verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)
        librdkafka_logger().setLevel(logging.WARNING)

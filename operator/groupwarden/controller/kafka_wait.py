"""A pass that waits out a Kafka failover says so: its requesters' status reads `Reconciling`
(reason `WaitingForKafka`) with what Kafka answered, instead of nothing until the pass ends.

The Kafka adapters retry retriable answers (a coordinator loading its groups after a node
restart, a fenced node, a moved leader) until `default.api.timeout.ms` (connectivity/retry.py) and
tell a `RetryObserver` before each pause. `WaitAnnouncer` is that observer for one pass: a wait
shorter than `ANNOUNCE_AFTER_S` stays silent (a coordinator that moved answers on the next try;
writing statuses for it would only load the API server), a longer one is announced, and again at
most every `ANNOUNCE_EVERY_S` with the newest answer. The pass's own result replaces it when the
pass ends; a wait ridden through leaves no Warning behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from groupwarden.connectivity.retry import RetryNotice
from groupwarden.controller.registry import PolicyEntry

ANNOUNCE_AFTER_S: Final = 1.0
ANNOUNCE_EVERY_S: Final = 10.0


def waiting_message(notice: RetryNotice) -> str:
    return f"waiting for Kafka (a broker failing over?): {notice.describe()}"


class WaitAnnouncer:
    """Retry notices of one pass -> `announce(entry, message)` for each of its requesters. Called
    from the Kafka client's threads (hence the lock); `announce` must not block for long."""

    def __init__(
        self,
        announce: Callable[[PolicyEntry, str], None],
        entries: Sequence[PolicyEntry],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._announce = announce
        self._entries = list(entries)
        self._clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def __call__(self, notice: RetryNotice) -> None:
        if notice.waited_s < ANNOUNCE_AFTER_S:
            return
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < ANNOUNCE_EVERY_S:
                return
            self._last = now
        message = waiting_message(notice)
        for entry in self._entries:
            self._announce(entry, message)

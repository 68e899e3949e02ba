"""One retry policy for every Kafka request path: retriable errors are retried with backoff until
the settings' API timeout (`default.api.timeout.ms`, the knob Kafka's own clients use), as the Java
admin client does while a broker fails over.

Pure: the adapters ask it what to do; it holds no client and sleeps nowhere.

- `RETRIABLE_ERRORS`: the broker answers that mean "ask again, maybe elsewhere": the group's
  coordinator moved or is loading its `__consumer_offsets` partitions after a restart
  (COORDINATOR_LOAD_IN_PROGRESS takes seconds to minutes with 100k groups), or a partition's leader
  changed. The adapters add their client's transport failures (a refused or reset connection to
  a node that metadata still lists, a request timeout).
- `RetryDeadline`: one per call; exponential backoff (100 ms doubling to 1 s, +-20 % jitter:
  `retry.backoff.ms` / `retry.backoff.max.ms` of the Java clients) until the deadline.
- `RetryNotice` / `RetryObserver`: what a caller is told before each pause (which request, its
  last error, how long it has waited and may still wait), so the operator can say `Reconciling`
  while a failover lasts instead of saying nothing until the pass ends.
- A stopping process (`stopping.py`, the operator's SIGTERM) gets no further try: every retried
  request ends with its last error at once.
- `DONE_BY_EARLIER_ATTEMPT`: a re-sent deletion that the broker answers "nothing to delete"
  (GROUP_ID_NOT_FOUND) after an earlier attempt that may have executed: done, not failed. A
  deletion whose answer was lost is never re-sent: its outcome stays unknown.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from groupwarden.connectivity.stopping import stopping

RETRIABLE_ERRORS: Final = frozenset(
    {
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_LEADER_FOR_PARTITION",  # the same code (6) under its older name (kafka-python)
        "LEADER_NOT_AVAILABLE",
        "OFFSET_NOT_AVAILABLE",  # a new leader's high watermark has not caught up yet (KIP-207)
        "REQUEST_TIMED_OUT",
    }
)

# The `KafkaError.name` of a deletion that an earlier attempt of the same call executed: the
# broker answered a re-send "nothing to delete". Classified as deleted.
DONE_BY_EARLIER_ATTEMPT: Final = "DONE_BY_EARLIER_ATTEMPT"
# The `KafkaError.name` of a re-send that the run guard stopped (the Lease was lost, the policy
# deleted): the item is reported with its last answer in the message.
NOT_RESENT: Final = "NOT_RESENT"

INITIAL_BACKOFF_S: Final = 0.1
MAX_BACKOFF_S: Final = 1.0
JITTER: Final = 0.2


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often: `timeout_s` bounds every call, from its first try."""

    timeout_s: float
    initial_backoff_s: float = INITIAL_BACKOFF_S
    max_backoff_s: float = MAX_BACKOFF_S
    jitter: float = JITTER

    def __post_init__(self) -> None:
        if self.timeout_s < 0 or self.initial_backoff_s <= 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ValueError(f"invalid retry policy {self}")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    @classmethod
    def from_api_timeout_ms(cls, api_timeout_ms: int) -> RetryPolicy:
        return cls(timeout_s=api_timeout_ms / 1000)

    def start(self, now: float, rng: Callable[[], float] = random.random) -> RetryDeadline:
        """The deadline of one call that starts `now` (a monotonic clock reading)."""
        return RetryDeadline(self, now + self.timeout_s, rng)


@dataclass
class RetryDeadline:
    policy: RetryPolicy
    deadline: float
    rng: Callable[[], float] = field(default=random.random, repr=False)
    retries: int = 0

    def remaining(self, now: float) -> float:
        return max(0.0, self.deadline - now)

    def waited(self, now: float) -> float:
        """Seconds since the call's first try."""
        return max(0.0, now - (self.deadline - self.policy.timeout_s))

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def next_delay(self, now: float) -> float | None:
        """The pause before the next try, or None when the deadline has passed (give up: the
        caller reports the last error; also at once when the process is stopping). The pause never
        runs past the deadline, so a last try happens at it."""
        remaining = self.deadline - now
        if remaining <= 0 or stopping():
            return None
        policy = self.policy
        # The exponent is capped: past it the backoff is max_backoff_s anyway, and 2.0**n overflows
        # a float after ~1,000 tries (a caller retrying without pausing).
        backoff = min(policy.max_backoff_s, policy.initial_backoff_s * 2.0 ** min(self.retries, 64))
        backoff *= 1 + policy.jitter * (2 * self.rng() - 1)
        self.retries += 1
        return min(backoff, remaining)


@dataclass(frozen=True)
class RetryNotice:
    """A retried request is about to pause: `what` was asked (e.g. "ListGroups on broker 2"), the
    last answer was `error` (a Kafka error name, or the client's transport failure); the call has
    waited `waited_s` and gives up after `remaining_s` more."""

    what: str
    error: str
    waited_s: float
    remaining_s: float

    def describe(self) -> str:
        return (
            f"{self.what}: {self.error or 'no answer'} (retried for {self.waited_s:.0f}s, "
            f"giving up in {self.remaining_s:.0f}s: default.api.timeout.ms)"
        )


# Told before each pause of a retried request. Called from the client's threads: it must be cheap,
# thread-safe and must not raise (callers log and drop what it raises).
RetryObserver = Callable[[RetryNotice], None]


def is_retriable_name(name: str) -> bool:
    """A broker error worth another try (see RETRIABLE_ERRORS)."""
    return name in RETRIABLE_ERRORS

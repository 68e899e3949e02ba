"""What one run of one policy came to: the value status, events and metrics are made from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from groupwarden.cleanup.steps import AbortReason
from groupwarden.core.plan import ActionOutcome, OutcomeSummary, Plan, summarize_outcomes
from groupwarden.core.policy import PolicyRef
from groupwarden.core.status import Reason

# Runs that could not look at Kafka; retried with backoff (a person may have to fix something,
# but the fix -- a Secret, an ACL, the broker coming back -- is not a spec change we would see).
RETRIED_REASONS = frozenset(
    {
        Reason.KAFKA_UNAVAILABLE,
        Reason.AUTHORIZATION_FAILED,
        Reason.AUTHENTICATION_FAILED,
        Reason.TLS_HANDSHAKE_FAILED,
        Reason.SECRET_NOT_FOUND,
        Reason.AUDIT_UNAVAILABLE,
        Reason.INTERNAL_ERROR,
    }
)
# Runs that looked at Kafka and finished: the next one is due after spec.interval.
COMPLETED_REASONS = frozenset(
    # Forbidden is re-checked every interval: new groups can make a selector reach foreign ones.
    {Reason.SUCCEEDED, Reason.DRY_RUN, Reason.PARTIAL_FAILURE, Reason.BLAST_RADIUS_EXCEEDED, Reason.FORBIDDEN}
)


@dataclass(frozen=True)
class ClockKeeping:
    """Whether the first-observed clocks a run decided with are kept beyond the process."""

    persisted: bool
    message: str


@dataclass(frozen=True)
class RunReport:
    ref: PolicyRef
    uid: str
    generation: int
    reason: Reason
    message: str
    started_at: datetime
    finished_at: datetime
    plan: Plan | None = None
    outcomes: tuple[ActionOutcome, ...] = ()
    # offsetsLog / observed, when Kafka was read.
    timestamp_source: str | None = None
    # Why the run stopped early (policy deleted, spec changed, leadership lost), if it did.
    aborted: AbortReason | None = None
    # Runs that decided with first-observed times, on an operator with an observation store:
    # whether those clocks are stored (None: not such a run, the condition is left as it was).
    clocks: ClockKeeping | None = None

    @property
    def duration_seconds(self) -> float:
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    @property
    def done(self) -> OutcomeSummary:
        return summarize_outcomes(self.outcomes)

    @property
    def retried(self) -> bool:
        return self.reason in RETRIED_REASONS

    @property
    def completed(self) -> bool:
        return self.reason in COMPLETED_REASONS and self.aborted is None

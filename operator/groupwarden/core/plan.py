"""What the engine decided (a `Plan`) and what executing it did (`ActionOutcome`): immutable values.

A plan is produced by `engine.decide` and never mutated; executing it is a separate step that
returns one `ActionOutcome` per action. Rendering lives in `render.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from groupwarden.core.kafka_error import KafkaError
from groupwarden.core.policy import Mode, PolicyRef, RuleName
from groupwarden.core.snapshot import GroupKind, TimestampSource, TopicPartition


class ActionKind(StrEnum):
    DELETE_GROUP = "DeleteGroup"  # DeleteGroups (API 42): the group and all its offsets
    DELETE_OFFSETS = "DeleteOffsets"  # OffsetDelete (API 47, KIP-496): some partitions of a group


class SkipReason(StrEnum):
    """Why a selected group (or part of it) was not acted on. Stable codes: tooling matches on them."""

    DESCRIBE_FAILED = "DescribeFailed"  # the snapshot has an error for this group
    UNSUPPORTED_GROUP_TYPE = "UnsupportedGroupType"  # unknown kinds, share/streams not named: untouched
    REBALANCING = "Rebalancing"  # PreparingRebalance, CompletingRebalance, Assigning, Reconciling
    DEAD = "Dead"
    UNKNOWN_STATE = "UnknownState"
    UNEXPECTED_STATE = "UnexpectedState"  # facts contradict each other (e.g. Empty with members)
    NON_CONSUMER_PROTOCOL = "NonConsumerProtocol"  # classic connect/... group while active: opaque
    # A Stable share group's state of unsubscribed topics: DeleteShareGroupOffsets needs an Empty group
    BROKER_REQUIRES_EMPTY = "BrokerRequiresEmpty"
    SUBSCRIPTIONS_UNKNOWN = "SubscriptionsUnknown"  # an offset rule needs them and they are unknown
    NO_TIMESTAMP = "NoTimestamp"  # no base time is known: eligibility cannot be established
    LIMIT_REACHED = "LimitReached"  # eligible, deferred to a later run by spec.limits
    BLAST_RADIUS_EXCEEDED = "BlastRadiusExceeded"  # eligible, but the breaker tripped: nothing runs
    OVERLAP_BLOCKED = "OverlapBlocked"  # eligible, but another policy selecting the group does not allow it


@dataclass(frozen=True, slots=True)
class Action:
    """One deletion the plan wants. `eligible_since` is the base time the rule's clock started at
    (the Empty-since time or the last commit); `age` is `generated_at - eligible_since`."""

    kind: ActionKind
    group_id: str
    group_kind: GroupKind
    rule: RuleName
    retention: timedelta
    reason: str
    eligible_since: datetime
    timestamp_source: TimestampSource
    age: timedelta
    # DeleteOffsets: the partitions to delete (sorted). DeleteGroup: empty.
    partitions: tuple[TopicPartition, ...] = ()
    # DeleteGroup of a streams group: its internal topics (repartition/changelog), left to their
    # owner (groupwarden never deletes topics). Empty otherwise.
    internal_topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Skip:
    """A selected group, or some of its partitions, deliberately not acted on."""

    group_id: str
    reason_code: SkipReason
    detail: str
    group_kind: GroupKind | None = None
    # The partitions concerned, when only part of a group is skipped (limits, overlap).
    partitions: tuple[TopicPartition, ...] = ()
    # DescribeFailed: the error `detail` renders, when it came from Kafka (what decisions read).
    kafka_error: KafkaError | None = None


@dataclass(frozen=True)
class PlanSummary:
    groups_total: int  # groups in the snapshot
    groups_matched: int  # groups the selector matched (supported kinds only)
    groups_eligible: int  # DeleteGroup candidates, before limits and the breaker
    offsets_eligible: int  # DeleteOffsets candidate partitions, before limits and the breaker
    groups_planned: int
    offsets_planned: int
    skipped: int
    blast_radius_exceeded: bool = False


@dataclass(frozen=True)
class Plan:
    policy: PolicyRef
    generated_at: datetime
    mode: Mode
    actions: tuple[Action, ...]
    skipped: tuple[Skip, ...]
    summary: PlanSummary
    # Valid-but-suspicious policy settings and snapshot-wide problems (e.g. offsets log unreadable).
    warnings: tuple[str, ...] = ()
    # Other policies that select at least one of the same groups (set by `decide_many`).
    overlapping_policies: tuple[PolicyRef, ...] = ()
    cluster_id: str = ""
    suspended: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.actions


class ResultKind(StrEnum):
    DELETED = "Deleted"
    # NON_EMPTY_GROUP / GROUP_SUBSCRIBED_TO_TOPIC: a consumer came back between plan and apply.
    SKIPPED_BECAME_ACTIVE = "SkippedBecameActive"
    NOT_FOUND = "NotFound"  # GROUP_ID_NOT_FOUND / already gone: nothing to do
    FAILED = "Failed"
    # The request was sent and the connection was lost (or it timed out) before the answer: the
    # broker may have executed it. The audit trail says so; restore counts it as possibly deleted;
    # the next run reads the cluster again (what was deleted is no longer listed).
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    partition: TopicPartition
    result: ResultKind
    error: str | None = None
    kafka_error: KafkaError | None = None  # the broker's answer `error` renders, if any


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    action: Action
    result: ResultKind
    # What users see (status, events, plan JSON, audit records): the broker's error rendered, or
    # our own words (a re-check dropped the action, a step was interrupted).
    error: str | None = None
    retriable: bool = False
    # DeleteOffsets: per-partition results (OffsetDelete answers per partition).
    partitions: tuple[PartitionOutcome, ...] = ()
    # The broker's (or client's) error `error` renders, when there is one: decisions read this
    # (`KafkaError.name`, `is_authorization`), never the text.
    kafka_error: KafkaError | None = None

    @classmethod
    def from_partitions(
        cls, action: Action, partitions: tuple[PartitionOutcome, ...], retriable: bool = False
    ) -> ActionOutcome:
        """Aggregate per-partition results: Failed if any failed, else Deleted if any was deleted,
        else SkippedBecameActive if any was, else NotFound. The first error is kept."""
        results = {p.result for p in partitions}
        for candidate in (
            ResultKind.UNKNOWN,  # possibly deleted: must not hide behind another result
            ResultKind.FAILED,
            ResultKind.DELETED,
            ResultKind.SKIPPED_BECAME_ACTIVE,
            ResultKind.NOT_FOUND,
        ):
            if candidate in results:
                result = candidate
                break
        else:
            result = ResultKind.NOT_FOUND
        first = next((p for p in partitions if p.error), None)
        error, kafka_error = (first.error, first.kafka_error) if first else (None, None)
        retry = retriable and result in (ResultKind.FAILED, ResultKind.UNKNOWN)
        return cls(action, result, error, retry, partitions, kafka_error)

    @property
    def groups_deleted(self) -> int:
        is_group = self.action.kind is ActionKind.DELETE_GROUP
        return 1 if is_group and self.result is ResultKind.DELETED else 0

    @property
    def offsets_deleted(self) -> int:
        if self.action.kind is not ActionKind.DELETE_OFFSETS:
            return 0
        if self.partitions:
            return sum(1 for p in self.partitions if p.result is ResultKind.DELETED)
        return len(self.action.partitions) if self.result is ResultKind.DELETED else 0


@dataclass(frozen=True)
class OutcomeSummary:
    groups_deleted: int = 0
    offsets_deleted: int = 0
    skipped_became_active: int = 0
    not_found: int = 0
    failed: int = 0
    retriable_failures: int = 0
    unknown: int = 0  # sent, unanswered: possibly deleted

    @property
    def has_failures(self) -> bool:
        return self.failed > 0 or self.unknown > 0


def summarize_outcomes(outcomes: Sequence[ActionOutcome]) -> OutcomeSummary:
    counts = {kind: sum(1 for o in outcomes if o.result is kind) for kind in ResultKind}
    return OutcomeSummary(
        groups_deleted=sum(o.groups_deleted for o in outcomes),
        offsets_deleted=sum(o.offsets_deleted for o in outcomes),
        skipped_became_active=counts[ResultKind.SKIPPED_BECAME_ACTIVE],
        not_found=counts[ResultKind.NOT_FOUND],
        failed=counts[ResultKind.FAILED],
        retriable_failures=sum(1 for o in outcomes if o.result is ResultKind.FAILED and o.retriable),
        unknown=counts[ResultKind.UNKNOWN],
    )

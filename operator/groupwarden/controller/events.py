"""RunReport -> Kubernetes Events on the policy. Pure: the caller posts them (adapters).

- Normal GroupDeleted: one per deleted group. Normal OffsetsDeleted: one per group, its
  partitions aggregated (`orders[0,1] payments[3]`).
- Normal Planned: the DryRun summary, only when the plan changed (a DryRun policy every 10 minutes
  must not bury the namespace's events under identical ones).
- Warning ActionSkipped: the broker refused because a consumer came back, or the re-check before
  the request saw a commit or a member since the plan (nothing lost).
- Warning KafkaUnavailable / AuthorizationFailed / AuthenticationFailed / TLSHandshakeFailed /
  InvalidSpec / SecretNotFound /
  BlastRadiusExceeded / Forbidden / RetentionBelowMinimum / AuditUnavailable / InternalError: on
  entering the state (or when its message changes), not on every retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from groupwarden.controller.report import RunReport
from groupwarden.controller.status_builder import planned_actions
from groupwarden.core.plan import ActionKind, ActionOutcome, Plan, ResultKind
from groupwarden.core.policy import Mode
from groupwarden.core.render import compact_partitions
from groupwarden.core.snapshot import GroupKind
from groupwarden.core.status import ClocksReason, ConditionType, PlannedAction, PolicyStatus, Reason
from groupwarden.core.wording import counted, groups_and_offsets

NORMAL, WARNING = "Normal", "Warning"
MESSAGE_LIMIT = 1024

# Run-level reasons announced with a Warning event when entered.
_WARNED = {
    Reason.KAFKA_UNAVAILABLE,
    Reason.AUTHORIZATION_FAILED,
    Reason.AUTHENTICATION_FAILED,
    Reason.TLS_HANDSHAKE_FAILED,
    Reason.INVALID_SPEC,
    Reason.SECRET_NOT_FOUND,
    Reason.BLAST_RADIUS_EXCEEDED,
    Reason.FORBIDDEN,
    Reason.RETENTION_BELOW_MINIMUM,
    Reason.AUDIT_UNAVAILABLE,
    Reason.INTERNAL_ERROR,
}
# For these the message matters (which key is missing, which field is bad); for KafkaUnavailable
# it varies from retry to retry and would defeat the de-duplication.
_MESSAGE_SENSITIVE = {
    Reason.INVALID_SPEC,
    Reason.SECRET_NOT_FOUND,
    Reason.FORBIDDEN,
    Reason.RETENTION_BELOW_MINIMUM,
}


@dataclass(frozen=True)
class EventSpec:
    type: str  # Normal / Warning
    reason: str
    message: str


@dataclass
class LastAnnounced:
    """What was last announced for one policy (kept by its worker)."""

    warned: tuple[str, str] | None = None  # (reason, message) of the last run-level Warning
    planned: tuple[object, ...] | None = None  # signature of the last Planned event
    clocks_persisted: bool | None = None  # the ClocksPersisted status last announced

    @classmethod
    def from_status(cls, status: PolicyStatus) -> LastAnnounced:
        """Seeded from the status a previous process wrote, so a restart repeats nothing."""
        memory = cls()
        ready = next((c for c in status.conditions if c.type == ConditionType.READY.value), None)
        if ready is not None and ready.reason in {r.value for r in _WARNED}:
            sensitive = ready.reason in {r.value for r in _MESSAGE_SENSITIVE}
            memory.warned = (ready.reason, ready.message if sensitive else "")
        if status.last_run is not None and status.last_run.mode == Mode.DRY_RUN.value:
            memory.planned = _signature(status.plan, status.eligible)
        clocks = next((c for c in status.conditions if c.type == ConditionType.CLOCKS_PERSISTED.value), None)
        if clocks is not None:
            memory.clocks_persisted = clocks.status == "True"
        return memory


def _signature(planned: list[PlannedAction], eligible: str) -> tuple[object, ...]:
    actions = tuple((a.action, a.group, tuple((p.topic, p.partition) for p in a.partitions)) for a in planned)
    return (actions, eligible)


def plan_signature(plan: Plan) -> tuple[object, ...]:
    """What a Planned event is about: the status' plan (first actions) and the eligible counts."""
    summary = plan.summary
    return _signature(planned_actions(plan.actions), f"{summary.groups_eligible}/{summary.offsets_eligible}")


def outcome_events(outcomes: Sequence[ActionOutcome]) -> list[EventSpec]:
    """Per-item events of one deletion step (posted right after the step)."""
    found = [event for event in map(_outcome_event, outcomes) if event is not None]
    return [_bounded(e) for e in found]


def _bounded(event: EventSpec) -> EventSpec:
    return EventSpec(event.type, event.reason, event.message[:MESSAGE_LIMIT])


def events_for(report: RunReport, memory: LastAnnounced) -> list[EventSpec]:
    """The run-level events to post for `report` (outcome events are posted per step); updates
    `memory`."""
    events: list[EventSpec] = []
    if report.reason in _WARNED:
        key = (report.reason.value, report.message if report.reason in _MESSAGE_SENSITIVE else "")
        if memory.warned != key:
            events.append(EventSpec(WARNING, report.reason.value, report.message))
        memory.warned = key
    elif report.reason is not Reason.RECONCILING:
        memory.warned = None  # recovered: the next failure is news again
    plan = report.plan
    if plan is not None and plan.mode is Mode.DRY_RUN and report.reason is not Reason.BLAST_RADIUS_EXCEEDED:
        signature = plan_signature(plan)
        if signature != memory.planned:
            events.append(EventSpec(NORMAL, "Planned", _planned_message(plan)))
        memory.planned = signature
    elif plan is not None:
        memory.planned = None
    clocks = report.clocks
    if clocks is not None and clocks.persisted != memory.clocks_persisted:
        # One event per change: the first loss, and the recovery after one (not a first success).
        if not clocks.persisted:
            events.append(EventSpec(WARNING, ClocksReason.STORE_UNAVAILABLE.value, clocks.message))
        elif memory.clocks_persisted is False:
            events.append(EventSpec(NORMAL, ClocksReason.STORED.value, clocks.message))
        memory.clocks_persisted = clocks.persisted
    return [_bounded(e) for e in events]


_GROUP_NOUNS = {GroupKind.SHARE: "share group", GroupKind.STREAMS: "streams group"}


def _skip_cause(outcome: ActionOutcome, refused: str) -> str:
    """The broker's refusal (its answer is the outcome's `kafka_error`), or the re-check's
    (cleanup/recheck.py, "changed since the plan") before any request: no Kafka answer."""
    if outcome.kafka_error is None:
        return "re-checked before the request"  # the outcome's error says what changed
    return refused


# Kafka deletes a share group's state (start offsets) in a write before the group's own, each
# checking that the group is Empty: a member that joins between the two keeps the group, and the
# broker answers NON_EMPTY_GROUP after the state is gone (docs/kafka-gateway.md).
SHARE_STATE_MAY_BE_GONE = (
    "its start offsets may be gone: Kafka deletes a share group's state before the group itself, "
    "and a member joined in between (its consumers start over from share.auto.offset.reset)"
)


def _what_is_lost(outcome: ActionOutcome) -> str:
    """A refused DeleteGroups loses nothing, except a share group's state (see above)."""
    if outcome.action.group_kind is GroupKind.SHARE and outcome.kafka_error is not None:
        return SHARE_STATE_MAY_BE_GONE
    return "nothing lost"


def _outcome_event(outcome: ActionOutcome) -> EventSpec | None:
    action = outcome.action
    why = f"{action.rule.value} {action.reason}"
    if action.kind is ActionKind.DELETE_GROUP:
        if outcome.result is ResultKind.DELETED:
            noun = _GROUP_NOUNS.get(action.group_kind, "consumer group")
            return EventSpec(NORMAL, "GroupDeleted", f"Deleted {noun} {action.group_id}: {why}")
        if outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE:
            return EventSpec(
                WARNING,
                "ActionSkipped",
                f"Did not delete group {action.group_id}: "
                f"{_skip_cause(outcome, 'a consumer came back')} ({outcome.error}); {_what_is_lost(outcome)}",
            )
    else:
        deleted = [p.partition for p in outcome.partitions if p.result is ResultKind.DELETED]
        if not outcome.partitions and outcome.result is ResultKind.DELETED:
            deleted = list(action.partitions)
        if deleted:
            return EventSpec(
                NORMAL,
                "OffsetsDeleted",
                f"Deleted committed offsets of group {action.group_id} "
                f"({counted(len(deleted), 'partition')}: {compact_partitions(deleted, 300)}): {why}",
            )
        if outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE:
            return EventSpec(
                WARNING,
                "ActionSkipped",
                f"Did not delete offsets of group {action.group_id}: "
                f"{_skip_cause(outcome, 'the group subscribed again')} ({outcome.error}); nothing lost",
            )
    if outcome.result is ResultKind.UNKNOWN:
        return EventSpec(
            WARNING,
            "OutcomeUnknown",
            f"{action.kind.value} of group {action.group_id} was sent but not answered ({outcome.error}): "
            "the broker may have executed it; the audit trail records it as possibly deleted and "
            "the next run reads the cluster again",
        )
    if outcome.result is ResultKind.FAILED:
        denied = outcome.kafka_error is not None and outcome.kafka_error.is_authorization
        message = f"{action.kind.value} of group {action.group_id} failed: {outcome.error}"
        return EventSpec(WARNING, "AuthorizationFailed" if denied else "ActionFailed", message)
    return None


def _planned_message(plan: Plan) -> str:
    summary = plan.summary
    groups = [a.group_id for a in plan.actions if a.kind is ActionKind.DELETE_GROUP]
    offsets = [a.group_id for a in plan.actions if a.kind is ActionKind.DELETE_OFFSETS]
    skipped = f", {summary.skipped} skipped" if summary.skipped else ""
    parts = [
        f"DryRun: would delete {groups_and_offsets(summary.groups_planned, summary.offsets_planned)} "
        f"({counted(summary.groups_matched, 'group')} matched{skipped})"
    ]
    if groups:
        parts.append("groups: " + ", ".join(groups[:10]) + (" ..." if len(groups) > 10 else ""))
    if offsets:
        parts.append("offsets of: " + ", ".join(offsets[:10]) + (" ..." if len(offsets) > 10 else ""))
    return "; ".join(parts)

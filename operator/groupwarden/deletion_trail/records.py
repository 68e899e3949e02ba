"""The audit record format: building records and reading trails back, no I/O.

Two record types share one trail, linked by `planId` (one per run) and `actionId` (one per action):

- `intent`: written BEFORE the destructive call. Holds everything needed to put the offsets back:
  cluster id, bootstrap servers, group, group kind, protocol type, state and, per partition, the
  committed offset, leader epoch, metadata and commit time (with its source), plus the policy,
  mode, rule, reason and action.
- `outcome`: written after the call: the result (Deleted / SkippedBecameActive / NotFound / Failed),
  the error, and per-partition results for DeleteOffsets.

Records are written signed (`auditVersion 2`, deletion_trail/signing.py) or, where the operator was
explicitly allowed to, unsigned (`auditVersion 1`). `read_trail` verifies every line and keeps
apart what it cannot trust, with the line's position and the reason.

Records never hold credentials: only bootstrap addresses, ids and broker error names. Every record
carries `group` and `clusterId`, so a Kafka topic sink can key records by group.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from groupwarden.core.plan import Action, ActionKind, ActionOutcome, Plan
from groupwarden.core.snapshot import CommittedOffset, GroupFacts, TopicPartition
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.deletion_trail.signing import (
    SIGNED_AUDIT_VERSION,
    UNSIGNED_AUDIT_VERSION,
    TrustedKeys,
    open_envelope,
)

AUDIT_VERSION = SIGNED_AUDIT_VERSION  # what the builders below write; an unsigned sink says 1
INTENT = "intent"
OUTCOME = "outcome"


class AuditFormatError(ValueError):
    """A trail cannot be read at all (the message names the trail)."""


def _identity(text: str) -> str:
    return text


def _partition_facts(offset: CommittedOffset | None, tp: TopicPartition) -> dict[str, Any]:
    if offset is None:  # the snapshot did not know this partition's offset: nothing to restore
        return {"topic": tp.topic, "partition": tp.partition, "offset": None}
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "offset": offset.offset,
        "leaderEpoch": offset.leader_epoch,
        "metadata": offset.metadata,
        "committedAt": to_rfc3339(offset.committed_at.at) if offset.committed_at else None,
        "committedAtSource": offset.committed_at.source.value if offset.committed_at else None,
    }


def intent_record(
    *,
    plan: Plan,
    action: Action,
    facts: GroupFacts | None,
    plan_id: str,
    action_id: str,
    bootstrap_servers: Iterable[str],
    at: datetime,
    redact: Callable[[str], str] = _identity,
) -> dict[str, Any]:
    """What is about to go. DeleteGroup: every committed offset of the group; DeleteOffsets: the
    action's partitions. `facts` is the snapshot's view of the group (None when unknown)."""
    known = {o.partition: o for o in facts.offsets} if facts else {}
    partitions = sorted(known) if action.kind is ActionKind.DELETE_GROUP else list(action.partitions)
    return {
        "auditVersion": AUDIT_VERSION,
        "type": INTENT,
        "timestamp": to_rfc3339(at),
        "planId": plan_id,
        "actionId": action_id,
        "clusterId": plan.cluster_id,
        "bootstrapServers": list(bootstrap_servers),
        "policy": {"namespace": plan.policy.namespace, "name": plan.policy.name},
        "mode": plan.mode.value,
        "action": action.kind.value,
        "rule": action.rule.value,
        "reason": redact(action.reason),
        "group": action.group_id,
        "groupKind": (facts.kind if facts else action.group_kind).value,
        "protocolType": facts.protocol_type if facts else None,
        "groupState": facts.state.value if facts else None,
        "partitions": [_partition_facts(known.get(tp), tp) for tp in partitions],
    }


def outcome_record(
    *,
    plan: Plan,
    outcome: ActionOutcome,
    plan_id: str,
    action_id: str,
    at: datetime,
    redact: Callable[[str], str] = _identity,
) -> dict[str, Any]:
    return {
        "auditVersion": AUDIT_VERSION,
        "type": OUTCOME,
        "timestamp": to_rfc3339(at),
        "planId": plan_id,
        "actionId": action_id,
        "clusterId": plan.cluster_id,
        "policy": {"namespace": plan.policy.namespace, "name": plan.policy.name},
        "action": outcome.action.kind.value,
        "group": outcome.action.group_id,
        "result": outcome.result.value,
        "error": redact(outcome.error) if outcome.error else None,
        "partitions": [
            {
                "topic": p.partition.topic,
                "partition": p.partition.partition,
                "result": p.result.value,
                "error": redact(p.error) if p.error else None,
            }
            for p in outcome.partitions
        ],
    }


@dataclass(frozen=True)
class TrailRecord:
    """A record `read_trail` trusts: where it stands and who signed it (None: unsigned, trusted
    because the reader was told to)."""

    position: str  # "FILE:LINE" or "TOPIC/PARTITION@OFFSET"
    record: Mapping[str, Any]
    key_id: str | None


@dataclass(frozen=True)
class RefusedRecord:
    """A line `restore` never counts, with why. `group` is what the line claims (unverified)."""

    position: str
    reason: str
    group: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "reason": self.reason, "claimedGroup": self.group}


@dataclass(frozen=True)
class TrailReading:
    records: tuple[TrailRecord, ...]
    refused: tuple[RefusedRecord, ...]


def _claimed_group(line: str) -> str | None:
    """The group a line names, for the report only (never trusted)."""
    try:
        outer = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(outer, dict):
        return None
    inner = outer.get("record")
    group = (inner if isinstance(inner, dict) else outer).get("group")
    return group if isinstance(group, str) else None


def read_trail(
    lines: Iterable[tuple[str, str]],
    trusted: TrustedKeys,
    *,
    trust_unsigned: bool = False,
    forgive_torn_tail: bool = False,
) -> TrailReading:
    """Verifies every (position, line) of a trail. A line is trusted when it is an intent or an
    outcome signed by a trusted key, or unsigned (`auditVersion 1`) with `trust_unsigned`; every
    other line is refused with its reason. Blank lines are skipped; with `forgive_torn_tail` (a
    file: a crash mid-write) a last line that is not JSON is ignored."""
    kept: list[TrailRecord] = []
    refused: list[RefusedRecord] = []
    torn: RefusedRecord | None = None
    for position, line in lines:
        text = line.strip()
        if not text:
            continue
        if torn is not None:
            refused.append(torn)
            torn = None
        opened = open_envelope(text, trusted)
        if opened.record is None:
            problem = opened.problem or "unreadable"
            entry = RefusedRecord(position, problem, _claimed_group(text))
            if forgive_torn_tail and problem == "not a JSON object":
                torn = entry  # forgiven only if no line follows
            else:
                refused.append(entry)
            continue
        record = opened.record
        if record.get("type") not in (INTENT, OUTCOME):
            refused.append(
                RefusedRecord(position, f"unknown record type {record.get('type')!r}", _claimed_group(text))
            )
        elif (
            opened.key_id is None
            and record.get("auditVersion") == UNSIGNED_AUDIT_VERSION
            and not trust_unsigned
        ):
            refused.append(
                RefusedRecord(
                    position,
                    "unsigned (auditVersion 1): trusted only with --trust-unsigned",
                    _claimed_group(text),
                )
            )
        else:
            kept.append(TrailRecord(position, record, opened.key_id))
    return TrailReading(tuple(kept), tuple(refused))


def numbered_lines(lines: Iterable[str], source: str) -> Iterator[tuple[str, str]]:
    """A file's lines with their positions (`FILE:LINE`)."""
    for number, line in enumerate(lines, start=1):
        yield f"{source}:{number}", line


@dataclass(frozen=True)
class RecordedOffset:
    """One partition as an intent recorded it."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecordedOffset | None:
        if data.get("offset") is None:
            return None
        epoch = data.get("leaderEpoch")
        return cls(
            str(data["topic"]),
            int(data["partition"]),
            int(data["offset"]),
            None if epoch is None or int(epoch) < 0 else int(epoch),
            str(data.get("metadata") or ""),
        )

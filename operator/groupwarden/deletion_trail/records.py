"""The audit record format (JSON objects, `auditVersion: 1`): building and parsing, no I/O.

Two record types share one trail, linked by `planId` (one per run) and `actionId` (one per action):

- `intent`: written BEFORE the destructive call. Holds everything needed to put the offsets back:
  cluster id, bootstrap servers, group, group kind, protocol type, state and, per partition, the
  committed offset, leader epoch, metadata and commit time (with its source), plus the policy,
  mode, rule, reason and action.
- `outcome`: written after the call: the result (Deleted / SkippedBecameActive / NotFound / Failed),
  the error, and per-partition results for DeleteOffsets.

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

AUDIT_VERSION = 1
INTENT = "intent"
OUTCOME = "outcome"


class AuditFormatError(ValueError):
    """A trail line is not a valid audit record (the message names the line)."""


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


def parse_records(lines: Iterable[str], source: str = "audit trail") -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines trail. Blank lines are skipped; a torn last line (a crash mid-write)
    is ignored; any other invalid line raises AuditFormatError naming it."""
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        if pending is not None:
            raise AuditFormatError(f"{source}:{pending[0]}: not a JSON object: {pending[1][:80]!r}")
        text = line.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            pending = (number, text)  # only forgiven if it is the last line
            continue
        if not isinstance(record, dict):
            raise AuditFormatError(f"{source}:{number}: not a JSON object")
        version = record.get("auditVersion")
        if version != AUDIT_VERSION:
            raise AuditFormatError(f"{source}:{number}: unsupported auditVersion {version!r}")
        if record.get("type") not in (INTENT, OUTCOME):
            raise AuditFormatError(f"{source}:{number}: unknown record type {record.get('type')!r}")
        yield record


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

"""Restore planning from an audit trail: pure functions, no I/O.

1. `deleted_offsets(records, groups, since)`: the offsets the trail says were deleted (intents whose
   outcome was Deleted; per partition for DeleteOffsets), latest deletion per partition wins.
   An intent without an outcome (the run died between the call and the outcome record), or with
   an `Unknown` one (the request was sent, the answer lost), counts as possibly deleted:
   restoring it is safe because of rule 2.
2. `decide(candidates, current)`: per partition, restore / skip. A group with active members is
   never touched; an offset committed since the deletion is never overwritten unless `force`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from groupwarden.core.snapshot import TopicPartition
from groupwarden.deletion_trail.records import INTENT, OUTCOME, AuditFormatError, RecordedOffset

DELETED = "Deleted"
UNKNOWN = "Unknown"  # the request was sent, the answer lost: possibly deleted
_POSSIBLY_DELETED = frozenset({DELETED, UNKNOWN})


class RestoreStatus(StrEnum):
    RESTORED = "restored"
    WOULD_RESTORE = "would-restore"  # without --yes
    UNCHANGED = "unchanged"  # the recorded offset is already committed
    SKIPPED_NEWER_COMMIT = "skipped-newer-commit"
    SKIPPED_ACTIVE_GROUP = "skipped-active-group"
    FAILED = "failed"


@dataclass(frozen=True)
class Candidate:
    """One deleted partition and what it held before the deletion."""

    group: str
    recorded: RecordedOffset
    deleted_at: str  # the intent's timestamp (RFC 3339)
    plan_id: str
    action_id: str
    group_kind: str
    outcome_known: bool = True


@dataclass(frozen=True)
class GroupNow:
    """The group as the cluster shows it now (absent groups: `exists=False`, no offsets)."""

    exists: bool
    active: bool
    state: str
    member_count: int
    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class Decision:
    candidate: Candidate
    status: RestoreStatus
    detail: str = ""
    current_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.candidate.recorded
        return {
            "group": self.candidate.group,
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "leaderEpoch": r.leader_epoch,
            "currentOffset": self.current_offset,
            "status": self.status.value,
            "detail": self.detail,
            "deletedAt": self.candidate.deleted_at,
            "planId": self.candidate.plan_id,
            "actionId": self.candidate.action_id,
        }


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def deleted_offsets(
    records: Iterable[Mapping[str, Any]],
    groups: Sequence[str] = (),
    since: datetime | None = None,
) -> list[Candidate]:
    """The latest recorded deletion of every partition (sorted by group, topic, partition)."""
    intents: dict[str, Mapping[str, Any]] = {}
    outcomes: dict[str, Mapping[str, Any]] = {}
    for record in records:
        try:
            action_id = str(record["actionId"])
        except KeyError as exc:
            raise AuditFormatError(f"record without actionId: {dict(record)!r:.120}") from exc
        if record.get("type") not in (INTENT, OUTCOME):
            raise AuditFormatError(f"unknown record type {record.get('type')!r}")
        (intents if record["type"] == INTENT else outcomes)[action_id] = record
    wanted = set(groups)
    latest: dict[tuple[str, TopicPartition], Candidate] = {}
    for action_id, intent in intents.items():
        group = str(intent["group"])
        if wanted and group not in wanted:
            continue
        deleted_at = str(intent["timestamp"])
        if since is not None and _parse_time(deleted_at) < since:
            continue
        outcome = outcomes.get(action_id)
        deleted = _deleted_partitions(intent, outcome)
        for data in intent.get("partitions", ()):
            recorded = RecordedOffset.from_json(data)
            if recorded is None or (deleted is not None and recorded.tp not in deleted):
                continue
            candidate = Candidate(
                group,
                recorded,
                deleted_at,
                str(intent.get("planId", "")),
                action_id,
                str(intent.get("groupKind", "")),
                outcome_known=outcome is not None and outcome.get("result") != UNKNOWN,
            )
            key = (group, recorded.tp)
            previous = latest.get(key)
            if previous is None or _parse_time(previous.deleted_at) <= _parse_time(deleted_at):
                latest[key] = candidate
    return [latest[k] for k in sorted(latest)]


def _deleted_partitions(
    intent: Mapping[str, Any], outcome: Mapping[str, Any] | None
) -> frozenset[TopicPartition] | None:
    """None = every partition of the intent; else the partitions the outcome says were deleted."""
    if outcome is None:
        return None  # unknown outcome: possibly deleted
    per_partition = outcome.get("partitions") or []
    if per_partition:
        return frozenset(
            TopicPartition(str(p["topic"]), int(p["partition"]))
            for p in per_partition
            if p.get("result") in _POSSIBLY_DELETED
        )
    return None if outcome.get("result") in _POSSIBLY_DELETED else frozenset()


def decide(
    candidates: Sequence[Candidate],
    current: Mapping[str, GroupNow],
    *,
    force: bool = False,
) -> list[Decision]:
    """Per partition what restore will do; the caller commits the `would-restore` ones (with
    --yes) and turns them into restored/failed."""
    decisions: list[Decision] = []
    for candidate in candidates:
        now = current.get(candidate.group, GroupNow(False, False, "", 0, {}))
        existing = now.offsets.get(candidate.recorded.tp)
        if now.active:
            detail = f"group is {now.state} with {now.member_count} member(s): stop its consumers first"
            decisions.append(Decision(candidate, RestoreStatus.SKIPPED_ACTIVE_GROUP, detail, existing))
        elif existing is not None and existing == candidate.recorded.offset:
            decisions.append(Decision(candidate, RestoreStatus.UNCHANGED, "already committed", existing))
        elif existing is not None and not force:
            detail = f"offset {existing} was committed after the deletion (use --force to overwrite)"
            decisions.append(Decision(candidate, RestoreStatus.SKIPPED_NEWER_COMMIT, detail, existing))
        else:
            detail = "" if existing is None else f"overwrites {existing} (--force)"
            if not candidate.outcome_known:
                detail = (detail + "; " if detail else "") + "outcome not recorded: possibly deleted"
            decisions.append(Decision(candidate, RestoreStatus.WOULD_RESTORE, detail, existing))
    return decisions

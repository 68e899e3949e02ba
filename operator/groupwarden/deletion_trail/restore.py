"""Restore planning from an audit trail: pure functions, no I/O.

1. `deleted_offsets(trail, cluster_id, groups, since)`: the offsets the trusted records of a trail
   say were deleted (intents whose outcome was Deleted; per partition for DeleteOffsets), latest
   deletion per partition wins (by the signed `timestamp`, then by position). An intent without an
   outcome (the run died between the call and the outcome record), or with an `Unknown` one (the
   request was sent, the answer lost), counts as possibly deleted: restoring it is safe because of
   rule 2. Records that are signed but still not to be believed are refused with their position:
   another cluster's, a second record with a known `actionId` (a replay), an outcome whose intent
   is missing or says something else.
2. `decide(candidates, current, log_ends)`: per partition, restore / skip. A group with active
   members is never touched; an offset committed since the deletion is never overwritten unless
   `force`; an offset beyond the partition's current end is never committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from groupwarden.core.snapshot import TopicPartition
from groupwarden.deletion_trail.records import INTENT, OUTCOME, RecordedOffset, RefusedRecord, TrailRecord

DELETED = "Deleted"
UNKNOWN = "Unknown"  # the request was sent, the answer lost: possibly deleted
_POSSIBLY_DELETED = frozenset({DELETED, UNKNOWN})


class RestoreStatus(StrEnum):
    RESTORED = "restored"
    WOULD_RESTORE = "would-restore"  # without --yes
    UNCHANGED = "unchanged"  # the recorded offset is already committed
    SKIPPED_NEWER_COMMIT = "skipped-newer-commit"
    SKIPPED_ACTIVE_GROUP = "skipped-active-group"
    SKIPPED_BEYOND_LOG_END = "skipped-beyond-log-end"
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


@dataclass(frozen=True)
class Deletions:
    """What a trail's trusted records say was deleted, and the records refused on the way."""

    candidates: list[Candidate]
    refused: list[RefusedRecord]


# An outcome must say the same as its intent about these (all signed in both).
_SHARED_FIELDS = ("group", "clusterId", "planId", "action", "policy")
_REQUIRED = ("actionId", "type", "group", "clusterId", "timestamp")


def _problem(record: Mapping[str, Any], cluster_id: str | None) -> str | None:
    missing = [name for name in _REQUIRED if not isinstance(record.get(name), str)]
    if missing:
        return f"incomplete record: no {', '.join(missing)}"
    try:
        _parse_time(str(record["timestamp"]))
    except ValueError:
        return f"timestamp {record['timestamp']!r} is not RFC 3339"
    if cluster_id is not None and record["clusterId"] != cluster_id:
        return f"record of cluster {record['clusterId']}, not of the cluster being restored ({cluster_id})"
    return None


def _outcome_problem(outcome: Mapping[str, Any], intent: Mapping[str, Any] | None) -> str | None:
    if intent is None:
        return "outcome without its intent (no intent with this actionId before it)"
    differing = [name for name in _SHARED_FIELDS if outcome.get(name) != intent.get(name)]
    if differing:
        return f"outcome differs from its intent in {', '.join(differing)}"
    planned = {(p.get("topic"), p.get("partition")) for p in intent.get("partitions") or ()}
    if any((p.get("topic"), p.get("partition")) not in planned for p in outcome.get("partitions") or ()):
        return "outcome names partitions its intent does not"
    return None


def deleted_offsets(
    trail: Iterable[TrailRecord],
    cluster_id: str | None,
    groups: Sequence[str] = (),
    since: datetime | None = None,
) -> Deletions:
    """The latest recorded deletion of every partition (sorted by group, topic, partition) among the
    records of `cluster_id` (None: any cluster, for reading a trail without a cluster), and the
    records refused. With `groups`, only those groups' candidates and refusals are kept (a refused
    record that names no group is always kept)."""
    wanted = set(groups)
    intents: dict[str, TrailRecord] = {}
    outcomes: dict[str, TrailRecord] = {}
    refused: list[RefusedRecord] = []

    def refuse(entry: TrailRecord, reason: str) -> None:
        group = entry.record.get("group")
        name = group if isinstance(group, str) else None
        if not wanted or name is None or name in wanted:
            refused.append(RefusedRecord(entry.position, reason, name))

    for entry in trail:
        record = entry.record
        problem = _problem(record, cluster_id)
        if problem is not None:
            refuse(entry, problem)
            continue
        action_id = str(record["actionId"])
        seen = intents if record["type"] == INTENT else outcomes
        if action_id in seen:
            refuse(
                entry,
                f"a second {record['type']} with actionId {action_id} (first at {seen[action_id].position})",
            )
            continue
        if record["type"] == OUTCOME:
            planned = intents.get(action_id)
            problem = _outcome_problem(record, planned.record if planned is not None else None)
            if problem is not None:
                refuse(entry, problem)
                continue
        seen[action_id] = entry
    latest: dict[tuple[str, TopicPartition], tuple[datetime, int, Candidate]] = {}
    for order, (action_id, entry) in enumerate(intents.items()):
        intent = entry.record
        group = str(intent["group"])
        if wanted and group not in wanted:
            continue
        deleted_at = str(intent["timestamp"])
        at = _parse_time(deleted_at)
        if since is not None and at < since:
            continue
        outcome_entry = outcomes.get(action_id)
        outcome = outcome_entry.record if outcome_entry is not None else None
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
            if previous is None or (previous[0], previous[1]) <= (at, order):
                latest[key] = (at, order, candidate)
    return Deletions([latest[k][2] for k in sorted(latest)], refused)


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
    log_ends: Mapping[TopicPartition, int] | None = None,
    force: bool = False,
) -> list[Decision]:
    """Per partition what restore will do; the caller commits the `would-restore` ones (with
    --yes) and turns them into restored/failed. `log_ends`: each partition's current end offset
    (absent: unknown); an offset beyond it is never committed, even with `force` (the topic was
    re-created or truncated since: its consumers would reset, or a trail is wrong)."""
    decisions: list[Decision] = []
    ends = log_ends or {}
    for candidate in candidates:
        now = current.get(candidate.group, GroupNow(False, False, "", 0, {}))
        existing = now.offsets.get(candidate.recorded.tp)
        end = ends.get(candidate.recorded.tp)
        if end is not None and candidate.recorded.offset > end:
            detail = (
                f"recorded offset {candidate.recorded.offset} is beyond the partition's end {end} "
                "(topic re-created or truncated since, or a wrong record): not committed"
            )
            decisions.append(Decision(candidate, RestoreStatus.SKIPPED_BEYOND_LOG_END, detail, existing))
        elif now.active:
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

"""Restore planning (pure): which offsets a trail says were deleted, and what restore does with each."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from audit_factories import cluster, plan_for

from groupwarden.adapters.kafka_restore import current_state
from groupwarden.cleanup.execute import execute_plan
from groupwarden.core.snapshot import TopicPartition
from groupwarden.deletion_trail import AuditRecorder, MemorySink, TrailRecord
from groupwarden.deletion_trail.records import RecordedOffset
from groupwarden.deletion_trail.restore import Candidate, GroupNow, RestoreStatus, decide
from groupwarden.deletion_trail.restore import deleted_offsets as deleted_in_trail
from groupwarden.testing.audit_keys import fixed_signer, read_fixed_trail

CLUSTER = "cluster-1"


def intent(action_id: str, group: str, at: str, partitions: dict[tuple[str, int], int]) -> dict[str, Any]:
    return {
        "auditVersion": 2,
        "type": "intent",
        "actionId": action_id,
        "planId": "p",
        "clusterId": CLUSTER,
        "action": "DeleteGroup",
        "group": group,
        "groupKind": "classic",
        "timestamp": at,
        "partitions": [
            {"topic": t, "partition": p, "offset": o, "leaderEpoch": 4, "metadata": "m"}
            for (t, p), o in partitions.items()
        ],
    }


def outcome(
    action_id: str, result: str, partitions: dict[tuple[str, int], str] | None = None, *, group: str
) -> dict[str, Any]:
    return {
        "auditVersion": 2,
        "type": "outcome",
        "actionId": action_id,
        "planId": "p",
        "clusterId": CLUSTER,
        "action": "DeleteGroup",
        "group": group,
        "timestamp": "2026-11-22T01:00:01Z",
        "result": result,
        "partitions": [{"topic": t, "partition": p, "result": r} for (t, p), r in (partitions or {}).items()],
    }


def deleted_offsets(
    records: list[dict[str, Any]], groups: list[str] | None = None, since: datetime | None = None
) -> list[Candidate]:
    """The candidates of records that all pass restore's checks."""
    trail = [TrailRecord(f"trail:{i}", r, "k") for i, r in enumerate(records, start=1)]
    deletions = deleted_in_trail(trail, CLUSTER, groups or (), since)
    assert deletions.refused == []
    return deletions.candidates


def keyed(candidates: list[Candidate]) -> dict[tuple[str, str, int], int]:
    return {(c.group, c.recorded.topic, c.recorded.partition): c.recorded.offset for c in candidates}


def test_only_what_was_deleted_is_a_candidate() -> None:
    records = [
        intent("1", "gone", "2026-11-22T01:00:00Z", {("t", 0): 5, ("t", 1): 7}),
        outcome("1", "Deleted", group="gone"),
        intent("2", "came-back", "2026-11-22T01:00:00Z", {("t", 0): 3}),
        outcome("2", "SkippedBecameActive", group="came-back"),
        intent("3", "partial", "2026-11-22T01:00:00Z", {("old", 0): 11, ("old", 1): 12}),
        outcome("3", "Failed", {("old", 0): "Deleted", ("old", 1): "Failed"}, group="partial"),
        intent("4", "missing", "2026-11-22T01:00:00Z", {("t", 0): 1}),
        outcome("4", "NotFound", group="missing"),
    ]
    assert keyed(deleted_offsets(records)) == {
        ("gone", "t", 0): 5,
        ("gone", "t", 1): 7,
        ("partial", "old", 0): 11,
    }
    [first, *_] = deleted_offsets(records)
    assert (first.recorded.leader_epoch, first.recorded.metadata) == (4, "m")


def test_an_intent_without_outcome_is_possibly_deleted() -> None:
    [candidate] = deleted_offsets([intent("1", "g", "2026-11-22T01:00:00Z", {("t", 0): 5})])
    assert not candidate.outcome_known
    [decision] = decide([candidate], {})
    assert decision.status is RestoreStatus.WOULD_RESTORE and "possibly deleted" in decision.detail


def test_filters_and_the_latest_deletion_wins() -> None:
    records = [
        intent("1", "g", "2026-11-22T01:00:00Z", {("t", 0): 5}),
        outcome("1", "Deleted", group="g"),
        intent("2", "g", "2026-11-22T02:00:00Z", {("t", 0): 9}),
        outcome("2", "Deleted", group="g"),
        intent("3", "h", "2026-11-22T00:30:00Z", {("t", 0): 1}),
        outcome("3", "Deleted", group="h"),
    ]
    assert keyed(deleted_offsets(records)) == {("g", "t", 0): 9, ("h", "t", 0): 1}
    assert keyed(deleted_offsets(records, groups=["h"])) == {("h", "t", 0): 1}
    since = datetime(2026, 11, 22, 1, 30, tzinfo=UTC)
    assert keyed(deleted_offsets(records, since=since)) == {("g", "t", 0): 9}


def candidate(group: str, tp: tuple[str, int], offset: int) -> Candidate:
    return Candidate(
        group, RecordedOffset(tp[0], tp[1], offset, 3, ""), "2026-11-22T01:00:00Z", "p", "a", "classic"
    )


def test_decide_refuses_active_groups_and_never_overwrites_a_newer_commit_unless_forced() -> None:
    candidates = [
        candidate("active", ("t", 0), 5),
        candidate("absent", ("t", 0), 5),
        candidate("newer", ("t", 0), 5),
        candidate("same", ("t", 0), 5),
    ]
    tp = TopicPartition("t", 0)
    current = {
        "active": GroupNow(True, True, "Stable", 1, {}),
        "newer": GroupNow(True, False, "Empty", 0, {tp: 8}),
        "same": GroupNow(True, False, "Empty", 0, {tp: 5}),
    }
    statuses = {d.candidate.group: d.status for d in decide(candidates, current)}
    assert statuses == {
        "active": RestoreStatus.SKIPPED_ACTIVE_GROUP,
        "absent": RestoreStatus.WOULD_RESTORE,
        "newer": RestoreStatus.SKIPPED_NEWER_COMMIT,
        "same": RestoreStatus.UNCHANGED,
    }
    forced = {d.candidate.group: d for d in decide(candidates, current, force=True)}
    assert forced["newer"].status is RestoreStatus.WOULD_RESTORE and "overwrites 8" in forced["newer"].detail
    assert (
        forced["active"].status is RestoreStatus.SKIPPED_ACTIVE_GROUP
    )  # --force never touches active groups
    assert forced["newer"].to_json()["currentOffset"] == 8


def test_current_state_and_planning_from_a_real_trail_on_the_fake_cluster() -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    sink = MemorySink()
    recorder = AuditRecorder([sink], snapshot, ["fake:9092"], signer=fixed_signer())
    recorder.record_outcomes(plan, execute_plan(fake, plan, recorder.before_action(plan)))
    reading = read_fixed_trail(sink.lines)
    assert reading.refused == ()
    deletions = deleted_in_trail(reading.records, "fake-cluster")
    assert deletions.refused == []
    candidates = deletions.candidates
    assert keyed(candidates) == {
        ("stale-a", "t", 0): 5,
        ("stale-a", "t", 1): 7,
        ("stale-b", "t", 0): 9,
        ("svc", "old", 0): 11,
        ("svc", "old", 1): 12,
    }
    fake.add_group("stale-b", subscribed=["t"])  # a consumer came back to stale-b
    fake.commit("stale-a", {("t", 0): 6})
    now = current_state(fake, sorted({c.group for c in candidates}))
    assert now["stale-b"].active and not now["stale-a"].active
    assert now["svc"].active  # still has its member: its offsets of `old` stay deleted
    decided = {(d.candidate.group, d.candidate.recorded.tp): d.status for d in decide(candidates, now)}
    assert decided == {
        ("stale-a", TopicPartition("t", 0)): RestoreStatus.SKIPPED_NEWER_COMMIT,
        ("stale-a", TopicPartition("t", 1)): RestoreStatus.WOULD_RESTORE,
        ("stale-b", TopicPartition("t", 0)): RestoreStatus.SKIPPED_ACTIVE_GROUP,
        ("svc", TopicPartition("old", 0)): RestoreStatus.SKIPPED_ACTIVE_GROUP,
        ("svc", TopicPartition("old", 1)): RestoreStatus.SKIPPED_ACTIVE_GROUP,
    }


def test_an_unknown_outcome_is_possibly_deleted_too() -> None:
    """Sent, then the connection was lost: the broker may have executed it, so restore offers it
    (a group that is back, or a newer commit, is still protected by `decide`)."""
    records = [
        intent("1", "lost-answer", "2026-11-22T01:00:00Z", {("t", 0): 5}),
        outcome("1", "Unknown", group="lost-answer"),
        intent("2", "lost-partition", "2026-11-22T01:00:00Z", {("o", 0): 8, ("o", 1): 9}),
        outcome("2", "Unknown", {("o", 0): "Unknown", ("o", 1): "Failed"}, group="lost-partition"),
    ]
    candidates = deleted_offsets(records)
    assert keyed(candidates) == {("lost-answer", "t", 0): 5, ("lost-partition", "o", 0): 8}
    assert not any(c.outcome_known for c in candidates)
    assert all(d.status is RestoreStatus.WOULD_RESTORE for d in decide(candidates, {}))


def test_signed_records_that_still_must_not_be_believed_are_refused_with_their_position() -> None:
    """Genuine signatures, wrong places: another cluster's record, a replay of an old deletion
    after a newer one, an outcome without its intent or saying something else."""
    old = [intent("1", "g", "2026-11-22T01:00:00Z", {("t", 0): 4}), outcome("1", "Deleted", group="g")]
    new = [intent("2", "g", "2026-11-22T02:00:00Z", {("t", 0): 10}), outcome("2", "Deleted", group="g")]
    elsewhere = {**intent("3", "g", "2026-11-22T03:00:00Z", {("t", 0): 99}), "clusterId": "cluster-2"}
    orphan = outcome("4", "Deleted", group="g")
    other_group = {**outcome("5", "Deleted", group="h"), "group": "h"}
    lines = [
        *old,
        *new,
        *old,  # replayed after the newer deletion
        elsewhere,
        orphan,
        intent("5", "g", "2026-11-22T01:30:00Z", {("t", 1): 7}),
        other_group,  # the outcome of g's action 5 claims group h
    ]
    trail = [TrailRecord(f"audit/0@{i}", r, "k") for i, r in enumerate(lines)]
    deletions = deleted_in_trail(trail, CLUSTER)
    assert keyed(deletions.candidates) == {("g", "t", 0): 10, ("g", "t", 1): 7}
    assert not next(c for c in deletions.candidates if c.recorded.partition == 1).outcome_known
    assert [(r.position, r.reason) for r in deletions.refused] == [
        ("audit/0@4", "a second intent with actionId 1 (first at audit/0@0)"),
        ("audit/0@5", "a second outcome with actionId 1 (first at audit/0@1)"),
        ("audit/0@6", "record of cluster cluster-2, not of the cluster being restored (cluster-1)"),
        ("audit/0@7", "outcome without its intent (no intent with this actionId before it)"),
        ("audit/0@9", "outcome differs from its intent in group"),
    ]
    # --group keeps the refusals of that group only (and of records that name none).
    assert [r.position for r in deleted_in_trail(trail, CLUSTER, ["h"]).refused] == ["audit/0@9"]


def test_the_latest_deletion_is_the_latest_signed_time_not_the_latest_position() -> None:
    late = [intent("2", "g", "2026-11-22T02:00:00Z", {("t", 0): 10}), outcome("2", "Deleted", group="g")]
    early = [intent("1", "g", "2026-11-22T01:00:00Z", {("t", 0): 4}), outcome("1", "Deleted", group="g")]
    assert keyed(deleted_offsets([*late, *early])) == {("g", "t", 0): 10}


def test_incomplete_records_are_refused() -> None:
    broken = {
        k: v for k, v in intent("1", "g", "2026-11-22T01:00:00Z", {("t", 0): 4}).items() if k != "clusterId"
    }
    bad_time = intent("2", "g", "yesterday", {("t", 0): 4})
    deletions = deleted_in_trail(
        [TrailRecord("f:1", broken, "k"), TrailRecord("f:2", bad_time, "k")], CLUSTER
    )
    assert deletions.candidates == []
    assert [r.reason for r in deletions.refused] == [
        "incomplete record: no clusterId",
        "timestamp 'yesterday' is not RFC 3339",
    ]


def test_an_offset_beyond_the_partitions_end_is_never_committed_even_with_force() -> None:
    tp = TopicPartition("t", 0)
    candidates = [candidate("g", ("t", 0), 1000), candidate("h", ("t", 0), 40)]
    for force in (False, True):
        decided = {d.candidate.group: d for d in decide(candidates, {}, log_ends={tp: 40}, force=force)}
        assert decided["g"].status is RestoreStatus.SKIPPED_BEYOND_LOG_END
        assert "beyond the partition's end 40" in decided["g"].detail
        assert decided["h"].status is RestoreStatus.WOULD_RESTORE  # at the end: nothing skipped

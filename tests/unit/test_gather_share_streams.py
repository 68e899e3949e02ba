"""Share and streams groups through the port on FakeKafka: gather (share start offsets from
DescribeShareGroupOffsets, never the ledger; streams offsets from the ledger), decide, execute
with the write-ahead audit, and the restore decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from groupwarden.cleanup.execute import execute_plan
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import Action, ActionKind, ResultKind
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import GroupKind, GroupState, TimestampSource, TopicPartition
from groupwarden.deletion_trail import TrailRecord
from groupwarden.deletion_trail.records import intent_record
from groupwarden.deletion_trail.restore import GroupNow, RestoreStatus, deleted_offsets
from groupwarden.deletion_trail.restore import decide as decide_restore
from groupwarden.testing.fake_kafka import FakeKafka

HOUR_MS = 3_600_000


def now_of(fake: FakeKafka) -> datetime:
    return datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)


def share_policy(group_types: tuple[str, ...] | None = ("share",), **rules: str) -> ConsumerGroupPolicy:
    selector: dict[str, object] = {"include": ["*"]}
    if group_types is not None:
        selector["groupTypes"] = list(group_types)
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": selector,
                "rules": rules,
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def test_share_start_offsets_come_from_the_share_api_even_with_a_readable_log() -> None:
    fake = FakeKafka(topics=["t", "u"])
    fake.add_group("forgotten", GroupKind.SHARE, offsets={("t", 0): 40, ("t", 1): 41})
    fake.add_group("busy", GroupKind.SHARE, subscribed=["t"], offsets={("t", 0): 7, ("u", 0): 3})
    memory = ClusterKnowledge(ObservedTimes())

    snapshot = gather_snapshot(fake, memory, now_of(fake))
    assert snapshot.offsets_log_available  # classic groups would be dated from the log...
    by_id = {g.group_id: g for g in snapshot.groups}
    forgotten, busy = by_id["forgotten"], by_id["busy"]
    # ...share state is not in it: start offsets are observed, and so is Empty-since.
    assert [(o.partition, o.offset) for o in forgotten.offsets] == [
        (TopicPartition("t", 0), 40),
        (TopicPartition("t", 1), 41),
    ]
    assert all(
        o.committed_at and o.committed_at.source is TimestampSource.OBSERVED for o in forgotten.offsets
    )
    assert forgotten.empty_since is not None and forgotten.empty_since.source is TimestampSource.OBSERVED
    assert (busy.kind, busy.state, busy.member_count) == (GroupKind.SHARE, GroupState.STABLE, 1)
    assert busy.subscribed_topics == frozenset({"t"})
    assert fake.calls["fetch_share_offsets"] == 1
    assert fake.calls["describe_groups"] == 1  # only the Stable one is described


def test_a_forgotten_share_group_is_deleted_with_its_start_offsets_in_the_intent() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("forgotten", GroupKind.SHARE, offsets={("t", 0): 40})
    fake.add_group("busy", GroupKind.SHARE, subscribed=["t"], offsets={("t", 0): 7})
    memory = ClusterKnowledge(ObservedTimes())
    gather_snapshot(fake, memory, now_of(fake))  # first observation starts the clocks
    fake.advance(3 * HOUR_MS)
    now = now_of(fake)
    snapshot = gather_snapshot(fake, memory, now)
    plan = decide(share_policy(emptyGroupRetention="2h"), snapshot, now)
    [action] = plan.actions
    assert (action.kind, action.group_id, action.group_kind) == (
        ActionKind.DELETE_GROUP,
        "forgotten",
        GroupKind.SHARE,
    )

    facts = {g.group_id: g for g in snapshot.groups}
    intents = []

    def record(a: Action) -> None:
        intents.append(
            intent_record(
                plan=plan,
                action=a,
                facts=facts[a.group_id],
                plan_id="p1",
                action_id="a1",
                bootstrap_servers=["fake:9092"],
                at=now,
            )
        )

    [outcome] = execute_plan(fake, plan, record)
    assert outcome.result is ResultKind.DELETED
    assert "forgotten" not in fake.groups and "busy" in fake.groups
    [intent] = intents
    assert intent["groupKind"] == "share"
    assert intent["partitions"][0]["offset"] == 40

    # restore: the group is gone, so the recorded start offset would be put back
    candidates = deleted_offsets(
        [TrailRecord(f"trail:{i}", r, "k") for i, r in enumerate(intents, start=1)], "fake-cluster"
    ).candidates
    assert [c.group_kind for c in candidates] == ["share"]
    [decision] = decide_restore(candidates, {"forgotten": GroupNow(False, False, "absent", 0, {})})
    assert decision.status is RestoreStatus.WOULD_RESTORE
    error, answers = fake.alter_share_offsets("forgotten", {TopicPartition("t", 0): 40})
    assert error is None and answers == {TopicPartition("t", 0): None}
    assert fake.fetch_share_offsets(["forgotten"])["forgotten"].offsets[TopicPartition("t", 0)].offset == 40


def test_a_share_consumer_back_between_plan_and_delete_is_skipped_became_active() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("forgotten", GroupKind.SHARE, offsets={("t", 0): 40})
    memory = ClusterKnowledge(ObservedTimes())
    gather_snapshot(fake, memory, now_of(fake))
    fake.advance(3 * HOUR_MS)
    plan = decide(
        share_policy(emptyGroupRetention="2h"), gather_snapshot(fake, memory, now_of(fake)), now_of(fake)
    )
    fake.join("forgotten", ["t"])
    [outcome] = execute_plan(fake, plan)
    assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE
    assert fake.groups["forgotten"].offsets  # nothing lost


def test_a_policy_without_group_types_never_touches_share_groups() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("forgotten", GroupKind.SHARE, offsets={("t", 0): 40})
    fake.add_group("ci-1", subscribed=["t"])
    fake.leave("ci-1")
    fake.advance(30 * 24 * HOUR_MS)
    now = now_of(fake)
    default = share_policy(group_types=None, emptyGroupRetention="1h")  # groupTypes left out
    plan = decide(
        default, gather_snapshot(fake, ClusterKnowledge(ObservedTimes()), now), now + timedelta(days=1)
    )
    assert [a.group_id for a in plan.actions] == ["ci-1"]
    assert [(s.group_id, s.reason_code.value) for s in plan.skipped] == [
        ("forgotten", "UnsupportedGroupType")
    ]


def test_streams_groups_are_described_and_their_offsets_dated_from_the_log() -> None:
    fake = FakeKafka(topics=["in", "old"])
    fake.add_group("app", GroupKind.STREAMS, subscribed=["in"], offsets={("in", 0): 5, ("old", 0): 2})
    fake.add_group("gone-app", GroupKind.STREAMS, offsets={("in", 0): 3})
    fake.advance(3 * HOUR_MS)
    now = now_of(fake)
    snapshot = gather_snapshot(fake, ClusterKnowledge(ObservedTimes()), now)
    by_id = {g.group_id: g for g in snapshot.groups}
    app, gone = by_id["app"], by_id["gone-app"]
    assert (app.kind, app.state, app.subscribed_topics) == (
        GroupKind.STREAMS,
        GroupState.STABLE,
        frozenset({"in"}),
    )
    assert all(o.committed_at and o.committed_at.source is TimestampSource.OFFSETS_LOG for o in app.offsets)
    assert gone.empty_since is not None and gone.empty_since.source is TimestampSource.OBSERVED
    streams = share_policy(("streams",), emptyGroupRetention="2h", unsubscribedOffsetRetention="2h")
    plan = decide(streams, snapshot, now)
    assert {(a.group_id, a.kind) for a in plan.actions} == {("app", ActionKind.DELETE_OFFSETS)}
    [offsets_action] = plan.actions
    assert offsets_action.partitions == (TopicPartition("old", 0),)
    outcomes = execute_plan(fake, plan)
    assert [o.result for o in outcomes] == [ResultKind.DELETED]
    assert set(fake.groups["app"].offsets) == {TopicPartition("in", 0)}


def share_state_record(group: str, topic: str, partition: int, start: int, at_ms: int, offset: int) -> Any:
    from groupwarden.offsets_log.ledger import OffsetsLogRecord
    from groupwarden.offsets_log.share_state import ShareSnapshotValue, ShareStateKey
    from groupwarden.testing.fake_kafka import fake_topic_id
    from groupwarden.testing.offsets_log_encoder import encode_share_state_key, encode_share_state_value

    key = encode_share_state_key(ShareStateKey(0, group, fake_topic_id(topic), partition))
    value = encode_share_state_value(ShareSnapshotValue(1, 1, 0, start, at_ms, at_ms))
    return OffsetsLogRecord(key, value, at_ms, 0, offset)


def test_share_start_offsets_are_dated_by_share_group_state_when_it_shows_them() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("forgotten", GroupKind.SHARE, offsets={("t", 0): 40, ("t", 1): 41})
    changed_ms = fake.now_ms - 5 * HOUR_MS
    fake.share_state_log = [
        share_state_record("forgotten", "t", 0, 40, changed_ms, 0),
        share_state_record("forgotten", "t", 1, 39, changed_ms, 1),  # not what the broker says now
    ]
    memory = ClusterKnowledge(ObservedTimes())
    snapshot = gather_snapshot(fake, memory, now_of(fake))
    [forgotten] = snapshot.groups
    dated = {o.partition.partition: o.committed_at for o in forgotten.offsets}
    assert dated[0] is not None and dated[0].source is TimestampSource.OFFSETS_LOG
    assert dated[0].at == datetime.fromtimestamp(changed_ms / 1000, tz=UTC)
    # A start offset the topic does not show (yet) is dated by first observation: never earlier.
    assert dated[1] is not None and (dated[1].source, dated[1].at) == (TimestampSource.OBSERVED, now_of(fake))
    assert fake.calls["read_share_state_log"] == 1 and not snapshot.warnings
    # The next pass resumes where the topic was read to.
    fake.share_state_log.append(share_state_record("forgotten", "t", 1, 41, changed_ms + 1, 2))
    [forgotten] = gather_snapshot(fake, memory, now_of(fake)).groups
    assert {o.partition.partition: o.committed_at.source for o in forgotten.offsets if o.committed_at} == {
        0: TimestampSource.OFFSETS_LOG,
        1: TimestampSource.OFFSETS_LOG,
    }


def test_an_unreadable_share_group_state_falls_back_to_first_observation() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("forgotten", GroupKind.SHARE, offsets={("t", 0): 40})
    fake.share_state_unavailable = True
    snapshot = gather_snapshot(fake, ClusterKnowledge(ObservedTimes()), now_of(fake))
    [forgotten] = snapshot.groups
    assert [o.committed_at.source for o in forgotten.offsets if o.committed_at] == [TimestampSource.OBSERVED]
    assert any("__share_group_state is not readable" in w for w in snapshot.warnings)


def test_share_group_state_is_not_read_without_share_groups() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("classic", GroupKind.CLASSIC, offsets={("t", 0): 1})
    gather_snapshot(fake, ClusterKnowledge(ObservedTimes()), now_of(fake))
    assert fake.calls["read_share_state_log"] == 0

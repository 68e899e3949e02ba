"""Share groups (KIP-932) on the real broker, with a real share consumer (confluent-kafka's
`ShareConsumer`) and `kafka-share-groups` as the oracle.

The broker never expires share groups (`ShareGroup.shouldExpire()` is false): an Empty share group
and its share-partition state stay forever unless someone deletes them. These tests prove that a
policy naming `share` deletes a forgotten one, leaves an active one alone, reports (but cannot
remove) the state of a topic a running group left, loses nothing when a share consumer comes back
between plan and delete, and that `groupwarden restore` puts the start offsets back so a share
consumer resumes exactly there. Policies that do not name `share` never touch them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.execute import execute_plan
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ActionKind, ResultKind, SkipReason
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from gwtest.kafka import create_topics, produce
from gwtest.plans import (
    default_policy_only_reports,
    enforce_policy,
    plan_past_retention,
    restore_with_cli,
    snapshot_of,
    typed_policy_deletes,
)
from gwtest.share import (
    first_share_offsets,
    share_consumer_in_group,
    share_group_states_with_tool,
    share_offsets_with_tool,
    wait_initialised,
)
from gwtest.wait import wait_for


def forgotten_share_group(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], int]:
    """A share group that read and acknowledged records and stopped; 4 more records arrive
    afterwards. Returns its start offsets (the oracle's): they sit mid-log, so a consumer starting
    over (from 0) and one starting at the end (a new share group) would both show."""
    produce(bootstrap, topic, 2)  # before the group: a share group starts at the log end
    with share_consumer_in_group(bootstrap, group, [topic]) as consumer:
        wait_initialised(consumer, bootstrap, [topic])
        consumer.poll_some(0.5)  # the next poll acknowledges the previous batch
    recorded = wait_for(
        lambda: share_offsets_with_tool(bootstrap, group), timeout=30, what=f"{group} start offsets"
    )
    assert len(recorded) == 2 and all(offset >= 2 for offset in recorded.values()), recorded
    produce(bootstrap, topic, 4)
    return recorded


def test_the_gateway_speaks_the_share_apis_with_per_item_errors(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, left = unique_name("share-gw"), unique_name("share-gw-left")
    group = unique_name("share-gw-grp")
    create_topics(kafka_bootstrap, [topic, left])
    with open_gateway(kafka_bootstrap) as gateway:
        with share_consumer_in_group(kafka_bootstrap, group, [topic, left]) as consumer:
            wait_initialised(consumer, kafka_bootstrap, [topic, left])
            consumer.consumer.subscribe([topic])  # the group stops reading `left`

            def resubscribed() -> bool:
                consumer.poll_some(0.1)
                listed = [g for g in gateway.list_groups() if g.group_id == group]
                return gateway.describe_groups(listed)[group].subscribed_topics == frozenset({topic})

            wait_for(resubscribed, timeout=30, what="the new subscription")
            [listed] = [g for g in gateway.list_groups() if g.group_id == group]
            assert (listed.group_type, listed.protocol_type, listed.state) == (
                "share",
                "share",
                GroupState.STABLE,
            )
            described = gateway.describe_groups([listed])[group]
            assert (described.kind, described.member_count, described.error) == (GroupKind.SHARE, 1, None)
            state = gateway.fetch_share_offsets([group, unique_name("no-such-share-group")])
            assert {(tp.topic, tp.partition): i.offset for tp, i in state[group].offsets.items()} == (
                share_offsets_with_tool(kafka_bootstrap, group)
            )
            # The broker's rule (Kafka 4.3.1): no share state goes while the group has members,
            # not even a topic none of them subscribes to any more.
            error, per_topic = gateway.delete_share_offsets(group, [left])
            assert error is not None and error.name == "NON_EMPTY_GROUP" and per_topic == {}
            error, _ = gateway.alter_share_offsets(group, {TopicPartition(topic, 0): 0})
            assert error is not None and error.name == "NON_EMPTY_GROUP"
            assert gateway.delete_groups([group])[group].name == "NON_EMPTY_GROUP"  # type: ignore[union-attr]
            # Classic OffsetFetch does not serve share state.
            assert gateway.fetch_offsets([group])[group].offsets == {}

        wait_for(
            lambda: share_group_states_with_tool(kafka_bootstrap, group).get(group) == "Empty",
            timeout=30,
            what="Empty",
        )
        error, per_topic = gateway.delete_share_offsets(group, [left])
        assert (error, per_topic) == (None, {left: None})
        assert {t for t, _ in share_offsets_with_tool(kafka_bootstrap, group)} == {topic}
        counts = gateway.request_counts
        assert counts["ShareGroupDescribe"] >= 1 and counts["DescribeShareGroupOffsets"] >= 1
        assert counts["DescribeGroups"] == 0  # never the classic describe for a share group
        assert gateway.delete_groups([group]) == {group: None}
    assert group not in share_group_states_with_tool(kafka_bootstrap, group)


def test_forgotten_share_group_is_deleted_active_one_untouched_and_restore_resumes_exactly(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, prefix = unique_name("share-work"), unique_name("share-cli")
    forgotten, active = f"{prefix}-forgotten", f"{prefix}-active"
    create_topics(kafka_bootstrap, [topic])
    recorded = forgotten_share_group(kafka_bootstrap, forgotten, topic)

    with share_consumer_in_group(kafka_bootstrap, active, [topic]):
        # A policy written without groupTypes (the default) reports share groups, never acts.
        default_policy_only_reports(tmp_path, kafka_bootstrap, prefix, {forgotten: "share", active: "share"})
        intent, outcome = typed_policy_deletes(tmp_path, kafka_bootstrap, prefix, "share", forgotten, 30)
        listed = share_group_states_with_tool(kafka_bootstrap, forgotten, active)
        assert forgotten not in listed and listed[active] == "Stable"

    assert (intent["type"], intent["groupKind"], intent["protocolType"]) == ("intent", "share", "share")
    assert {(p["topic"], p["partition"]): p["offset"] for p in intent["partitions"]} == recorded
    # Start offsets dated by the share coordinator's own records (`__share_group_state`), not by
    # groupwarden's first observation.
    assert all(p["committedAtSource"] == "offsetsLog" for p in intent["partitions"])
    assert outcome["result"] == "Deleted"

    restore_with_cli(tmp_path, kafka_bootstrap, forgotten)
    assert share_offsets_with_tool(kafka_bootstrap, forgotten) == recorded
    # A real share consumer of the restored group gets the records after the recorded start offsets:
    # not the 4 newer ones only (a new share group starts at the end), not everything from 0.
    assert first_share_offsets(kafka_bootstrap, forgotten, topic) == {p: o for (_, p), o in recorded.items()}


def test_a_share_consumer_back_between_plan_and_delete_loses_nothing(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("share-race"), unique_name("share-race-grp")
    create_topics(kafka_bootstrap, [topic])
    recorded = forgotten_share_group(kafka_bootstrap, group, topic)
    with open_gateway(kafka_bootstrap) as gateway:
        policy = enforce_policy(kafka_bootstrap, "share", [group], emptyGroupRetention="1s")
        plan = plan_past_retention(gateway, policy, group)
        assert [(a.kind, a.group_kind) for a in plan.actions] == [(ActionKind.DELETE_GROUP, GroupKind.SHARE)]
        with share_consumer_in_group(kafka_bootstrap, group, [topic]):
            [outcome] = execute_plan(gateway, plan)
            assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE, outcome
            assert share_offsets_with_tool(kafka_bootstrap, group) == recorded


def test_a_running_share_groups_left_topic_is_reported_and_the_group_keeps_running(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, left, group = unique_name("share-keep"), unique_name("share-left"), unique_name("share-unsub")
    create_topics(kafka_bootstrap, [topic, left])
    with (
        open_gateway(kafka_bootstrap) as gateway,
        share_consumer_in_group(kafka_bootstrap, group, [topic, left]) as consumer,
    ):
        wait_initialised(consumer, kafka_bootstrap, [topic, left])
        consumer.consumer.subscribe([topic])
        memory = ClusterKnowledge(ObservedTimes())

        def left_unsubscribed() -> bool:
            consumer.poll_some(0.1)
            return snapshot_of(gateway, group, memory).groups[0].subscribed_topics == frozenset({topic})

        wait_for(left_unsubscribed, timeout=30, what="the group to drop the topic")
        time.sleep(1.2)
        now = datetime.now(UTC)
        rules = {"emptyGroupRetention": "1s", "unsubscribedOffsetRetention": "1s"}
        plan = decide(
            enforce_policy(kafka_bootstrap, "share", [group], **rules),
            snapshot_of(gateway, group, memory, now),
            now,
        )
        assert plan.actions == ()
        [skip] = plan.skipped
        assert skip.reason_code is SkipReason.BROKER_REQUIRES_EMPTY
        assert {tp.topic for tp in skip.partitions} == {left}
        consumer.poll_some(0.2)
        assert share_group_states_with_tool(kafka_bootstrap, group)[group] == "Stable"
        assert len(share_offsets_with_tool(kafka_bootstrap, group)) == 4


def test_the_reported_start_offset_trails_the_last_acknowledgement(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Kafka 4.3.1 fact the race campaign's oracle relies on (bench/race_oracle.py, Commit.floor)
    and restore lives with: after a share consumer accepts a batch [f, l], DescribeShareGroupOffsets
    (and `kafka-share-groups`) reports f, not l + 1, until the share state is written again; the
    records themselves are not delivered again. So a recorded start offset may be one
    acknowledged batch behind, and a restore from it redelivers at most that batch (at least
    once, never a record skipped)."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    topic, group = unique_name("share-lag"), unique_name("share-lag-grp")
    create_topics(kafka_bootstrap, [topic], partitions=1)
    config = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
        "log_level": 3,
    }

    def accept_batch(consumer: ShareConsumer, produce_first: bool) -> list[int]:
        got: list[int] = []

        def came() -> bool:
            if produce_first:
                produce(kafka_bootstrap, topic, 3, partitions=1)
            for message in consumer.poll(0.5) or []:
                if message.error() is None:
                    got.append(message.offset())
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            consumer.commit_sync(30.0)
            return bool(got)

        wait_for(came, timeout=60, what=f"records in {group}")
        return got

    consumer = ShareConsumer(config)
    try:
        consumer.subscribe([topic])
        first = accept_batch(consumer, produce_first=True)  # initialises the state at the log end
        produce(kafka_bootstrap, topic, 3, partitions=1)
        second = accept_batch(consumer, produce_first=False)
        assert second[0] == max(first) + 1, (first, second)
    finally:
        consumer.close()
    # Reported: the start of the last accepted batch, not the next record (max(second) + 1).
    assert share_offsets_with_tool(kafka_bootstrap, group) == {(topic, 0): second[0]}
    # Yet nothing is delivered again: every record up to max(second) is acknowledged.
    again = ShareConsumer(config | {"share.acknowledgement.mode": "implicit"})
    try:
        again.subscribe([topic])
        produce(kafka_bootstrap, topic, 1, partitions=1)  # the next record: max(second) + 1 or later
        seen: list[int] = []

        def next_record() -> bool:
            seen.extend(m.offset() for m in again.poll(0.5) or [] if m.error() is None)
            return bool(seen)

        wait_for(next_record, timeout=60, what="the next record")
        assert min(seen) > max(second), (seen, second)
    finally:
        again.close()

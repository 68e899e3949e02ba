"""Share and streams groups in the real `__consumer_offsets`: the ledger's "Empty since" for them is
when the last member left (its member tombstone), inside the wall-clock window of a real share
consumer closing / a real Kafka Streams app stopping, and the gather then dates them from the log."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.snapshot import GroupKind, TimestampSource
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.offsets_log.share_state import ShareStateLedger, share_starts
from gwtest.kafka import create_topics
from gwtest.share import share_consumer_in_group, share_offsets, wait_initialised
from gwtest.streams import wordcount_app
from gwtest.wait import wait_for

SKEW_MS = 1000  # as in test_offsets_log_real.py: the broker's clock reading on the same host


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def membership_after_reading(
    bootstrap: str, ledger: OffsetsLedger, group: str
) -> tuple[int, int | None] | None:
    with open_gateway(bootstrap) as gateway:
        ledger.apply_many(gateway.read_offsets_log(dict(ledger.positions)))
    return ledger.membership(group)


def assert_dated_from_the_log(bootstrap: str, group: str, kind: GroupKind, before: int, after: int) -> None:
    ledger = OffsetsLedger(lambda g: g == group)
    found = wait_for(
        lambda: (
            (m := membership_after_reading(bootstrap, ledger, group)) is not None and m[0] == 0 and m[1] and m
        ),
        timeout=30,
        what=f"the log to show {group} Empty",
    )
    assert before - SKEW_MS <= found[1] <= after + SKEW_MS, (before, found, after)
    with open_gateway(bootstrap) as gateway:
        snapshot = gather_snapshot(
            gateway, ClusterKnowledge(ObservedTimes()), datetime.now(UTC), lambda g: g == group
        )
    [facts] = snapshot.groups
    assert facts.kind is kind and facts.empty_since is not None
    assert facts.empty_since.source is TimestampSource.OFFSETS_LOG
    assert int(facts.empty_since.at.timestamp() * 1000) == found[1]


def assert_topology_decoded(bootstrap: str, ledger: OffsetsLedger, app: str) -> None:
    """The real StreamsGroupTopology record (type 23) decodes to what StreamsGroupDescribe says, and
    its internal topics are WordCountDemo's (an unnamed count store and its groupBy repartition) as
    they exist on the broker."""
    view = ledger.group(app)
    assert view is not None and view.streams_topology is not None
    assert (ledger.corrupt, ledger.unknown_by_type[23]) == (0, 0)
    with open_gateway(bootstrap) as gateway:
        listed = [g for g in gateway.list_groups() if g.group_id == app]
        described = gateway.describe_groups(listed)[app]
        existing = {t for t in gateway.list_topics() if t.startswith(f"{app}-")}
    assert (
        view.subscribed_topics
        == described.subscribed_topics
        == {
            "streams-plaintext-input",
            f"{app}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition",
        }
    )
    internal = {
        f"{app}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog",
        f"{app}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition",
    }
    assert view.streams_topology.internal_topics == described.internal_topics == internal == existing


def test_share_group_empty_since_is_when_the_last_share_consumer_left(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("share-log"), unique_name("share-log-grp")
    create_topics(kafka_bootstrap, [topic])
    ledger = OffsetsLedger(lambda g: g == group)
    with share_consumer_in_group(kafka_bootstrap, group, [topic]) as consumer:
        wait_initialised(consumer, kafka_bootstrap, [topic])
        assert membership_after_reading(kafka_bootstrap, ledger, group) == (1, None)
        before = now_ms()
    after = now_ms()
    assert_dated_from_the_log(kafka_bootstrap, group, GroupKind.SHARE, before, after)


def test_streams_group_empty_since_is_when_the_app_stopped(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app = unique_name("streams-log")
    ledger = OffsetsLedger(lambda g: g == app)
    with wordcount_app(kafka_bootstrap, app, tmp_path):
        assert membership_after_reading(kafka_bootstrap, ledger, app) == (1, None)
        assert_topology_decoded(kafka_bootstrap, ledger, app)
        before = now_ms()
    after = now_ms()
    assert_dated_from_the_log(kafka_bootstrap, app, GroupKind.STREAMS, before, after)


def test_share_start_offsets_are_dated_by_share_group_state(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Kafka 4.3.1's `__share_group_state` dates each start offset (snapshot WriteTimestamp, update
    record time): gather uses it, so an Empty share group's clock is the broker's own time, not
    groupwarden's first observation; it equals what DescribeShareGroupOffsets and the share
    coordinator's own records say."""
    topic, group = unique_name("share-state"), unique_name("share-state-grp")
    create_topics(kafka_bootstrap, [topic])
    before = now_ms()
    with share_consumer_in_group(kafka_bootstrap, group, [topic]) as consumer:
        wait_initialised(consumer, kafka_bootstrap, [topic])
        wait_for(lambda: consumer.poll_some(0.5) == 0 and consumer.received, timeout=30, what="all read")
    after = now_ms()
    described = share_offsets(kafka_bootstrap, group)
    ledger = ShareStateLedger()
    with open_gateway(kafka_bootstrap) as gateway:
        ledger.apply_many(gateway.read_share_state_log({}))
        names = gateway.topic_names_by_id()
        snapshot = gather_snapshot(
            gateway, ClusterKnowledge(ObservedTimes()), datetime.now(UTC), lambda g: g == group
        )
    assert ledger.corrupt == 0 and ledger.unknown == 0
    logged = {
        (s.partition.topic, s.partition.partition): (s.start_offset, s.changed_ms)
        for s in share_starts(ledger, names).get(group) or ()
    }
    assert {tp: start for tp, (start, _) in logged.items()} == described and described
    [facts] = snapshot.groups
    assert facts.kind is GroupKind.SHARE and not snapshot.warnings
    for offset in facts.offsets:
        assert offset.committed_at is not None and offset.committed_at.source is TimestampSource.OFFSETS_LOG
        at_ms = int(offset.committed_at.at.timestamp() * 1000)
        assert at_ms == logged[(offset.partition.topic, offset.partition.partition)][1]
        assert before - SKEW_MS <= at_ms <= after + SKEW_MS, (before, at_ms, after)

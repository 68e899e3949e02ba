"""FakeKafka answers like the broker (docs/kafka-gateway.md) and writes a log the ledger understands."""

from __future__ import annotations

import pytest

from groupwarden.cleanup.gateway import (
    DescribedGroup,
    KafkaError,
    KafkaGateway,
    KafkaUnavailable,
    OffsetsLogGap,
    OffsetsLogUnavailable,
)
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.testing.fake_kafka import FakeKafka

T0 = 1_700_000_000_000
A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
B0, C0 = TopicPartition("b", 0), TopicPartition("c", 0)
SUBSCRIBED = "GROUP_SUBSCRIBED_TO_TOPIC"
REBALANCING = GroupState.PREPARING_REBALANCE


def describe(fake: FakeKafka, group_id: str) -> DescribedGroup:
    listed = {g.group_id: g for g in fake.list_groups()}
    return fake.describe_groups([listed[group_id]])[group_id]


def ledger_of(fake: FakeKafka, ledger: OffsetsLedger | None = None) -> OffsetsLedger:
    ledger = ledger or OffsetsLedger()
    for r in fake.read_offsets_log(ledger.positions):
        ledger.apply(r.key, r.value, r.timestamp_ms, r.partition, r.offset)
    return ledger


def test_implements_the_port() -> None:
    gateway: KafkaGateway = FakeKafka(topics=["a"])
    assert gateway.cluster_id() == "fake-cluster"
    assert gateway.list_topics() == {"a"}


def test_list_and_describe_report_each_kind() -> None:
    fake = FakeKafka(topics=["a", "b", "orders-1", "orders-2", "other"])
    fake.add_group("classic", subscribed=["a", "b"], offsets={A0: 5})
    fake.add_group("rebalancing", subscribed=["a"], state=GroupState.PREPARING_REBALANCE)
    fake.add_group("connect", protocol_type="connect", subscribed=["a"])
    fake.add_group("simple", GroupKind.SIMPLE, offsets={A0: 1})
    fake.add_group("kip848", GroupKind.CONSUMER, subscribed=["a"], regex="orders-.*")
    fake.add_group("share", GroupKind.SHARE)

    listed = {g.group_id: (g.group_type, g.protocol_type, g.state) for g in fake.list_groups()}
    assert listed == {
        "classic": ("classic", "consumer", GroupState.STABLE),
        "rebalancing": ("classic", "consumer", GroupState.PREPARING_REBALANCE),
        "connect": ("classic", "connect", GroupState.STABLE),
        "simple": ("classic", "", GroupState.EMPTY),
        "kip848": ("consumer", "consumer", GroupState.STABLE),
        "share": ("share", "share", GroupState.EMPTY),
    }
    assert describe(fake, "classic").subscribed_topics == {"a", "b"}
    assert describe(fake, "classic").member_count == 1
    assert describe(fake, "rebalancing").subscribed_topics is None  # no member metadata mid-rebalance
    assert describe(fake, "connect").subscribed_topics is None  # opaque protocol
    assert describe(fake, "simple").kind is GroupKind.SIMPLE
    assert describe(fake, "simple").subscribed_topics == frozenset()
    assert describe(fake, "kip848").subscribed_topics == {"a", "orders-1", "orders-2"}
    assert describe(fake, "share").kind is GroupKind.SHARE


def test_describe_of_a_vanished_group_is_dead_with_group_id_not_found() -> None:
    fake = FakeKafka()
    fake.add_group("g")
    [listed] = fake.list_groups()
    assert fake.delete_groups(["g"]) == {"g": None}
    described = fake.describe_groups([listed])["g"]
    assert described.state is GroupState.DEAD
    assert described.error is not None and described.error.name == "GROUP_ID_NOT_FOUND"


def test_delete_groups_only_deletes_empty_groups() -> None:
    fake = FakeKafka()
    fake.add_group("empty", offsets={A0: 1})
    fake.add_group("active", subscribed=["a"])
    fake.add_group("kip848-empty", GroupKind.CONSUMER)
    fake.add_group("kip848-active", GroupKind.CONSUMER, subscribed=["a"])
    result = fake.delete_groups(["empty", "active", "kip848-empty", "kip848-active", "missing"])
    names = {g: None if e is None else e.name for g, e in result.items()}
    assert names == {
        "empty": None,
        "active": "NON_EMPTY_GROUP",
        "kip848-empty": None,
        "kip848-active": "NON_EMPTY_GROUP",
        "missing": "GROUP_ID_NOT_FOUND",
    }
    assert set(fake.groups) == {"active", "kip848-active"}
    assert fake.fetch_offsets(["empty"])["empty"].offsets == {}  # an unknown group has no offsets


@pytest.mark.parametrize(
    ("kwargs", "top", "per_partition"),
    [
        ({"subscribed": ["a"]}, None, {A0: SUBSCRIBED, B0: None}),
        (
            {"subscribed": ["a"], "state": REBALANCING},
            None,
            {A0: SUBSCRIBED, B0: None},
        ),
        (
            {"subscribed": None, "members": 1},
            None,
            {A0: SUBSCRIBED, B0: SUBSCRIBED},
        ),
        ({"protocol_type": "connect", "subscribed": ["a"]}, "NON_EMPTY_GROUP", {}),
        ({"protocol_type": "connect"}, None, {A0: None, B0: None}),
        ({}, None, {A0: None, B0: None}),
        (
            {"kind": GroupKind.CONSUMER, "subscribed": ["a"]},
            None,
            {A0: SUBSCRIBED, B0: None},
        ),
        ({"kind": GroupKind.CONSUMER, "regex": "b.*"}, None, {A0: None, B0: SUBSCRIBED}),
        ({"kind": GroupKind.SIMPLE}, None, {A0: None, B0: None}),
    ],
)
def test_delete_offsets_follows_the_broker(
    kwargs: dict[str, object], top: str | None, per_partition: dict[TopicPartition, str | None]
) -> None:
    fake = FakeKafka(topics=["a", "b"])
    fake.add_group("g", offsets={A0: 1, B0: 2}, **kwargs)  # type: ignore[arg-type]
    error, results = fake.delete_offsets("g", [A0, B0])
    assert (error.name if error else None) == top
    assert {tp: e.name if e else None for tp, e in results.items()} == per_partition
    remaining = set(fake.fetch_offsets(["g"])["g"].offsets)
    assert remaining == {A0, B0} - {tp for tp, e in per_partition.items() if e is None}


def test_delete_offsets_of_a_missing_group_is_group_id_not_found() -> None:
    error, results = FakeKafka().delete_offsets("missing", [A0])
    assert error is not None and error.name == "GROUP_ID_NOT_FOUND" and results == {}


def test_a_hook_brings_a_consumer_back_between_plan_and_apply() -> None:
    fake = FakeKafka(topics=["a"])
    fake.add_group("g", offsets={A0: 1})
    fake.before("delete_groups", lambda f: f.join("g", ["a"]))
    assert fake.delete_groups(["g"])["g"] == KafkaError("NON_EMPTY_GROUP", 68)
    assert fake.delete_offsets("g", [A0])[1][A0] == KafkaError("GROUP_SUBSCRIBED_TO_TOPIC", 86)
    fake.leave("g")
    assert fake.delete_groups(["g"]) == {"g": None}  # the hook ran once


def test_injected_errors_and_unavailability() -> None:
    fake = FakeKafka()
    fake.add_group("g", offsets={A0: 1})
    denied = KafkaError("GROUP_AUTHORIZATION_FAILED", 30)
    fake.fail("g", "fetch", denied)
    fake.fail("g", "delete_group", denied)
    assert fake.fetch_offsets(["g"])["g"].error == denied
    assert fake.delete_groups(["g"])["g"] == denied
    assert fake.calls["fetch_offsets"] == 1
    fake.unavailable = True
    with pytest.raises(KafkaUnavailable):
        fake.list_groups()


def test_the_log_gives_the_ledger_commit_times_and_empty_since() -> None:
    fake = FakeKafka(topics=["a", "b"], now_ms=T0)
    fake.add_group("classic", subscribed=["a"], offsets={A0: 5, A1: 6}, committed_at_ms=T0 - 5000)
    fake.leave("classic", at_ms=T0 - 1000)
    fake.add_group("kip848", GroupKind.CONSUMER, subscribed=["b"], offsets={B0: 3}, committed_at_ms=T0 - 7000)
    fake.leave("kip848", at_ms=T0 - 2000)
    fake.add_group("simple", GroupKind.SIMPLE, offsets={C0: 9}, committed_at_ms=T0 - 3000)

    ledger = ledger_of(fake)
    assert ledger.offset("classic", A0) is not None and ledger.offset("classic", A0).offset == 5  # type: ignore[union-attr]
    assert ledger.offset("classic", A1).commit_time_ms == T0 - 5000  # type: ignore[union-attr]
    assert ledger.group("classic").empty_since_ms == T0 - 1000  # type: ignore[union-attr]
    assert ledger.group("kip848").empty_since_ms == T0 - 2000  # type: ignore[union-attr]
    assert ledger.group("kip848").kind is GroupKind.CONSUMER  # type: ignore[union-attr]
    assert ledger.group("simple").kind is GroupKind.SIMPLE  # type: ignore[union-attr]
    assert ledger.offset("simple", C0).commit_time_ms == T0 - 3000  # type: ignore[union-attr]


def test_the_log_records_subscriptions_and_deletions() -> None:
    fake = FakeKafka(topics=["a", "b"])
    fake.add_group("g", subscribed=["a", "b"], offsets={A0: 1})
    fake.add_group("k", GroupKind.CONSUMER, subscribed=["a"], regex="b.*")
    ledger = ledger_of(fake)
    assert ledger.subscribed_topics("g") == {"a", "b"}
    assert ledger.group("k").consumer_members  # type: ignore[union-attr]
    fake.leave("g")
    fake.delete_groups(["g"])
    ledger = ledger_of(fake, ledger)
    assert "g" not in ledger


def test_a_second_read_from_positions_returns_only_new_records() -> None:
    fake = FakeKafka()
    fake.add_group("g", GroupKind.SIMPLE, offsets={A0: 1})
    ledger = ledger_of(fake)
    fake.commit("g", {A0: 2}, at_ms=T0 + 1)
    new = list(fake.read_offsets_log(ledger.positions))
    assert len(new) == 1 and new[0].timestamp_ms == T0 + 1
    assert list(fake.read_offsets_log({p: fake.log_end(p) for p in range(3)})) == []


def test_reads_end_at_the_end_captured_when_called() -> None:
    fake = FakeKafka()
    fake.commit("g", {A0: 1})
    records = iter(fake.read_offsets_log({}))
    fake.commit("g", {A0: 2})
    assert len(list(records)) == 1


def test_a_truncated_log_is_a_gap_and_an_unreadable_log_is_unavailable() -> None:
    fake = FakeKafka()
    fake.commit("g", {A0: 1})
    fake.commit("g", {A0: 2})
    partition = fake.partition_for("g")
    fake.truncate_log(partition, 2)
    with pytest.raises(OffsetsLogGap) as gap:
        fake.read_offsets_log({partition: 1})
    assert (gap.value.partition, gap.value.position, gap.value.log_start) == (partition, 1, 2)
    assert list(fake.read_offsets_log({})) == []  # from the log start: nothing left
    fake.offsets_log_unavailable = True
    with pytest.raises(OffsetsLogUnavailable):
        fake.read_offsets_log({})


@pytest.mark.parametrize(("group", "partitions", "expected"), [("abc", 50, 96354 % 50), ("", 3, 0)])
def test_partition_for_is_javas_hash(group: str, partitions: int, expected: int) -> None:
    assert FakeKafka(offsets_partitions=partitions).partition_for(group) == expected

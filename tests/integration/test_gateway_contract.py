"""One contract, two implementations of the `KafkaGateway` port: every case runs against `FakeKafka`
(the unit tests' in-memory cluster) and against `KafkaAdminGateway` on the devstack broker, where
real confluent-kafka consumers (classic, KIP-848, share) make the groups. The broker is the truth:
when the fake answers differently, the fake is wrong, and the unit tests built on it with it.

Each case states its expectations once; a `Cluster` makes the same situation on either side (a topic
with records, a simple group, a group whose member left, a group with a member) and hands out the
gateway to ask.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import pytest

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.gateway import DescribedGroup, KafkaGateway, ListedGroup
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from groupwarden.testing.fake_kafka import FakeKafka
from gwtest.kafka import commit_offsets, consumer_in_group, create_topics, empty_group, produce
from gwtest.share import share_consumer_in_group, wait_initialised

# Each topic gets 4 records, 2 per partition: a member that read everything committed offset 2 on both.
RECORDS_PER_PARTITION = 2
KINDS = {"classic": GroupKind.CLASSIC, "consumer": GroupKind.CONSUMER, "share": GroupKind.SHARE}


class Cluster(Protocol):
    gateway: KafkaGateway

    def topic(self, name: str) -> str:
        """A topic of 2 partitions with 2 records in each."""
        ...

    def simple_group(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Offsets committed without joining (an admin commit): a simple group."""
        ...

    def left_group(self, group: str, protocol: str, topics: Sequence[str]) -> None:
        """A classic or KIP-848 member read every record of `topics`, committed and left: Empty."""
        ...

    def member(self, group: str, protocol: str, topics: Sequence[str]) -> AbstractContextManager[None]:
        """A member of `group` (classic, consumer or share protocol) subscribed to `topics` while
        the context lasts; a classic or KIP-848 member has read everything and committed."""
        ...


class FakeCluster:
    def __init__(self) -> None:
        self.fake = FakeKafka()
        self.gateway: KafkaGateway = self.fake

    def topic(self, name: str) -> str:
        self.fake.topics.add(name)
        return name

    def simple_group(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.fake.commit(group, offsets)

    def left_group(self, group: str, protocol: str, topics: Sequence[str]) -> None:
        self.fake.add_group(group, KINDS[protocol], offsets=_read_everything(topics))

    @contextmanager
    def member(self, group: str, protocol: str, topics: Sequence[str]) -> Iterator[None]:
        offsets = _read_everything(topics)  # a share member: the start offsets it initialised
        if group in self.fake.groups:
            self.fake.commit(group, offsets)
            self.fake.join(group, topics, kind=KINDS[protocol])
        else:
            self.fake.add_group(group, KINDS[protocol], subscribed=topics, offsets=offsets)
        yield
        self.fake.leave(group)


class BrokerCluster:
    def __init__(self, bootstrap: str, gateway: KafkaGateway) -> None:
        self.bootstrap = bootstrap
        self.gateway = gateway

    def topic(self, name: str) -> str:
        create_topics(self.bootstrap, [name])
        produce(self.bootstrap, name, 2 * RECORDS_PER_PARTITION)
        return name

    def simple_group(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        commit_offsets(self.bootstrap, group, offsets)

    def left_group(self, group: str, protocol: str, topics: Sequence[str]) -> None:
        messages = 2 * RECORDS_PER_PARTITION * len(topics)
        empty_group(self.bootstrap, group, list(topics), messages=messages, protocol=protocol)

    @contextmanager
    def member(self, group: str, protocol: str, topics: Sequence[str]) -> Iterator[None]:
        if protocol == "share":
            with share_consumer_in_group(self.bootstrap, group, topics) as consumer:
                wait_initialised(consumer, self.bootstrap, topics)
                yield
            return
        expected = 2 * RECORDS_PER_PARTITION * len(topics)
        with consumer_in_group(self.bootstrap, group, topics, protocol=protocol, expected_messages=expected):
            yield


def _read_everything(topics: Sequence[str]) -> dict[tuple[str, int], int]:
    return {(t, p): RECORDS_PER_PARTITION for t in topics for p in (0, 1)}


@pytest.fixture(params=["fake", "broker"])
def cluster(request: pytest.FixtureRequest, kafka_bootstrap: str) -> Iterator[Cluster]:
    if request.param == "fake":
        yield FakeCluster()
        return
    with open_gateway(kafka_bootstrap) as gateway:
        yield BrokerCluster(kafka_bootstrap, gateway)


def listed(gateway: KafkaGateway, groups: Sequence[str]) -> dict[str, ListedGroup]:
    return {g.group_id: g for g in gateway.list_groups() if g.group_id in groups}


def described(gateway: KafkaGateway, groups: Sequence[str]) -> dict[str, DescribedGroup]:
    rows = listed(gateway, groups)
    assert rows.keys() == set(groups), f"not listed: {set(groups) - rows.keys()}"
    return dict(gateway.describe_groups([rows[g] for g in groups]))


def committed(gateway: KafkaGateway, group: str) -> dict[tuple[str, int], int]:
    answer = gateway.fetch_offsets([group])[group]
    assert answer.error is None, answer.error
    return {(tp.topic, tp.partition): info.offset for tp, info in answer.offsets.items()}


def error_name(error: object) -> str | None:
    return None if error is None else str(getattr(error, "name", error))


# -- list and describe ---------------------------------------------------------------------------


def test_every_group_type_is_listed_and_described_alike(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    topic = cluster.topic(unique_name("contract-t"))
    simple, left_classic, left_consumer = (unique_name(n) for n in ("c-simple", "c-left-cl", "c-left-co"))
    active_classic, active_consumer, active_share = (unique_name(n) for n in ("c-cl", "c-co", "c-sh"))
    cluster.simple_group(simple, {(topic, 0): 1})
    cluster.left_group(left_classic, "classic", [topic])
    cluster.left_group(left_consumer, "consumer", [topic])
    with (
        cluster.member(active_classic, "classic", [topic]),
        cluster.member(active_consumer, "consumer", [topic]),
        cluster.member(active_share, "share", [topic]),
    ):
        groups = [simple, left_classic, left_consumer, active_classic, active_consumer, active_share]
        rows = listed(cluster.gateway, groups)
        assert {g: (r.group_type, r.protocol_type, r.state) for g, r in rows.items()} == {
            simple: ("classic", "", GroupState.EMPTY),
            left_classic: ("classic", "consumer", GroupState.EMPTY),
            left_consumer: ("consumer", "consumer", GroupState.EMPTY),
            active_classic: ("classic", "consumer", GroupState.STABLE),
            active_consumer: ("consumer", "consumer", GroupState.STABLE),
            active_share: ("share", "share", GroupState.STABLE),
        }
        answers = described(cluster.gateway, groups)
        assert {
            g: (d.kind, d.state, d.protocol_type, d.member_count, d.subscribed_topics, error_name(d.error))
            for g, d in answers.items()
        } == {
            simple: (GroupKind.SIMPLE, GroupState.EMPTY, "", 0, frozenset(), None),
            left_classic: (GroupKind.CLASSIC, GroupState.EMPTY, "consumer", 0, frozenset(), None),
            left_consumer: (GroupKind.CONSUMER, GroupState.EMPTY, "consumer", 0, frozenset(), None),
            active_classic: (GroupKind.CLASSIC, GroupState.STABLE, "consumer", 1, frozenset({topic}), None),
            active_consumer: (GroupKind.CONSUMER, GroupState.STABLE, "consumer", 1, frozenset({topic}), None),
            active_share: (GroupKind.SHARE, GroupState.STABLE, "share", 1, frozenset({topic}), None),
        }


@pytest.mark.parametrize("group_type", ["classic", "consumer", "share"])
def test_describing_a_group_that_does_not_exist(
    cluster: Cluster, unique_name: Callable[[str], str], group_type: str
) -> None:
    """What a pass sees for a group deleted between its listing and its describe."""
    group = unique_name("c-gone")
    protocol_type = "share" if group_type == "share" else "consumer"
    row = ListedGroup(group, group_type, protocol_type, GroupState.EMPTY)
    answer = cluster.gateway.describe_groups([row])[group]
    assert (answer.state, answer.member_count, error_name(answer.error)) == (
        GroupState.DEAD,
        0,
        "GROUP_ID_NOT_FOUND",
    )


# -- offsets -------------------------------------------------------------------------------------


def test_committed_offsets_of_groups_and_of_a_group_that_does_not_exist(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    topic = cluster.topic(unique_name("contract-off"))
    simple, left = unique_name("c-off-simple"), unique_name("c-off-left")
    cluster.simple_group(simple, {(topic, 0): 1, (topic, 1): 2})
    cluster.left_group(left, "classic", [topic])
    assert committed(cluster.gateway, simple) == {(topic, 0): 1, (topic, 1): 2}
    assert committed(cluster.gateway, left) == {(topic, 0): 2, (topic, 1): 2}
    unknown = unique_name("c-off-unknown")
    answer = cluster.gateway.fetch_offsets([unknown])[unknown]
    assert (dict(answer.offsets), answer.error) == ({}, None)  # no offsets, not an error


# -- DeleteGroups --------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer", "share"])
def test_delete_groups_deletes_empty_groups_and_refuses_the_others(
    cluster: Cluster, unique_name: Callable[[str], str], protocol: str
) -> None:
    topic = cluster.topic(unique_name("contract-del"))
    empty, active, unknown = (unique_name(n) for n in ("c-del-empty", "c-del-active", "c-del-unknown"))
    if protocol == "share":
        with cluster.member(empty, "share", [topic]):
            pass
    else:
        cluster.left_group(empty, protocol, [topic])
    with cluster.member(active, protocol, [topic]):
        answers = cluster.gateway.delete_groups([empty, active, unknown])
        assert {g: error_name(e) for g, e in answers.items()} == {
            empty: None,
            active: "NON_EMPTY_GROUP",
            unknown: "GROUP_ID_NOT_FOUND",
        }
        assert listed(cluster.gateway, [empty, active]).keys() == {active}


def test_delete_groups_deletes_a_simple_group_and_its_offsets(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    topic = cluster.topic(unique_name("contract-del-simple"))
    group = unique_name("c-del-simple")
    cluster.simple_group(group, {(topic, 0): 1})
    assert error_name(cluster.gateway.delete_groups([group])[group]) is None
    assert listed(cluster.gateway, [group]) == {}
    assert committed(cluster.gateway, group) == {}


# -- OffsetDelete --------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_offset_delete_refuses_subscribed_topics_and_deletes_the_others(
    cluster: Cluster, unique_name: Callable[[str], str], protocol: str
) -> None:
    subscribed, left = cluster.topic(unique_name("contract-sub")), cluster.topic(unique_name("contract-gone"))
    group = unique_name("c-offdel")
    cluster.simple_group(group, {(left, 0): 1, (left, 1): 1})  # a topic it read before
    with cluster.member(group, protocol, [subscribed]):
        error, answers = cluster.gateway.delete_offsets(
            group, [TopicPartition(subscribed, 0), TopicPartition(left, 0)]
        )
        assert error is None
        assert {tp: error_name(e) for tp, e in answers.items()} == {
            TopicPartition(subscribed, 0): "GROUP_SUBSCRIBED_TO_TOPIC",
            TopicPartition(left, 0): None,
        }
        assert committed(cluster.gateway, group) == {(subscribed, 0): 2, (subscribed, 1): 2, (left, 1): 1}


def test_offset_delete_on_an_empty_group_deletes_and_on_a_missing_group_fails_as_a_whole(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    topic = cluster.topic(unique_name("contract-offdel-empty"))
    group, unknown = unique_name("c-offdel-empty"), unique_name("c-offdel-unknown")
    cluster.left_group(group, "classic", [topic])
    error, answers = cluster.gateway.delete_offsets(group, [TopicPartition(topic, 1)])
    assert (error, {tp: error_name(e) for tp, e in answers.items()}) == (
        None,
        {TopicPartition(topic, 1): None},
    )
    assert committed(cluster.gateway, group) == {(topic, 0): 2}
    error, answers = cluster.gateway.delete_offsets(unknown, [TopicPartition(topic, 0)])
    assert (error_name(error), dict(answers)) == ("GROUP_ID_NOT_FOUND", {})


# -- share groups --------------------------------------------------------------------------------


def test_share_offsets_are_read_and_deleted_only_while_the_share_group_is_empty(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    topic = cluster.topic(unique_name("contract-share"))
    group, unknown = unique_name("c-share"), unique_name("c-share-unknown")
    with cluster.member(group, "share", [topic]):
        started = cluster.gateway.fetch_share_offsets([group])[group]
        assert started.error is None and {(tp.topic, tp.partition) for tp in started.offsets} == {
            (topic, 0),
            (topic, 1),
        }
        assert set(started.topic_ids) == {topic}
        error, answers = cluster.gateway.delete_share_offsets(group, [topic])
        assert (error_name(error), dict(answers)) == ("NON_EMPTY_GROUP", {})
    error, answers = cluster.gateway.delete_share_offsets(group, [topic])
    assert (error_name(error), {t: error_name(e) for t, e in answers.items()}) == (None, {topic: None})
    assert dict(cluster.gateway.fetch_share_offsets([group])[group].offsets) == {}
    error, answers = cluster.gateway.delete_share_offsets(unknown, [topic])
    assert (error_name(error), dict(answers)) == ("GROUP_ID_NOT_FOUND", {})
    absent = cluster.gateway.fetch_share_offsets([unknown])[unknown]
    assert (dict(absent.offsets), absent.error) == ({}, None)


def test_share_offsets_are_set_on_an_empty_or_absent_share_group_only(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    """What restore does: AlterShareGroupOffsets creates an absent share group."""
    topic = cluster.topic(unique_name("contract-alter"))
    absent, active = unique_name("c-alter-absent"), unique_name("c-alter-active")
    wanted = {TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 0}
    error, answers = cluster.gateway.alter_share_offsets(absent, wanted)
    assert (error_name(error), {tp: error_name(e) for tp, e in answers.items()}) == (
        None,
        dict.fromkeys(wanted),
    )
    row = listed(cluster.gateway, [absent])[absent]
    assert (row.group_type, row.state) == ("share", GroupState.EMPTY)
    offsets = cluster.gateway.fetch_share_offsets([absent])[absent].offsets
    assert {tp: info.offset for tp, info in offsets.items()} == wanted
    with cluster.member(active, "share", [topic]):
        error, answers = cluster.gateway.alter_share_offsets(active, wanted)
        assert (error_name(error), dict(answers)) == ("NON_EMPTY_GROUP", {})


def test_the_offset_apis_of_one_kind_on_a_group_of_the_other(
    cluster: Cluster, unique_name: Callable[[str], str]
) -> None:
    """OffsetFetch/OffsetDelete on a share group, the share-offset APIs on a consumer group."""
    topic = cluster.topic(unique_name("contract-cross"))
    share, classic = unique_name("c-cross-share"), unique_name("c-cross-classic")
    with cluster.member(share, "share", [topic]):
        pass
    cluster.left_group(classic, "classic", [topic])
    fetched = cluster.gateway.fetch_offsets([share])[share]
    assert (dict(fetched.offsets), error_name(fetched.error)) == ({}, None)  # share state is elsewhere
    error, answers = cluster.gateway.delete_offsets(share, [TopicPartition(topic, 0)])
    assert (error_name(error), dict(answers)) == ("GROUP_ID_NOT_FOUND", {})
    shared = cluster.gateway.fetch_share_offsets([classic])[classic]
    assert (dict(shared.offsets), error_name(shared.error)) == ({}, None)
    error, answers = cluster.gateway.delete_share_offsets(classic, [topic])
    assert (error_name(error), dict(answers)) == ("GROUP_ID_NOT_FOUND", {})

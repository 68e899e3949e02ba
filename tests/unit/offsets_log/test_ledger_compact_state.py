"""The ledger's compact storage (offsets_log/_state.py): packed entries and dense partition lists
give back exactly what they stored, whatever the values (the fallbacks keep what does not fit);
classic members' subscriptions are parsed once per distinct bytes (a bounded memo), and undecodable
ones stay unknown."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwarden.offsets_log import _state
from groupwarden.offsets_log._state import (
    UNDECODABLE_ENTRY,
    Entry,
    SubscriptionMemo,
    get_partition,
    new_partitions,
    pack_entry,
    partition_count,
    partition_items,
    pop_partition,
    put_partition,
    unpack_entry,
)
from groupwarden.offsets_log.codec import parse_consumer_protocol_subscription
from groupwarden.offsets_log.ledger import OffsetsLedger
from groupwarden.offsets_log.records import ClassicMember, GroupMetadataKey, GroupMetadataValue
from groupwarden.testing.offsets_log_encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_value,
)

pytestmark = pytest.mark.unit

TOPIC_ID = bytes(range(16))
TABLE: list[bytes | None] = [None, TOPIC_ID]


@pytest.mark.parametrize(
    "entry",
    [
        (0, -1, "", 0, -1, None),
        (12345, 0, "", 1_764_000_000_000, -1, None),
        (2**63 - 1, 2**31 - 2, "", 2**44 - 1, -1, TOPIC_ID),
        (7, 3, "", 1_764_000_000_000, -1, TOPIC_ID),
    ],
)
def test_plain_commits_pack_into_one_int_and_back(entry: Entry) -> None:
    index = 0 if entry[5] is None else 1
    stored = pack_entry(entry, index)
    assert isinstance(stored, int)
    assert unpack_entry(stored, TABLE) == entry


@pytest.mark.parametrize(
    "entry",
    [
        UNDECODABLE_ENTRY,  # commit time unknown
        (5, -1, "meta", 1_764_000_000_000, -1, None),  # metadata
        (5, -1, "", 1_764_000_000_000, 1_765_000_000_000, None),  # explicit expiry (v1)
        (-1, -1, "", 1_764_000_000_000, -1, None),  # negative offset
        (5, -2, "", 1_764_000_000_000, -1, None),  # leader epoch below -1
        (5, -1, "", -3, -1, None),  # negative time
        (5, -1, "", 2**44, -1, None),  # time past the packed width
    ],
)
def test_anything_else_stays_a_tuple(entry: Entry) -> None:
    assert pack_entry(entry, 0) is entry
    assert unpack_entry(entry, TABLE) == entry


def test_random_entries_round_trip() -> None:
    rng = random.Random(3)
    for _ in range(20_000):
        entry: Entry = (
            rng.choice([-1, 0, rng.randrange(2**63)]),
            rng.choice([-2, -1, 0, rng.randrange(2**31 - 1)]),
            rng.choice(["", "", "x"]),
            rng.choice([None, -5, 0, rng.randrange(2**45)]),
            rng.choice([-1, -1, 5]),
            rng.choice([None, TOPIC_ID]),
        )
        assert unpack_entry(pack_entry(entry, 0 if entry[5] is None else 1), TABLE) == entry


def test_partitions_behave_like_a_dict_whatever_the_partition_numbers() -> None:
    rng = random.Random(5)
    for _ in range(300):
        model: dict[int, int] = {}
        first = rng.choice([0, 3, 63, 64, 1000, -1])
        partitions = new_partitions(first, 1)
        model[first] = 1
        for step in range(rng.randint(1, 60)):
            partition = rng.choice([rng.randrange(8), rng.randrange(200), -1, 5000])
            if rng.random() < 0.3:
                assert pop_partition(partitions, partition) == (model.pop(partition, None) is not None)
            else:
                partitions = put_partition(partitions, partition, step)
                model[partition] = step
            assert sorted(partition_items(partitions)) == sorted(model.items())
            assert partition_count(partitions) == len(model)
            for probe in (-1, 0, 7, 150, 5000):
                assert get_partition(partitions, probe) == model.get(probe)


def test_dense_partitions_are_a_list_and_the_int_zero_is_an_entry() -> None:
    partitions = new_partitions(0, 0)
    for p in range(1, 6):
        partitions = put_partition(partitions, p, 0)
    assert isinstance(partitions, list)
    assert partition_count(partitions) == 6
    assert get_partition(partitions, 0) == 0
    assert pop_partition(partitions, 0) and not pop_partition(partitions, 0)


# ---------------------------------------------------------------------------------------------
# Subscriptions: parsed once per distinct bytes
# ---------------------------------------------------------------------------------------------


class CountingParser:
    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def __call__(self, data: bytes) -> frozenset[str] | None:
        self.calls.append(data)
        return parse_consumer_protocol_subscription(data)


@pytest.fixture
def parser(monkeypatch: pytest.MonkeyPatch) -> CountingParser:
    """A fresh memo for the ledger, and a parser that counts its calls."""
    counting = CountingParser()
    monkeypatch.setattr(_state, "parse_consumer_protocol_subscription", counting)
    monkeypatch.setattr(_state, "subscribed_topics", SubscriptionMemo().topics)
    return counting


def rebalance(generation: int, subscriptions: list[bytes]) -> GroupMetadataValue:
    members = tuple(
        ClassicMember(f"m{i}", None, "client", "/h", 300_000, 45_000, sub, b"")
        for i, sub in enumerate(subscriptions)
    )
    return GroupMetadataValue("consumer", generation, "range", "m0", 1_000 + generation, members, 3)


def test_a_subscription_seen_again_over_rebalances_is_parsed_once(parser: CountingParser) -> None:
    orders = encode_consumer_protocol_subscription(["orders"], 1)
    both = encode_consumer_protocol_subscription(["orders", "payments"], 3)
    ledger = OffsetsLedger()
    key = encode_key(GroupMetadataKey("g"))
    for generation in range(1, 8):
        subscriptions = [orders, orders, both] if generation % 2 else [both, orders]
        ledger.apply(key, encode_value(rebalance(generation, subscriptions)), 1_000, 0, generation)
        assert ledger.subscribed_topics("g") == frozenset({"orders", "payments"})
    assert sorted(parser.calls) == sorted([orders, both])
    view = ledger.group("g")
    assert view is not None
    assert [m.subscribed_topics for m in view.classic_members] == [  # generation 7's members
        frozenset({"orders"}),
        frozenset({"orders"}),
        frozenset({"orders", "payments"}),
    ]


def test_undecodable_subscriptions_stay_unknown_and_are_not_remembered(parser: CountingParser) -> None:
    memo = SubscriptionMemo()
    for _ in range(3):
        assert memo.topics(b"\x00") is None  # truncated
        assert memo.topics(b"") is None
        assert memo.topics(b"\xff\xff\x00\x00\x00\x00") is None  # negative version
    assert len(memo) == 0
    assert len(parser.calls) == 9
    # In a ledger: one undecodable member makes the group's topics unknown, at every rebalance.
    good = encode_consumer_protocol_subscription(["orders"])
    ledger = OffsetsLedger()
    key = encode_key(GroupMetadataKey("g"))
    for generation in range(1, 4):
        ledger.apply(key, encode_value(rebalance(generation, [good, b"\x00"])), 1_000, 0, generation)
        assert ledger.subscribed_topics("g") is None
    ledger.apply(key, encode_value(rebalance(4, [good])), 1_000, 0, 4)
    assert ledger.subscribed_topics("g") == frozenset({"orders"})


def test_the_memo_is_bounded_in_entries_and_bytes(parser: CountingParser) -> None:
    subscriptions = [encode_consumer_protocol_subscription([f"topic-{i}"]) for i in range(10)]
    by_count = SubscriptionMemo(max_entries=3)
    for sub in subscriptions:
        assert by_count.topics(sub) == parse_consumer_protocol_subscription(sub)
        assert len(by_count) <= 3
    size = len(subscriptions[0])
    by_bytes = SubscriptionMemo(max_bytes=2 * size)
    for sub in subscriptions:
        assert by_bytes.topics(sub) == parse_consumer_protocol_subscription(sub)
        assert len(by_bytes) <= 2
    # Cleared, not wrong: a forgotten subscription is parsed again, to the same topics.
    parser.calls.clear()
    assert by_count.topics(subscriptions[0]) == frozenset({"topic-0"})
    assert parser.calls == [subscriptions[0]]


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=12), st.sampled_from([encode_consumer_protocol_subscription(["a", "b"])])
        ),
        max_size=30,
    )
)
def test_the_memo_answers_what_the_codec_answers(blobs: list[bytes]) -> None:
    memo = SubscriptionMemo(max_entries=4)
    for blob in blobs + blobs:
        assert memo.topics(blob) == parse_consumer_protocol_subscription(blob)

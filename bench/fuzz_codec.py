"""Fuzz the `__consumer_offsets` codec and `OffsetsLedger.apply` with random and mutated records.

Seeds are valid records of every type and version from `offsets_log.encoder` (OffsetCommit keys
type 0/1 and values v0-v4, GroupMetadata v0-v4 with consumer subscriptions v0-v3, KIP-848 group /
member / regex records, streams topologies (type 23), `__share_group_state` snapshot/update records,
undecoded types, tombstones) plus the first records of
`offsets_log.synthetic`. Each input is a seed mutated 1-4 times (bit flips, interesting int16/32/64
and varint lengths such as 2^31 written over any position, insertions, deletions, truncation,
splices, swapped record-type or version prefixes, values paired with another type's key) or, one
time in ten, random bytes.

Every input goes through `decode_key`/`decode_value`, the fast path (`read_offset_commit_key`/
`read_offset_commit_value` on any bytes), `parse_consumer_protocol_subscription`,
`OffsetsLedger.apply` (with extreme record timestamps too) and, as a `__share_group_state` record,
`decode_share_state_key`/`decode_share_state_value` and `ShareStateLedger.apply`; every 500 inputs
the ledger answers every query a snapshot makes (`snapshot_from_ledger`, `committed_offsets`).
Allowed outcomes: a typed record, an unknown record type/version, a tombstone, `CorruptRecordError`.
Anything else is a crash; an input over `--time-limit` is a hang; over `--memory-limit` traced
bytes, a memory finding.

    .venv/bin/python -m bench.fuzz_codec --inputs 1000000 --seed 1 [--out bench/out/fuzz_codec]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.fuzzlib import Campaign, print_report
from groupwarden.offsets_log import (
    ClassicMember,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsLedger,
    StreamsCopartitionGroup,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    StreamsTopicInfo,
    Tombstone,
    UnknownRecord,
    UnknownRecordKey,
    decode_key,
    decode_value,
    parse_consumer_protocol_subscription,
    read_offset_commit_key,
    read_offset_commit_value,
)
from groupwarden.offsets_log.rows import group_from_row, group_row
from groupwarden.offsets_log.share_state import (
    ShareSnapshotValue,
    ShareStateBatch,
    ShareStateKey,
    ShareStateLedger,
    ShareUpdateValue,
    decode_share_state_key,
    decode_share_state_value,
)
from groupwarden.offsets_log.snapshot import snapshot_from_ledger
from groupwarden.testing.offsets_log_encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_share_state_key,
    encode_share_state_value,
    encode_unknown_key,
    encode_value,
)
from groupwarden.testing.synthetic_offsets_log import synthetic_log

Record = tuple[bytes | None, bytes | None]

MAX_INPUT = 8192
TYPED_SEEDS = 183  # the hand-built records first, then the synthetic log
LEDGER_BATCH = 500
NOW = datetime(2026, 11, 23, tzinfo=UTC)
T = 1_763_856_000_000  # 2025-11-23 in ms

INT16 = (0, 1, -1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, -0x8000, 0x7FFE, 16, 25, 24)
INT32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0xFFFF, 0x10000, 1 << 24, 16, 127)
INT64 = (0, -1, 1, 2**63 - 1, -(2**63), 2**62, 253_402_300_800_000, -62_135_596_800_001, T)
# Unsigned varints: 0 (null), 1 (empty), 127, 128, 2^31, 2^32 - 1, 2^35 - 1, and a 6-byte (invalid) one.
VARINTS = (
    b"\x00",
    b"\x01",
    b"\x7f",
    b"\x80\x01",
    b"\x80\x80\x80\x80\x08",
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x7f",
    b"\xff\xff\xff\xff\xff\x01",
    b"\x81\x80\x80\x80\x00",
)
TIMESTAMPS = (T, T, T, T, 0, -1, 2**63 - 1, -(2**63), 253_402_300_800_000, -62_135_596_800_001)


def seed_records() -> list[Record]:
    """Valid records of every type and version the codec knows, and some it does not."""
    topic_id = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)
    seeds: list[Record] = []
    for rtype in (0, 1):
        key = encode_key(OffsetCommitKey("app-consumer-group", "orders.events", 7, rtype))
        seeds.append((key, None))
        for version in range(5):
            for metadata in ("", "m", "x" * 130):  # v4: short metadata fast path and the general path
                for tid in (None, topic_id) if version >= 4 else (None,):
                    value = OffsetCommitValue(
                        42,
                        3 if version >= 3 else -1,
                        metadata,
                        T,
                        T + 1 if version == 1 else -1,
                        tid,
                        version,
                    )
                    seeds.append((key, encode_value(value)))
        seeds.append((key, b"\x00\x05" + b"\x00" * 30))  # a future value version
    group_key = encode_key(GroupMetadataKey("classic-group"))
    seeds.append((group_key, None))
    for version in range(5):
        for sub_version in range(4):
            subscription = encode_consumer_protocol_subscription(["orders", "payments"], sub_version, b"ud")
            members = tuple(
                ClassicMember(
                    f"member-{m}",
                    "static-1" if m else None,
                    "client",
                    "/10.0.0.1",
                    300_000,
                    45_000,
                    subscription,
                    b"\x00\x01assignment",
                )
                for m in range(2)
            )
            for protocol_type, group_members in (
                ("consumer", members),
                ("consumer", ()),
                ("", ()),
                ("connect", members[:1]),
            ):
                value = GroupMetadataValue(
                    protocol_type,
                    5,
                    "range" if group_members else None,
                    "member-0" if group_members else None,
                    T if version >= 2 else -1,
                    group_members,
                    version,
                )
                seeds.append((group_key, encode_value(value)))
    cg_key = encode_key(ConsumerGroupMetadataKey("kip848-group"))
    seeds += [
        (cg_key, None),
        (cg_key, encode_value(ConsumerGroupMetadataValue(7))),
        (cg_key, encode_value(ConsumerGroupMetadataValue(7, 99, T))),
    ]
    member_key = encode_key(ConsumerGroupMemberMetadataKey("kip848-group", "member-1"))
    classic = ClassicMemberMetadata(
        45_000, (ClassicProtocol("range", b"\x00\x01"), ClassicProtocol("cooperative-sticky", b""))
    )
    for regex, classic_metadata in ((None, None), ("audit-.*", None), (None, classic)):
        value = ConsumerGroupMemberMetadataValue(
            "instance",
            "rack",
            "client",
            "/10.0.0.2",
            ("orders", "audit"),
            regex,
            60_000,
            "uniform",
            classic_metadata,
        )
        seeds.append((member_key, encode_value(value)))
    seeds.append((member_key, None))
    regex_key = encode_key(ConsumerGroupRegularExpressionKey("kip848-group", "audit-.*"))
    seeds += [
        (regex_key, encode_value(ConsumerGroupRegularExpressionValue(("audit-eu", "audit-us"), 3, T))),
        (regex_key, None),
    ]
    topology_key = encode_key(StreamsGroupTopologyKey("streams-app"))
    repartition = StreamsTopicInfo("streams-app-store-repartition", 4, 3, (("cleanup.policy", "delete"),))
    topology = StreamsGroupTopologyValue(
        5,
        (
            StreamsSubtopology("0", ("words",), repartition_sink_topics=(repartition.name,)),
            StreamsSubtopology(
                "1",
                source_topic_regex=("audit-.*",),
                state_changelog_topics=(StreamsTopicInfo("streams-app-store-changelog"),),
                repartition_source_topics=(repartition,),
                copartition_groups=(StreamsCopartitionGroup((0,), (0,), (0,)),),
            ),
        ),
    )
    seeds += [
        (topology_key, encode_value(topology)),
        (topology_key, encode_value(StreamsGroupTopologyValue(1))),
        (topology_key, b"\x00\x07" + b"\x01" * 8),  # a future version
        (topology_key, None),
    ]
    # __share_group_state records (offsets_log.share_state): every input is decoded as one too.
    share_topic = uuid.UUID(int=0xBDB0_BAB2_4807_431F_A3DA_44A4_0A98_39D0)
    snapshot_key = encode_share_state_key(ShareStateKey(0, "share-group", share_topic, 3))
    update_key = encode_share_state_key(ShareStateKey(1, "share-group", share_topic, 3))
    batch = (ShareStateBatch(10, 12, 2, 1),)
    seeds += [
        (snapshot_key, encode_share_state_value(ShareSnapshotValue(2, 1, 0, 10, T, T + 1, batch, 3))),
        (snapshot_key, None),
        (update_key, encode_share_state_value(ShareUpdateValue(2, 0, 12, batch))),
        (update_key, encode_share_state_value(ShareUpdateValue(2, 0, -1))),
        (update_key, None),
    ]
    for rtype in (4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 300, -1):
        key = encode_unknown_key(rtype, "other-group", b"\x00\x02m1")
        seeds += [(key, b"\x00\x00" + b"\x01" * 20), (key, None)]
    assert len(seeds) == TYPED_SEEDS, len(seeds)
    for key_bytes, value_bytes, *_ in itertools.islice(synthetic_log(2000, 200, partitions=8, seed=3), 2000):
        seeds.append(
            (
                None if key_bytes is None else bytes(key_bytes),
                None if value_bytes is None else bytes(value_bytes),
            )
        )
    return seeds


def _put(data: bytearray, rng: random.Random, raw: bytes) -> None:
    """Overwrite at a random position (growing the buffer if needed) or insert."""
    position = rng.randrange(len(data) + 1)
    if rng.random() < 0.7:
        data[position : position + len(raw)] = raw
    else:
        data[position:position] = raw


def mutate(data: bytearray, rng: random.Random, seeds: list[Record]) -> None:
    choice = rng.randrange(12)
    if choice == 0 and data:
        position = rng.randrange(len(data))
        data[position] ^= 1 << rng.randrange(8)
    elif choice == 1 and data:
        data[rng.randrange(len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF))
    elif choice == 2:
        _put(data, rng, rng.choice(INT16).to_bytes(2, "big", signed=True))
    elif choice == 3:
        _put(data, rng, rng.choice(INT32).to_bytes(4, "big", signed=True))
    elif choice == 4:
        _put(data, rng, rng.choice(INT64).to_bytes(8, "big", signed=True))
    elif choice == 5:
        _put(data, rng, rng.choice(VARINTS))
    elif choice == 6:
        _put(data, rng, rng.randbytes(rng.randrange(1, 17)))
    elif choice == 7 and data:
        start = rng.randrange(len(data))
        del data[start : start + rng.randrange(1, 17)]
    elif choice == 8:
        del data[rng.randrange(len(data) + 1) :]
    elif choice == 9 and data:
        start = rng.randrange(len(data))
        chunk = data[start : start + rng.randrange(1, 65)]
        _put(data, rng, bytes(chunk) * rng.randrange(1, 4))
    elif choice == 10:  # splice with another seed's bytes
        other = rng.choice(seeds)[rng.randrange(2)] or b""
        cut = rng.randrange(len(data) + 1)
        data[cut:] = other[rng.randrange(len(other) + 1) :]
    elif len(data) >= 2:  # the record type / value version prefix
        data[0:2] = rng.choice(INT16 + tuple(range(0, 26))).to_bytes(2, "big", signed=True)
    if len(data) > MAX_INPUT:
        del data[MAX_INPUT:]


def make_input(rng: random.Random, seeds: list[Record]) -> Record:
    if rng.random() < 0.1:  # plain random bytes, type prefixes biased to known ones
        key = rng.choice((0, 1, 2, 3, 5, 16, 8)).to_bytes(2, "big") + rng.randbytes(rng.randrange(30))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(60))
        return key, value
    # Two thirds from the hand-built records of every type and version, a third from the synthetic log.
    key, value = rng.choice(seeds[:TYPED_SEEDS] if rng.random() < 0.67 else seeds[TYPED_SEEDS:])
    if rng.random() < 0.1:  # a value of another record type under this key
        value = rng.choice(seeds)[1]
    parts = [bytearray(key) if key is not None else None, bytearray(value) if value is not None else None]
    for _ in range(rng.randrange(1, 5)):
        which = 0 if rng.random() < 0.2 else 1
        part = parts[which]
        if part is not None:
            mutate(part, rng, seeds)
    if rng.random() < 0.01:
        parts[rng.randrange(2)] = None
    return (None if parts[0] is None else bytes(parts[0]), None if parts[1] is None else bytes(parts[1]))


def exercise(
    key: bytes | None,
    value: bytes | None,
    ledger: OffsetsLedger,
    timestamp: int,
    offset: int,
    share_ledger: ShareStateLedger,
) -> str:
    """Every codec entry point on one record; the outcome of the typed decode."""
    outcome = "null-key"
    if key is not None:
        try:
            decoded_key = decode_key(key)
        except CorruptRecordError:
            outcome = "corrupt-key"
        else:
            try:
                decoded = decode_value(decoded_key, value)
            except CorruptRecordError:
                outcome = "corrupt-value"
            else:
                if isinstance(decoded, Tombstone):
                    outcome = "tombstone"
                elif isinstance(decoded_key, UnknownRecordKey) or isinstance(decoded, UnknownRecord):
                    outcome = "unknown-type-or-version"
                else:
                    outcome = f"decoded:{type(decoded).__name__}"
        with contextlib.suppress(CorruptRecordError):
            read_offset_commit_key(key)
    if value is not None:
        with contextlib.suppress(CorruptRecordError):
            read_offset_commit_value(value)
        topics = parse_consumer_protocol_subscription(value)
        if topics is not None and not isinstance(topics, frozenset):
            raise TypeError(f"subscription topics: {topics!r}")
    ledger.apply(key, value, timestamp, offset % 8, offset)
    if key is not None:  # the same bytes as a __share_group_state record
        with contextlib.suppress(CorruptRecordError):
            share_key = decode_share_state_key(key)
            if isinstance(share_key, ShareStateKey):
                decode_share_state_value(share_key, value)
    share_ledger.apply(key, value, timestamp, 0, offset)
    return outcome


def query(ledger: OffsetsLedger) -> str:
    """What a snapshot and the audit ask the ledger (timestamps become datetimes here)."""
    snapshot_from_ledger(ledger, NOW)
    for group in ledger.groups():
        ledger.committed_offsets(group)
        ledger.subscribed_topics(group)
        view = ledger.group(group)
        if view is not None:  # the audit's row form (streams topologies included)
            group_from_row(group_row(view, ledger.offsets(group)))
    return "ledger-queries"


def run(
    inputs: int,
    seed: int,
    *,
    time_limit: float = 2.0,
    memory_limit: int = 1 << 20,
    out: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> Campaign:
    rng = random.Random(seed)
    seeds = seed_records()
    campaign = Campaign(time_limit, memory_limit, out)
    ledger = OffsetsLedger()
    share_ledger = ShareStateLedger()
    for number in range(inputs):
        key, value = make_input(rng, seeds)
        timestamp = rng.choice(TIMESTAMPS)
        size = len(key or b"") + len(value or b"")
        campaign.run(
            exercise,
            key,
            value,
            ledger,
            timestamp,
            number,
            share_ledger,
            size=size,
            show=lambda k=key, v=value, t=timestamp: f"key={k!r} value={v!r} timestamp={t}",
        )
        if number % LEDGER_BATCH == LEDGER_BATCH - 1 or number == inputs - 1:
            campaign.run(query, ledger, size=0, show=lambda: "ledger queries after the last batch")
            ledger = OffsetsLedger()
            share_ledger = ShareStateLedger()
        if progress is not None and number % 100_000 == 0:
            progress(number)
    return campaign


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=2.0, help="seconds per input (a hang)")
    parser.add_argument("--memory-limit", type=int, default=1 << 20, help="traced bytes per input")
    parser.add_argument("--out", type=Path, help="write summary.json and findings.jsonl here")
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}; {len(seed_records())} seed records; seed {args.seed}", flush=True
    )
    campaign = run(
        args.inputs,
        args.seed,
        time_limit=args.time_limit,
        memory_limit=args.memory_limit,
        out=args.out,
        progress=lambda n: print(f"  ... {n:,}", flush=True),
    )
    summary = campaign.report(f"fuzz_codec seed {args.seed}")
    print_report(summary, campaign.findings)
    sys.exit(1 if campaign.finding_count else 0)


if __name__ == "__main__":
    main()

"""A synthetic `__consumer_offsets` log in the exact wire format (for benchmarks and tests).

A realistic mix, written with `encoder`: OffsetCommit v3/v4 (and a few legacy type-0 keys) over
many groups, offset tombstones, classic GroupMetadata whose groups empty out and come back,
KIP-848 member/epoch/regex records with member tombstones, assignment records the codec does not
decode, deleted groups, and a few corrupt keys. Deterministic for a seed; streamed, so 10M+
records never sit in memory at once.
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Iterator
from typing import Final

from groupwarden.offsets_log.ledger import LogRecord
from groupwarden.offsets_log.records import (
    ClassicMember,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groupwarden.testing.offsets_log_encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_unknown_key,
    encode_value,
)

T0: Final = 1_700_000_000_000
STEP_MS: Final = 3  # log time advances 3 ms per record: 10M records span ~8 hours


def _partition(group: str, partitions: int) -> int:
    return zlib.crc32(group.encode()) % partitions


def synthetic_log(
    records: int, groups: int, *, partitions: int = 50, seed: int = 7, t0_ms: int = T0
) -> Iterator[LogRecord]:
    """At least `records` records (the last batch completes) of `groups` groups over `partitions`
    partitions, in per-partition log order."""
    rng = random.Random(seed)
    topics = [f"team-{i % 97}.service-{i}.events" for i in range(max(50, groups // 5))]
    topic_ids = {t: uuid.UUID(int=rng.getrandbits(128)) for t in topics}
    kinds = []
    for g in range(groups):
        draw = rng.random()
        kind = "kip848" if draw < 0.2 else "classic" if draw < 0.8 else "simple"
        assigned = [(t, rng.choice((1, 3, 6, 12))) for t in rng.sample(topics, rng.choice((1, 1, 2, 3)))]
        kinds.append((f"app-{g % 311}-consumer-group-{g}", kind, assigned))
    next_offset = [0] * partitions
    committed: dict[tuple[str, str, int], int] = {}
    emitted = 0

    def record(group: str, key: bytes | None, value: bytes | None, ts: int) -> LogRecord:
        nonlocal emitted
        p = _partition(group, partitions)
        offset = next_offset[p]
        next_offset[p] += 1
        emitted += 1
        return (key, value, ts, p, offset)

    while emitted < records:
        ts = t0_ms + emitted * STEP_MS
        group, kind, assigned = kinds[rng.randrange(groups)]
        roll = rng.random()
        batch: list[LogRecord] = []
        if roll < 0.85:  # commits of every assigned partition of one topic (or their tombstones)
            topic, count = assigned[rng.randrange(len(assigned))]
            tombstone = roll > 0.835
            for p in range(count):
                legacy = rng.random() < 0.01
                key = encode_key(OffsetCommitKey(group, topic, p, 0 if legacy else 1))
                if tombstone:
                    batch.append(record(group, key, None, ts))
                    continue
                ck = (group, topic, p)
                offset = committed[ck] = committed.get(ck, rng.randrange(10**9)) + rng.randrange(1, 5000)
                v4 = rng.random() < 0.25
                value = OffsetCommitValue(
                    offset, rng.randrange(50), "", ts, -1, topic_ids[topic] if v4 else None, 4 if v4 else 3
                )
                batch.append(record(group, key, encode_value(value), ts))
        elif roll < 0.851:
            batch.append(record(group, b"\x00\x01\x00\x7f" + b"x" * 3, b"\x00\x03", ts))  # corrupt key
        elif kind == "classic":
            if roll > 0.998:
                batch.append(record(group, encode_key(GroupMetadataKey(group)), None, ts))  # group deleted
            else:
                count = rng.choice((0, 0, 1, 2, 3))  # empties out often, then comes back
                members = tuple(
                    ClassicMember(
                        f"consumer-{group}-{m}-{uuid.UUID(int=rng.getrandbits(128))}",
                        None,
                        f"consumer-{group}-{m}",
                        f"/10.1.{m}.{rng.randrange(255)}",
                        300_000,
                        45_000,
                        encode_consumer_protocol_subscription([t for t, _ in assigned], 3),
                        b"\x00\x03" + b"\x00" * 40,
                    )
                    for m in range(count)
                )
                metadata = GroupMetadataValue(
                    "consumer", rng.randrange(1000), "range" if members else None, None, ts, members, 3
                )
                batch.append(record(group, encode_key(GroupMetadataKey(group)), encode_value(metadata), ts))
        elif kind == "kip848":
            member_key = encode_key(ConsumerGroupMemberMetadataKey(group, f"m-{rng.randrange(3)}"))
            if rng.random() < 0.4:
                batch.append(record(group, member_key, None, ts))
            else:
                regex = "audit-.*" if rng.random() < 0.1 else None
                names = tuple(t for t, _ in assigned)
                member = ConsumerGroupMemberMetadataValue(
                    None, None, "client", "/10.2.0.1", names, regex, 60_000
                )
                batch.append(record(group, member_key, encode_value(member), ts))
                if regex:
                    resolved = ConsumerGroupRegularExpressionValue(("audit-eu", "audit-us"), 1, ts)
                    regex_key = encode_key(ConsumerGroupRegularExpressionKey(group, regex))
                    batch.append(record(group, regex_key, encode_value(resolved), ts))
            epoch = encode_value(ConsumerGroupMetadataValue(rng.randrange(99)))
            batch.append(record(group, encode_key(ConsumerGroupMetadataKey(group)), epoch, ts))
            assignment = encode_unknown_key(8, group, b"\x00\x04m-01")
            batch.append(record(group, assignment, b"\x00\x00" + b"\x01" * 30, ts))
        yield from batch

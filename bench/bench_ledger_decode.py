"""Benchmark: decode + apply throughput of the `__consumer_offsets` ledger on one core.

Generates a realistic log with the encoder (mostly OffsetCommit v3/v4 over many groups, classic
GroupMetadata with members, KIP-848 member/epoch/regex records, tombstones, undecoded assignment
records), then times `OffsetsLedger.apply_many` over it and reports records/s and peak RSS.

    .venv/bin/python bench/bench_ledger_decode.py [--records 1000000] [--groups 10000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import resource
import sys
import time
import uuid

from groupwarden.offsets_log import (
    ClassicMember,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    GroupMetadataKey,
    GroupMetadataValue,
    LogRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsLedger,
    decode_key,
    decode_value,
)
from groupwarden.offsets_log.encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_unknown_key,
    encode_value,
)

OFFSETS_PARTITIONS = 50
T0 = 1_700_000_000_000


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def generate(n: int, n_groups: int, seed: int) -> list[LogRecord]:
    rng = random.Random(seed)
    topics = [f"team-{i % 97}.service-{i}.events" for i in range(max(50, n_groups // 5))]
    topic_ids = {t: uuid.UUID(int=rng.getrandbits(128)) for t in topics}
    groups: list[tuple[str, str, list[tuple[str, int]]]] = []
    for g in range(n_groups):
        draw = rng.random()
        group_topics = rng.sample(topics, rng.choice((1, 1, 1, 2, 3)))
        groups.append(
            (
                f"app-{g % 311}-consumer-group-{g}",
                "kip848" if draw < 0.2 else "classic" if draw < 0.8 else "simple",
                [(t, rng.choice((1, 3, 6, 12, 12, 24))) for t in group_topics],
            )
        )
    key_cache: dict[tuple[str, str, int], bytes] = {}
    next_offset = [0] * OFFSETS_PARTITIONS
    committed: dict[tuple[str, str, int], int] = {}
    records: list[LogRecord] = []

    def emit(group: str, key: bytes, value: bytes | None, ts: int) -> None:
        partition = hash(group) % OFFSETS_PARTITIONS
        records.append((key, value, ts, partition, next_offset[partition]))
        next_offset[partition] += 1

    while len(records) < n:
        ts = T0 + len(records) * 3
        group, kind, assigned = groups[rng.randrange(n_groups)]
        roll = rng.random()
        if roll < 0.86:  # a commit of every assigned partition of one topic, or a tombstone
            topic, partitions = assigned[rng.randrange(len(assigned))]
            tombstone = roll > 0.84
            for p in range(partitions):
                ck = (group, topic, p)
                key = key_cache.get(ck)
                if key is None:
                    key = key_cache[ck] = encode_key(OffsetCommitKey(group, topic, p))
                if tombstone:
                    emit(group, key, None, ts)
                    continue
                offset = committed[ck] = committed.get(ck, rng.randrange(10**9)) + rng.randrange(1, 5000)
                v4 = rng.random() < 0.25
                commit = OffsetCommitValue(
                    offset, rng.randrange(50), "", ts, -1, topic_ids[topic] if v4 else None, 4 if v4 else 3
                )
                emit(group, key, encode_value(commit), ts)
        elif kind == "classic":
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
                for m in range(rng.choice((0, 1, 2, 3, 5)))
            )
            metadata = GroupMetadataValue(
                "consumer",
                rng.randrange(1000),
                "range" if members else None,
                None,
                ts,
                members,
                3 + (roll > 0.97),
            )
            emit(group, encode_key(GroupMetadataKey(group)), encode_value(metadata), ts)
        elif kind == "kip848":
            member_key = encode_key(ConsumerGroupMemberMetadataKey(group, f"m-{rng.randrange(4)}"))
            if rng.random() < 0.25:
                emit(group, member_key, None, ts)
            else:
                regex = "audit-.*" if rng.random() < 0.1 else None
                names = tuple(t for t, _ in assigned)
                member = ConsumerGroupMemberMetadataValue(
                    None, None, "client", "/10.2.0.1", names, regex, 60_000
                )
                emit(group, member_key, encode_value(member), ts)
                if regex:
                    resolved = ConsumerGroupRegularExpressionValue(("audit-eu", "audit-us"), 1, ts)
                    emit(
                        group,
                        encode_key(ConsumerGroupRegularExpressionKey(group, regex)),
                        encode_value(resolved),
                        ts,
                    )
            emit(
                group,
                encode_key(ConsumerGroupMetadataKey(group)),
                encode_value(ConsumerGroupMetadataValue(rng.randrange(99))),
                ts,
            )
            emit(
                group, encode_unknown_key(8, group, b"\x00\x04m-01"), b"\x00\x00" + b"\x01" * 30, ts
            )  # assignment
        else:  # simple groups only commit
            continue
    del records[n:]
    return records


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile the apply loop")
    args = parser.parse_args()

    t = time.perf_counter()
    records = generate(args.records, args.groups, args.seed)
    gen_s = time.perf_counter() - t
    gc.collect()
    rss_before = rss_mib()
    print(f"python {sys.version.split()[0]}; generated {len(records):,} records in {gen_s:.1f}s")

    ledger = OffsetsLedger()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
    t, cpu = time.perf_counter(), time.process_time()
    ledger.apply_many(records)
    apply_s, apply_cpu = time.perf_counter() - t, time.process_time() - cpu
    if args.profile:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    rss_after = rss_mib()

    print(
        f"apply_many: {len(records) / apply_cpu:,.0f} records/s of CPU time ({apply_cpu:.2f}s; "
        f"wall clock {len(records) / apply_s:,.0f}/s); "
        f"records={ledger.records:,} tombstones={ledger.tombstones:,} unknown={ledger.unknown:,} "
        f"corrupt={ledger.corrupt:,}"
    )
    print(
        f"state: {ledger.group_count:,} groups, {ledger.offset_count:,} live offsets; "
        f"peak RSS {rss_after:.0f} MiB (after generating the log: {rss_before:.0f} MiB, "
        f"ledger adds ~{rss_after - rss_before:.0f} MiB)"
    )

    sample = records[:200_000]
    t = time.process_time()
    for key, value, *_ in sample:
        if key is not None:
            decode_value(decode_key(key), value)
    decode_s = time.process_time() - t
    print(f"typed decode_key+decode_value only: {len(sample) / decode_s:,.0f} records/s")

    t = time.process_time()
    for _ in range(3):
        for g in ledger.groups():
            ledger.group(g)
            ledger.offsets(g)
    query_s = (time.process_time() - t) / 3
    print(f"query group()+offsets() for every group: {query_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()

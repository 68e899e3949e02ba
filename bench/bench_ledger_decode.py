"""Benchmark: decode + apply throughput of the `__consumer_offsets` ledger on one core.

Takes a realistic log from `testing.synthetic_offsets_log` (the generator the Spark benches use: mostly
OffsetCommit v3/v4 over many groups, classic GroupMetadata with members, KIP-848 member/epoch/regex
records, tombstones, undecoded assignment records, a few corrupt keys), then times
`OffsetsLedger.apply_many` over it and reports records/s and peak RSS.

    .venv/bin/python -m bench.bench_ledger_decode [--records 1000000] [--groups 10000] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import itertools
import pstats
import resource
import sys
import time

from groupwarden.offsets_log import LogRecord, OffsetsLedger, decode_key, decode_value
from groupwarden.offsets_log.records import CorruptRecordError
from groupwarden.testing.synthetic_offsets_log import synthetic_log


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def generate(n: int, n_groups: int, seed: int) -> list[LogRecord]:
    # The same generator as the Spark benches and tests, held in memory so only apply is timed.
    return list(itertools.islice(synthetic_log(n, n_groups, seed=seed), n))


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
            with contextlib.suppress(CorruptRecordError):  # the log has a few, as the ledger counts
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

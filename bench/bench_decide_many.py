"""Benchmark: `decide_many` CPU time for N policies that all select the same groups
(docs/benchmarks.md, "Many policies on one cluster").

The cluster pass decides for every policy of a cluster at once; this measures that the pure
decision grows linearly with policies x selected groups (each policy's own plan), not with
policies^2 x groups. Synthetic snapshot: G simple groups with 6 old partitions each, every policy
DryRun with the same rule (every group eligible, every deletion blocked by the other policies).

    .venv/bin/python -m bench.bench_decide_many [--groups 2000] [--policies 1,5,10,20,50]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta

from groupwarden.core.decide_many import decide_many
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
    TimestampSource,
    TopicPartition,
)


def policy(i: int) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": f"p{i:02d}", "namespace": "bench"},
            "spec": {
                "kafka": {"bootstrapServers": "bench:9092"},
                "selector": {"include": ["fleet-*"]},
                "rules": {"simpleGroupOffsetRetention": "1s"},
                "limits": {"maxDeletionRatio": 1},
            },
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--policies", default="1,5,10,20,50")
    args = parser.parse_args()
    now = datetime.now(UTC)
    old = SourcedTime(now - timedelta(days=3), TimestampSource.OFFSETS_LOG)
    groups = tuple(
        GroupFacts(
            f"fleet-{i:06d}",
            GroupKind.SIMPLE,
            GroupState.EMPTY,
            offsets=tuple(CommittedOffset(TopicPartition("t", p), i, old) for p in range(6)),
        )
        for i in range(args.groups)
    )
    snapshot = ClusterSnapshot(now, groups)
    counts = [int(n) for n in args.policies.split(",")]
    policies = [policy(i) for i in range(max(counts))]
    rows = []
    for n in counts:
        began = time.process_time()
        decide_many(policies[:n], snapshot, now)
        seconds = time.process_time() - began
        rows.append({"policies": n, "groups": args.groups, "cpu_seconds": round(seconds, 2)})
        print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

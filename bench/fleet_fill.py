"""Fills a benchmark broker with many standalone (simple) consumer groups, fast.

Each group `<prefix><NNNNNN>` gets committed offsets on `--partitions` partitions of one of the
bench topics, by an admin OffsetCommit (exactly what CI jobs and `assign()` consumers leave
behind). Requests are sent concurrently (confluent-kafka AdminClient futures, `--in-flight` at a
time), so 100k groups take about a minute instead of the ~20 minutes of one commit at a time.
Idempotent: groups that already exist are skipped (ListGroups through kafka-python, which, unlike
librdkafka, lists more than 100k groups).

    .venv/bin/python -m bench.fleet_fill --bootstrap 127.0.0.1:39292 --groups 100000 --partitions 6
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic is not re-exported in the stubs
    AdminClient,
    NewTopic,
)
from kafka.admin import KafkaAdminClient

TOPIC_COUNT = 8


def topics(prefix: str) -> list[str]:
    return [f"{prefix}topic-{i}" for i in range(TOPIC_COUNT)]


def ensure_topics(admin: AdminClient, names: Iterable[str], partitions: int) -> None:
    existing = set(admin.list_topics(timeout=30).topics)
    missing = [
        NewTopic(t, num_partitions=partitions, replication_factor=1) for t in names if t not in existing
    ]
    if missing:
        for future in admin.create_topics(missing).values():
            future.result(timeout=60)


def wait_for_group_coordinator(admin: AdminClient, probe: str, timeout: float = 120.0) -> None:
    """Returns once the group coordinator answers. On a fresh broker the first FindCoordinator
    creates `__consumer_offsets`; with Kafka's default 50 partitions their loading took long enough
    that the first 400 concurrent commits all timed out (seen once: after 120 s, none written;
    commits sent a minute later went through). Describing a group that does not exist writes nothing."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            for future in admin.describe_consumer_groups([probe], request_timeout=10).values():
                future.result(timeout=15)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def existing_groups(bootstrap: str, prefix: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {str(g["group_id"]) for g in admin.list_groups() if str(g["group_id"]).startswith(prefix)}
    finally:
        admin.close()


def fill(
    bootstrap: str,
    prefix: str,
    groups: int,
    partitions: int,
    in_flight: int = 400,
    start: int = 0,
    recommit: bool = False,
) -> tuple[int, float]:
    """Creates the missing groups prefix000000.. (`recommit`: commits again to every group, one
    offset further, as a live cluster's log grows); returns (groups committed, seconds)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 60_000})
    names = topics(prefix)
    ensure_topics(admin, names, partitions)
    wait_for_group_coordinator(admin, f"{prefix}coordinator-probe")
    have = set() if recommit else existing_groups(bootstrap, prefix)
    todo = [i for i in range(start, start + groups) if f"{prefix}{i:06d}" not in have]
    began = time.monotonic()
    pending: list[object] = []
    for n, i in enumerate(todo):
        topic = names[i % TOPIC_COUNT]
        offsets = [CkTopicPartition(topic, p, i + int(recommit)) for p in range(partitions)]
        request = ConsumerGroupTopicPartitions(f"{prefix}{i:06d}", offsets)
        pending.extend(admin.alter_consumer_group_offsets([request]).values())
        if len(pending) >= in_flight or n == len(todo) - 1:
            for future in pending:
                future.result(timeout=120)  # type: ignore[attr-defined]
            pending.clear()
    return len(todo), time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:39292")
    parser.add_argument("--prefix", default="fleet-")
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--in-flight", type=int, default=400)
    parser.add_argument("--recommit", action="store_true", help="commit again to every group")
    args = parser.parse_args()
    created, seconds = fill(
        args.bootstrap, args.prefix, args.groups, args.partitions, args.in_flight, args.start, args.recommit
    )
    print(f"committed to {created} groups in {seconds:.1f} s ({created / max(seconds, 1e-9):.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: snapshot + plan for 1k / 10k / 50k groups vs `kafka-consumer-groups --describe --all-groups`.

Runs against a dedicated broker (never the test devstack's, so tests never see 50k groups):
`bench/run.sh` starts one on 127.0.0.1:39292. The cluster is filled step by step: mostly simple
groups made by batched admin offset commits, plus a few hundred real KIP-848 consumer groups.
At each size it times, in the same run on the same broker:
- `groupwarden plan -o json` as a subprocess (gather incl. reading __consumer_offsets + decide),
  with its peak RSS;
- Kafka's own `kafka-consumer-groups --describe --all-groups`.

    .venv/bin/python -m bench.bench_plan --bootstrap 127.0.0.1:39292 [--sizes 1000,10000,50000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata, TopicPartition

REPO = Path(__file__).resolve().parents[1]
GROUPWARDEN = str(Path(sys.executable).with_name("groupwarden"))
TOPICS = [f"bench-topic-{i}" for i in range(8)]
REAL_GROUPS = 200


def ensure_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    missing = [NewTopic(t, num_partitions=4, replication_factor=1) for t in TOPICS if t not in existing]
    if missing:
        for future in admin.create_topics(missing).values():
            future.result(timeout=60)


def existing_groups(bootstrap: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return sum(1 for g in admin.list_groups() if str(g["group_id"]).startswith("bench-"))
    finally:
        admin.close()


def add_simple_groups(bootstrap: str, start: int, stop: int) -> float:
    """Standalone groups made by admin offset commits (2 partitions each), like CI leftovers."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    began = time.monotonic()
    try:
        for i in range(start, stop):
            topic = TOPICS[i % len(TOPICS)]
            offsets = {TopicPartition(topic, p): OffsetAndMetadata(i, "", -1) for p in (0, 1)}
            admin.alter_group_offsets(f"bench-simple-{i:06d}", offsets)
    finally:
        admin.close()
    return time.monotonic() - began


def add_real_groups(bootstrap: str, count: int) -> None:
    """Real KIP-848 consumer groups: subscribe, get an assignment, commit, leave (Empty)."""
    for i in range(count):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-real-{i:04d}",
                "group.protocol": "consumer",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([TOPICS[i % len(TOPICS)]])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        consumer.commit(
            offsets=[CkTopicPartition(tp.topic, tp.partition, 0) for tp in consumer.assignment()],
            asynchronous=False,
        )
        consumer.close()


def time_plan(bootstrap: str, policy: Path) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    began = time.monotonic()
    result = subprocess.run(
        [GROUPWARDEN, "plan", "-f", str(policy), "--bootstrap-servers", bootstrap, "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.monotonic() - began
    if result.returncode != 0:
        raise RuntimeError(f"groupwarden plan failed: {result.stderr[-2000:]}")
    plan = json.loads(result.stdout)
    failed = [s for s in plan["skipped"] if s["reason"] == "DescribeFailed"]
    if failed:
        # A benchmark of a run that could not judge every group measures nothing.
        raise RuntimeError(f"{len(failed)} groups were not described, e.g. {failed[0]}")
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "seconds": elapsed,
        "groups_matched": plan["summary"]["groupsMatched"],
        "actions": len(plan["actions"]),
        # ru_maxrss of children is the max over all children so far: sizes only grow, so it is this run's.
        "peak_rss_mib": max(peak_kib, before) / 1024,
    }


def time_tool(bootstrap: str, timeout: float) -> float | None:
    tool = REPO / ".devstack" / "bin" / "kafka-consumer-groups"
    began = time.monotonic()
    try:
        subprocess.run(
            [str(tool), "--bootstrap-server", bootstrap, "--describe", "--all-groups"],
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default=os.environ.get("BENCH_BOOTSTRAP", "127.0.0.1:39292"))
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--tool-timeout", type=float, default=1200)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "bench_plan.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    ensure_topics(args.bootstrap)
    if existing_groups(args.bootstrap) == 0:
        add_real_groups(args.bootstrap, REAL_GROUPS)
    policy_dir = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    policy = policy_dir / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "groupwarden.io/v1beta1",
                "kind": "ConsumerGroupPolicy",
                "metadata": {"name": "bench", "namespace": "bench"},
                "spec": {
                    "kafka": {"bootstrapServers": args.bootstrap},
                    "selector": {"include": ["bench-*"]},
                    "rules": {"emptyGroupRetention": "1d", "simpleGroupOffsetRetention": "7d"},
                },
            }
        )
    )
    rows = []
    for size in sizes:
        have = existing_groups(args.bootstrap)
        simple_have = max(0, have - REAL_GROUPS)
        fill_seconds = (
            add_simple_groups(args.bootstrap, simple_have, size - REAL_GROUPS) if have < size else 0.0
        )
        plan = time_plan(args.bootstrap, policy)
        tool_seconds = time_tool(args.bootstrap, args.tool_timeout)
        row = {
            "groups": plan["groups_matched"],
            "plan_seconds": round(plan["seconds"], 2),
            "plan_peak_rss_mib": round(plan["peak_rss_mib"], 1),
            "tool_describe_all_seconds": None if tool_seconds is None else round(tool_seconds, 2),
            "speedup": None if tool_seconds is None else round(tool_seconds / plan["seconds"], 1),
            "fill_seconds": round(fill_seconds, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    print("\n| groups | groupwarden plan (s) | peak RSS (MiB) | tool --describe --all-groups (s) | ratio |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['groups']} | {r['plan_seconds']} | {r['plan_peak_rss_mib']} | "
            f"{r['tool_describe_all_seconds']} | {r['speedup']}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

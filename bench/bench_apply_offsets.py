"""Benchmark: `groupwarden apply` deleting the offsets of many groups (one DeleteOffsets action per
group), beside Kafka's own `kafka-consumer-groups --delete-offsets`, one group at a time.

Two shapes, on the broker named by --bootstrap (default $KAFKA_BOOTSTRAP_SERVERS):
- simple: N standalone groups, each with one partition past `simpleGroupOffsetRetention` and one
  fresh (CI leftovers that committed on two topics);
- stable: N classic groups with a live member each (real confluent-kafka consumers) subscribed to
  `new` only, whose committed offsets of `old` are past `unsubscribedOffsetRetention` (services
  that stopped reading a topic: examples/services-dropped-topics.yaml, KIP-496).

For each: the time and peak RSS of one `apply --yes` (a subprocess, with an audit file and the
suite's test signing key), the groups per second, how many were deleted, and the tool's seconds per
group over a sample. Run: `.venv/bin/python -m bench.bench_apply_offsets --groups 500,5000 --stable 100`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata, TopicPartition

REPO = Path(__file__).resolve().parents[1]
# The command measured; BENCH_GROUPWARDEN="python -m groupwarden.cli" with a PYTHONPATH of another
# checkout measures that one (before/after in the same minutes).
GROUPWARDEN = os.environ.get("BENCH_GROUPWARDEN", str(Path(sys.executable).with_name("groupwarden"))).split()
RETENTION_S = 5  # the stable shape's (its commits are before the members join)


def topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Empty topics: a committed offset 0 is at the log end (restore would not flag it).
    for future in admin.create_topics(
        [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]
    ).values():
        future.result(timeout=60)


def commit(admin: KafkaAdminClient, group: str, topic: str, offset: int = 0) -> None:
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})


def policy_file(path: Path, bootstrap: str, prefix: str, rule: str, retention_s: float = RETENTION_S) -> Path:
    document = {
        "apiVersion": "groupwarden.io/v1beta1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": "bench-offsets", "namespace": "bench"},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "mode": "Enforce",
            "selector": {"include": [f"{prefix}-*"]},
            "rules": {rule: f"{int(retention_s)}s"},
            "limits": {
                "maxDeletionRatio": 1.0,
                "maxGroupDeletionsPerRun": 100000,
                "maxOffsetDeletionsPerRun": 100000,
            },
        },
    }
    path.write_text(yaml.safe_dump(document))
    return path


def timed_apply(policy: Path, audit: Path, env: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    process = subprocess.Popen(
        [
            *GROUPWARDEN,
            "apply",
            "-f",
            str(policy),
            "--yes",
            "-o",
            "json",
            "--no-ledger-cache",
            "--audit-file",
            str(audit),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    stdout = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - began
    outcomes = json.loads(stdout or b"{}").get("outcomes", [])
    deleted = sum(1 for o in outcomes if o["result"] == "Deleted")
    kinds = sorted({o["action"] for o in outcomes})
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "exit": os.waitstatus_to_exitcode(status),
        "actions": len(outcomes),
        "kinds": kinds,
        "deleted": deleted,
        "groups_per_second": round(deleted / seconds, 1) if seconds else None,
    }


def tool_seconds_per_group(bootstrap: str, groups: list[str], topic: str) -> float:
    tool = os.environ.get("KAFKA_CONSUMER_GROUPS", "kafka-consumer-groups")
    began = time.monotonic()
    for group in groups:
        subprocess.run(
            [tool, "--bootstrap-server", bootstrap, "--delete-offsets", "--group", group, "--topic", topic],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return round((time.monotonic() - began) / len(groups), 2)


def run_simple(
    bootstrap: str, count: int, sample: int, env: dict[str, str], work: Path, budget: float
) -> dict[str, Any]:
    """Every group's `old` commit past the retention, its `new` one within it until `apply` is
    done: the retention is the time the commits take plus `budget` (the apply's allowance)."""
    prefix = f"bench-off-{uuid.uuid4().hex[:6]}"
    old, fresh = f"{prefix}-old", f"{prefix}-new"
    topics(bootstrap, [old, fresh])
    groups = [f"{prefix}-{i:05d}" for i in range(count + sample)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        first = time.monotonic()
        for group in groups:
            commit(admin, group, old)
        retention = (time.monotonic() - first) * 1.2 + budget
        time.sleep(max(0.0, first + retention + 1 - time.monotonic()))
        for group in groups:
            commit(admin, group, fresh)
    finally:
        admin.close()
    # The tool's sample first (its groups are then gone from the plan), then apply on the rest.
    tool = tool_seconds_per_group(bootstrap, groups[count:], old) if sample else None
    policy = policy_file(work / f"{prefix}.yaml", bootstrap, prefix, "simpleGroupOffsetRetention", retention)
    result = timed_apply(policy, work / f"{prefix}.jsonl", env)
    return {"shape": "simple", "groups": count, **result, "tool_seconds_per_group": tool}


def run_stable(bootstrap: str, count: int, sample: int, env: dict[str, str], work: Path) -> dict[str, Any]:
    prefix = f"bench-svc-{uuid.uuid4().hex[:6]}"
    old, fresh = f"{prefix}-old", f"{prefix}-new"
    topics(bootstrap, [old, fresh])
    groups = [f"{prefix}-{i:04d}" for i in range(count + sample)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        for group in groups:
            commit(admin, group, old)
    finally:
        admin.close()
    stop = threading.Event()
    consumers: list[Consumer] = []

    def member(group: str) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "session.timeout.ms": 45000,
            }
        )
        consumer.subscribe([fresh])
        consumers.append(consumer)
        while not stop.is_set():
            consumer.poll(0.5)

    threads = [threading.Thread(target=member, args=(g,), daemon=True) for g in groups]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 120
        described = AdminClient({"bootstrap.servers": bootstrap})
        while time.monotonic() < deadline:
            futures = described.describe_consumer_groups(groups)
            states = [f.result(timeout=30).state.name for f in futures.values()]
            if all(s == "STABLE" for s in states):
                break
            time.sleep(1)
        time.sleep(max(0.0, RETENTION_S + 1))
        # The tool's sample first, on groups as live as the others (its groups then have nothing of
        # `old` left, so the plan holds the other `count`).
        tool = tool_seconds_per_group(bootstrap, groups[count:], old) if sample else None
        policy = policy_file(work / f"{prefix}.yaml", bootstrap, prefix, "unsubscribedOffsetRetention")
        result = timed_apply(policy, work / f"{prefix}.jsonl", env)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for consumer in consumers:
            consumer.close()
    return {"shape": "stable", "groups": count, **result, "tool_seconds_per_group": tool}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092"))
    parser.add_argument("--groups", default="500", help="simple groups per run (comma-separated sizes)")
    parser.add_argument("--stable", type=int, default=0, help="Stable groups with a live member (0: none)")
    parser.add_argument("--tool-sample", type=int, default=10, help="groups deleted by Kafka's tool")
    parser.add_argument(
        "--budget", type=float, default=60, help="seconds the apply may take (retention margin)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "operator"))
    from groupwarden.testing.audit_keys import write_key_files

    work = Path(tempfile.mkdtemp(prefix="bench-apply-offsets-"))
    private, _public = write_key_files(work / "keys")
    env = {**os.environ, "GROUPWARDEN_AUDIT_SIGNING_KEY": str(private)}
    results = [
        run_simple(args.bootstrap, int(n), args.tool_sample, env, work, args.budget)
        for n in args.groups.split(",")
        if n
    ]
    if args.stable:
        results.append(run_stable(args.bootstrap, args.stable, args.tool_sample, env, work))
    load = os.getloadavg()
    for result in results:
        print(json.dumps({**result, "load": [round(x, 1) for x in load]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

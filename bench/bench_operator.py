"""Benchmark: the operator with 10 policies over 10k consumer groups.

Measures, with the operator as a process against the devstack's API server and a dedicated broker
(never the test devstack's: tests must not see 10k groups):
- apply-to-first-status latency: from creating 10 policies at once until each has the status of
  its first run (the first one also builds the offsets-log ledger of the whole cluster);
- the run durations of the first and the second cycle (status.lastRun.durationSeconds);
- the operator's RSS (VmRSS / VmHWM from /proc) after the first and the second cycle.

The 10 policies select disjoint slices of 1,000 groups (`bench-op-0<k>*`), DryRun, every group
eligible (simpleGroupOffsetRetention 1s), so each run plans 100 deletions (the default limit).

    .venv/bin/python bench/bench_operator.py [--bootstrap HOST:PORT] [--groups 10000]

Without --bootstrap it starts a broker on 127.0.0.1:39392 (DEVSTACK_DIR=.devstack/bench-operator).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from gwtest.operator import OperatorProcess, create_policy, get_policy, policy_manifest  # noqa: E402

TOPIC = "bench-op-topic"
POLICIES = 10


def start_broker() -> str:
    env = {
        **os.environ,
        "DEVSTACK_DIR": str(REPO / ".devstack" / "bench-operator"),
        "KAFKA_PORT": "39392",
        "KAFKA_CONTROLLER_PORT": "39393",
        "KAFKA_SASL_PORT": "39394",
    }
    subprocess.run([str(REPO / "devstack" / "kafka.sh"), "up"], env=env, check=True)
    return "127.0.0.1:39392"


def fill(bootstrap: str, groups: int) -> float:
    """Standalone groups `bench-op-NNNNN` (2 partitions each) made by admin offset commits."""
    from confluent_kafka.admin import AdminClient, NewTopic

    confluent = AdminClient({"bootstrap.servers": bootstrap})
    if TOPIC not in confluent.list_topics(timeout=30).topics:
        confluent.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])[TOPIC].result(60)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    began = time.monotonic()
    try:
        have = {str(g["group_id"]) for g in admin.list_groups()}
        for i in range(groups):
            group = f"bench-op-{i:05d}"
            if group not in have:
                offsets = {TopicPartition(TOPIC, p): OffsetAndMetadata(i, "", -1) for p in (0, 1)}
                for attempt in range(60):  # a fresh broker creates __consumer_offsets on first use
                    try:
                        admin.alter_group_offsets(group, offsets)
                        break
                    except KafkaError as exc:
                        if not exc.retriable or attempt == 59:
                            raise
                        time.sleep(0.5)
    finally:
        admin.close()
    return time.monotonic() - began


def rss_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def wait_statuses(
    api: client.ApiClient,
    namespace: str,
    names: list[str],
    newer_than: dict[str, str],
    began: float,
    timeout: float = 1800,
) -> dict[str, tuple[float, dict[str, Any]]]:
    """name -> (seconds since `began`, status) once its lastRun is newer than `newer_than[name]`."""
    done: dict[str, tuple[float, dict[str, Any]]] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sorted(done)} reported within {timeout}s")
        for name in names:
            if name in done:
                continue
            status = get_policy(api, namespace, name).get("status") or {}
            last = (status.get("lastRun") or {}).get("startTime", "")
            if last and last > newer_than.get(name, ""):
                done[name] = (time.monotonic() - began, status)
        time.sleep(0.1)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start a dedicated one)")
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG", str(REPO / ".devstack" / "kubeconfig"))
    )
    parser.add_argument("--interval", default="60s", help="spec.interval of the policies")
    parser.add_argument(
        "--layout",
        choices=("disjoint", "overlapping"),
        default="disjoint",
        help="disjoint: policy k selects bench-op-0<k>* (1,000 groups); overlapping: every policy "
        "selects all groups (each run evaluates all 10 policies over all groups)",
    )
    parser.add_argument("--out", type=Path, help="default: bench/out/bench_operator-<layout>.json")
    args = parser.parse_args()

    bootstrap = args.bootstrap or start_broker()
    fill_seconds = fill(bootstrap, args.groups)
    api = config.new_client_from_config(config_file=args.kubeconfig)
    crd = yaml.safe_load((REPO / "crds" / "groupwarden.io_consumergrouppolicies.yaml").read_text())
    try:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    namespace = f"bench-op-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    operator = OperatorProcess(args.kubeconfig, [namespace], workdir / "operator.log").start()
    try:
        time.sleep(3)  # the operator is up and holds the Lease (not part of the measured latency)
        idle = rss_kib(operator.process.pid)  # type: ignore[union-attr]
        names = [f"slice-{k}" for k in range(POLICIES)]
        began = time.monotonic()
        for k, name in enumerate(names):
            create_policy(
                api,
                policy_manifest(
                    name,
                    namespace,
                    bootstrap,
                    interval=args.interval,
                    selector={"include": [f"bench-op-0{k}*" if args.layout == "disjoint" else "bench-op-*"]},
                    rules={"simpleGroupOffsetRetention": "1s"},
                    limits={"maxDeletionRatio": 1},
                ),
            )
        first = wait_statuses(api, namespace, names, {}, began)
        after_first = rss_kib(operator.process.pid)  # type: ignore[union-attr]
        second_began = time.monotonic()
        second = wait_statuses(
            api, namespace, names, {n: s["lastRun"]["startTime"] for n, (_, s) in first.items()}, second_began
        )
        after_second = rss_kib(operator.process.pid)  # type: ignore[union-attr]
    finally:
        operator.stop()
        client.CoreV1Api(api).delete_namespace(namespace)
    latencies = sorted(t for t, _ in first.values())
    result = {
        "groups": args.groups,
        "layout": args.layout,
        "policies": POLICIES,
        "fill_seconds": round(fill_seconds, 1),
        "first_status_seconds": {
            "first": round(latencies[0], 2),
            "median": round(statistics.median(latencies), 2),
            "last": round(latencies[-1], 2),
        },
        "run_seconds_first_cycle": sorted(
            round(s["lastRun"]["durationSeconds"], 2) for _, s in first.values()
        ),
        "run_seconds_second_cycle": sorted(
            round(s["lastRun"]["durationSeconds"], 2) for _, s in second.values()
        ),
        "groups_matched": sorted({s["summary"]["groupsMatched"] for _, s in first.values()}),
        "plan_actions": sorted({len(s["plan"]) for _, s in first.values()}),
        "rss_mib": {
            k: round(v[key] / 1024, 1)
            for k, v in (
                ("idle", idle),
                ("after_first_cycle", after_first),
                ("after_second_cycle", after_second),
            )
            for key in ("VmRSS",)
        },
        "peak_rss_mib": round(after_second["VmHWM"] / 1024, 1),
    }
    out = args.out or REPO / "bench" / "out" / f"bench_operator-{args.layout}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

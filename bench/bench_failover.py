"""Benchmark: the operator on a 100k-group 3-node cluster while the coordinator of a third of
the groups restarts in the middle of a pass (docs/benchmarks.md, "Failover at 100k groups").

A private 3-node KRaft cluster (tests/gwtest/kafka_cluster.py: each node broker+controller,
`__consumer_offsets` with 12 partitions, replication factor 3) is filled with standalone groups
(bench/fleet_fill.py). The operator runs as a process against the devstack's API server with one
DryRun policy selecting every group (`*`). After a first, undisturbed pass:

1. a node is SIGKILLed right after a pass starts and started again at once; when it is back, a
   preferred leader election gives it its `__consumer_offsets` partitions back, so it loads its
   groups (COORDINATOR_LOAD_IN_PROGRESS until done) while the pass waits;
2. measured: how long that node takes to load its groups (from the election until it answers
   ListGroups), the duration of the disturbed pass against the undisturbed ones, the conditions
   the policy's status went through (WaitingForKafka while waiting, never KafkaUnavailable), and
   the operator's RSS (VmRSS / VmHWM).

    PYTHONPATH=tests .venv/bin/python -m bench.bench_failover [--groups 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from kafka.admin import KafkaAdminClient
from kubernetes import client, config

from bench.bench_operator import bench_namespace, pass_seconds, rss_kib
from bench.fleet_fill import fill
from gwtest.kafka_cluster import KafkaCluster, kafka_cluster
from gwtest.operator import ConditionWatch, OperatorProcess, create_policy, policy_manifest

REPO = Path(__file__).resolve().parents[1]
PREFIX = "fo-"


def passes_logged(log_path: Path) -> int:
    return len(pass_seconds(log_path)) if log_path.exists() else 0


def wait_passes(log_path: Path, count: int, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while passes_logged(log_path) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} passes not logged within {timeout}s")
        time.sleep(0.2)


def load_seconds(cluster: KafkaCluster, node: int, timeout: float = 600) -> float:
    """From now until `node` answers ListGroups without an error: it has loaded the groups of
    the partitions it leads again (COORDINATOR_LOAD_IN_PROGRESS until then)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        try:
            admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[node], request_timeout_ms=30_000)
            try:
                admin.list_groups(broker_ids=[node])
                return time.monotonic() - began
            finally:
                admin.close()
        except Exception:  # still loading, or not reachable yet
            time.sleep(0.2)
    raise TimeoutError(f"node {node} did not answer ListGroups within {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2, help="committed partitions per group")
    parser.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG", str(REPO / ".devstack" / "kubeconfig"))
    )
    parser.add_argument("--interval", default="20s", help="spec.interval of the policy")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "bench_failover.json")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    with kafka_cluster(workdir / "cluster") as cluster:
        bootstrap = cluster.bootstrap
        created, fill_s = fill(bootstrap, PREFIX, args.groups, args.partitions, in_flight=400)
        api = config.new_client_from_config(config_file=args.kubeconfig)
        namespace = bench_namespace(api, "bench-fo")
        log_path = workdir / "operator.log"
        operator = OperatorProcess(args.kubeconfig, [namespace], log_path).start()
        watch = ConditionWatch(api, namespace, "everything")
        try:
            create_policy(
                api,
                policy_manifest(
                    "everything",
                    namespace,
                    bootstrap,
                    interval=args.interval,
                    selector={"include": ["*"]},
                    rules={"simpleGroupOffsetRetention": "7d"},
                ),
            )
            wait_passes(log_path, 2)  # the first pass reads the whole log; the second is a steady one
            pid = operator.process.pid  # type: ignore[union-attr]
            steady = rss_kib(pid)
            watch.start()
            # The next pass starts `interval` after the last one ended (a pass takes about a second
            # here): the node that coordinates the most groups dies just before it, and comes back
            # while it runs, so the pass first finds the node refusing connections (until the
            # controller fences it), then its groups loading on their coordinators.
            ended = passes_logged(log_path)
            leaders = cluster.leaders("__consumer_offsets")
            victim = max(cluster.nodes, key=lambda n: sum(1 for leader in leaders.values() if leader == n))
            interval_s = float(args.interval.rstrip("s"))
            time.sleep(max(0.0, interval_s - 1.5))
            killed_at = time.monotonic()
            cluster.kill(victim)
            cluster.up(victim)
            cluster.elect_preferred_leaders()
            elected_at = time.monotonic()
            load_s = load_seconds(cluster, victim)
            wait_passes(log_path, ended + 2)
            after = rss_kib(pid)
        finally:
            watch.stop()
            operator.stop()
            client.CoreV1Api(api).delete_namespace(namespace)
        passes = pass_seconds(log_path)
        result = {
            "groups": created if created else args.groups,
            "fill_seconds": round(fill_s, 1),
            "offsets_partitions": 12,
            "victim_node": victim,
            "restart_seconds": round(elected_at - killed_at, 1),
            "coordinator_load_seconds": round(load_s, 1),
            "pass_seconds": {
                "first": passes[0],
                "steady": passes[1:ended],
                "disturbed": passes[ended],
                "after": passes[ended + 1 :],
            },
            "conditions_seen": watch.seen,
            "rss_mib": {"steady": round(steady["VmRSS"] / 1024, 1), "after": round(after["VmRSS"] / 1024, 1)},
            "peak_rss_mib": round(after["VmHWM"] / 1024, 1),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

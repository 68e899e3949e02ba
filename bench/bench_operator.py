"""Benchmark: the operator with N DryRun policies on a big cluster (one cluster cycle serves them all;
docs/benchmarks.md, "The operator").

Measures, with the operator as a process against the devstack's API server and a dedicated broker
(never the test devstack's: tests must not see 100k groups):
- apply-to-first-status latency: from creating N policies at once until each has the status of
  its first run (the first pass also builds the offsets-log ledger of the selected groups);
- the duration of later runs (status.lastRun.durationSeconds) and of every cluster pass (the
  operator's log), to show that a pass costs what the cluster's groups cost, not policies x groups;
- the operator's RSS (VmRSS / VmHWM from /proc), and when the peak was reached (`rss_samples`:
  VmRSS every 0.5 s, with the policies' first status and later runs in the same clock).

The operator keeps its first-observed clocks in an observation topic of its own
(`bench-observations-<id>`, the operator's default behaviour; deleted at the end);
`--observations memory` runs it with the clocks in memory only (`--observations-topic=`).

Layouts: `disjoint`, policy k selects `bench-op-0<k>*` (1,000 of the 10k groups this script
creates); `overlapping`, every policy selects `--select` (e.g. the 10k groups `fleet-00*` of a
cluster filled by bench/fleet_fill.py). Every selected group is eligible (simpleGroupOffsetRetention
1s) and each run plans 100 deletions (the default limit).

    PYTHONPATH=tests .venv/bin/python -m bench.bench_operator [--bootstrap HOST:PORT] [--groups 10000]
    PYTHONPATH=tests .venv/bin/python -m bench.bench_operator --bootstrap 127.0.0.1:39292 --groups 0 \
        --layout overlapping --select 'fleet-00*' --policies 10 --interval 20s

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
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from kubernetes import client, config

from gwtest.operator import OperatorProcess, create_policy, get_policy, policy_manifest

REPO = Path(__file__).resolve().parents[1]

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


def bench_namespace(api: client.ApiClient, prefix: str) -> str:
    """The CRD (installed when missing) and a new namespace for one benchmark run."""
    crd = yaml.safe_load((REPO / "crds" / "groupwarden.io_consumergrouppolicies.yaml").read_text())
    try:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    return namespace


def rss_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


class RssSampler:
    """VmRSS of the operator every `every` seconds in a thread (when the peak happens)."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        self.pid = pid
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, began: float) -> None:
        def sample() -> None:
            while not self._stop.wait(self.every):
                try:
                    kib = rss_kib(self.pid)["VmRSS"]
                except (OSError, KeyError):
                    return
                self.samples.append((round(time.monotonic() - began, 1), round(kib / 1024, 1)))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def delete_topic(bootstrap: str, topic: str) -> None:
    """The run's observation topic (created by the operator when it kept clocks)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        admin.delete_topics([topic])[topic].result(60)


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


def wait_runs(
    api: client.ApiClient, namespace: str, names: list[str], runs: int, timeout: float = 1800
) -> dict[str, list[float]]:
    """name -> durations (status.lastRun.durationSeconds) of its next `runs` runs."""
    seen: dict[str, list[str]] = {n: [] for n in names}
    durations: dict[str, list[float]] = {n: [] for n in names}
    deadline = time.monotonic() + timeout
    while any(len(d) < runs for d in durations.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs seen within {timeout}s: {durations}")
        for name in names:
            last = (get_policy(api, namespace, name).get("status") or {}).get("lastRun") or {}
            start = last.get("startTime")
            if start and start not in seen[name] and len(durations[name]) < runs:
                seen[name].append(start)
                durations[name].append(round(float(last.get("durationSeconds", 0)), 2))
        time.sleep(0.2)
    return durations


def pass_seconds(log_path: Path) -> list[float]:
    """Durations of the operator's cluster passes, from its log."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        if "due policies" in line and " pass for " in line:
            try:
                message = json.loads(line).get("message", line)
            except ValueError:
                message = line
            found.append(float(message.rsplit(" in ", 1)[1].rstrip("s")))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start a dedicated one)")
    parser.add_argument("--groups", type=int, default=10_000, help="bench-op-* groups to create (0: none)")
    parser.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG", str(REPO / ".devstack" / "kubeconfig"))
    )
    parser.add_argument("--interval", default="60s", help="spec.interval of the policies")
    parser.add_argument("--policies", type=int, default=POLICIES)
    parser.add_argument(
        "--layout",
        choices=("disjoint", "overlapping"),
        default="disjoint",
        help="disjoint: policy k selects bench-op-0<k>* (1,000 groups, at most 10 policies); "
        "overlapping: every policy selects --select",
    )
    parser.add_argument("--select", default="bench-op-*", help="the include glob of overlapping policies")
    parser.add_argument("--later-runs", type=int, default=2, help="later runs to time per policy")
    parser.add_argument(
        "--observations",
        choices=("store", "memory"),
        default="store",
        help="store: clocks kept in a topic of this run (deleted at the end); memory: in the process only",
    )
    parser.add_argument("--out", type=Path, help="default: bench/out/bench_operator-<layout>-<N>.json")
    args = parser.parse_args()

    bootstrap = args.bootstrap or start_broker()
    fill_seconds = fill(bootstrap, args.groups) if args.groups else 0.0
    api = config.new_client_from_config(config_file=args.kubeconfig)
    namespace = bench_namespace(api, "bench-op")
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    log_path = workdir / "operator.log"
    topic = f"bench-observations-{uuid.uuid4().hex[:8]}" if args.observations == "store" else ""
    operator = OperatorProcess(args.kubeconfig, [namespace], log_path, [f"--observations-topic={topic}"])
    operator.start()
    sampler = RssSampler(operator.process.pid)  # type: ignore[union-attr]
    try:
        time.sleep(3)  # the operator is up and holds the Lease (not part of the measured latency)
        idle = rss_kib(operator.process.pid)  # type: ignore[union-attr]
        names = [f"policy-{k:02d}" for k in range(args.policies)]
        began = time.monotonic()
        for k, name in enumerate(names):
            create_policy(
                api,
                policy_manifest(
                    name,
                    namespace,
                    bootstrap,
                    interval=args.interval,
                    selector={"include": [f"bench-op-0{k}*" if args.layout == "disjoint" else args.select]},
                    rules={"simpleGroupOffsetRetention": "1s"},
                    limits={"maxDeletionRatio": 1},
                ),
            )
        sampler.start(began)
        first = wait_statuses(api, namespace, names, {}, began)
        after_first = rss_kib(operator.process.pid)  # type: ignore[union-attr]
        later = wait_runs(api, namespace, names, args.later_runs + 1)
        after_later = rss_kib(operator.process.pid)  # type: ignore[union-attr]
    finally:
        sampler.stop()
        operator.stop()
        client.CoreV1Api(api).delete_namespace(namespace)
        if topic:
            delete_topic(bootstrap, topic)
    latencies = sorted(t for t, _ in first.values())
    passes = pass_seconds(log_path)
    result = {
        "groups_created": args.groups,
        "layout": args.layout,
        "select": args.select if args.layout == "overlapping" else "bench-op-0<k>*",
        "policies": args.policies,
        "interval": args.interval,
        "fill_seconds": round(fill_seconds, 1),
        "first_status_seconds": {
            "first": round(latencies[0], 2),
            "median": round(statistics.median(latencies), 2),
            "last": round(latencies[-1], 2),
        },
        "first_run_seconds": sorted(round(s["lastRun"]["durationSeconds"], 2) for _, s in first.values()),
        # The first entry per policy is its first run (already above); the rest are later runs.
        "later_run_seconds": sorted(d for runs in later.values() for d in runs[1:]),
        "cluster_passes": len(passes),
        "cluster_pass_seconds": {
            "first": passes[0] if passes else None,
            "later_median": statistics.median(passes[1:]) if len(passes) > 1 else None,
            "later_max": max(passes[1:]) if len(passes) > 1 else None,
        },
        "groups_matched": sorted({s["summary"]["groupsMatched"] for _, s in first.values()}),
        "rss_mib": {
            k: round(v["VmRSS"] / 1024, 1)
            for k, v in (
                ("idle", idle),
                ("after_first_status", after_first),
                ("after_later_runs", after_later),
            )
        },
        "peak_rss_mib": round(after_later["VmHWM"] / 1024, 1),
        "observations": args.observations,
        # (seconds since the policies were created, VmRSS MiB), the largest first
        "rss_top_samples": sorted(sampler.samples, key=lambda s: -s[1])[:5],
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    out = args.out or REPO / "bench" / "out" / f"bench_operator-{args.layout}-{args.policies}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

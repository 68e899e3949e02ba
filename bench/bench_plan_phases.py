"""Benchmark: where a `plan`'s time and memory go, phase by phase, in one process
(docs/benchmarks.md, "`plan` at 100k groups").

On a broker filled by `bench/fleet_fill.py` (100k `fleet-*` groups, 15k `other-*`), one cold pass
of the policies given (default: 6 groups `fleet-00000[0-5]`), the phases of `gather_and_decide`
run one after another on the real gateway:
- imports: the process before any Kafka call;
- list: ListGroups of the whole cluster (kept, as the pass keeps it);
- describe: the selected groups ListGroups reports non-Empty;
- ledger: `__consumer_offsets` read from its start into the scoped ledger;
- gather: the rest of the gather (facts dated from the ledger);
- decide: `decide_pass` of every policy;
- render: `plan -o json`'s documents.
Per phase: wall and CPU time, VmRSS after it and its own peak (VmHWM reset before each phase
through /proc/self/clear_refs), and with `--tracemalloc` the Python heap traced at its end and
its traced peak (tracemalloc slows every allocation: its times are not the run's).

    .venv/bin/python -m bench.bench_plan_phases --bootstrap 127.0.0.1:29092 [--include 'fleet-*']
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def status_kib() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def reset_peak() -> bool:
    """VmHWM back to the current RSS (Linux >= 4.0), so each phase reports its own peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class Phases:
    def __init__(self, traced: bool) -> None:
        self.traced = traced
        self.rows: list[dict[str, Any]] = []
        self.peak_resettable = reset_peak()

    def run(self, name: str, step: Callable[[], T]) -> T:
        reset_peak()
        if self.traced:
            tracemalloc.reset_peak()
        began, cpu = time.monotonic(), time.process_time()
        result = step()
        row: dict[str, Any] = {
            "phase": name,
            "seconds": round(time.monotonic() - began, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2),
        }
        kib = status_kib()
        row["rss_mib"] = round(kib["VmRSS"] / 1024, 1)
        row["peak_rss_mib"] = round(kib["VmHWM"] / 1024, 1)
        if self.traced:
            current, peak = tracemalloc.get_traced_memory()
            row["traced_mib"] = round(current / 2**20, 1)
            row["traced_peak_mib"] = round(peak / 2**20, 1)
        self.rows.append(row)
        print(json.dumps(row), file=sys.stderr)
        return result


def policy(bootstrap: str, include: list[str], operator_rules: bool) -> Any:
    """bench_plan_fleet's policy, or (`operator_rules`) bench_operator's: every selected group
    eligible, the default limit of 100 deletions planned."""
    from groupwarden.core.policy import parse_policy

    spec: dict[str, Any] = {"kafka": {"bootstrapServers": bootstrap}, "selector": {"include": include}}
    if operator_rules:
        spec |= {"rules": {"simpleGroupOffsetRetention": "1s"}, "limits": {"maxDeletionRatio": 1}}
    else:
        spec |= {"rules": {"emptyGroupRetention": "1d", "simpleGroupOffsetRetention": "7d"}}
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "phases", "namespace": "bench"},
            "spec": spec,
        }
    )


def by_file(snapshot: tracemalloc.Snapshot, top: int) -> list[dict[str, Any]]:
    """What lives, per source file of the allocation (the innermost frame)."""
    stats = snapshot.statistics("filename")
    return [
        {"mib": round(s.size / 2**20, 1), "count": s.count, "file": str(s.traceback[0].filename)}
        for s in stats[:top]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default=os.environ.get("BENCH_BOOTSTRAP", "127.0.0.1:39292"))
    parser.add_argument("--include", action="append", help="a policy's include glob (repeatable)")
    parser.add_argument(
        "--operator-rules", action="store_true", help="bench_operator's rules (every group eligible)"
    )
    parser.add_argument(
        "--passes", type=int, default=1, help="later passes on the same memory, as the operator runs them"
    )
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument(
        "--top", type=int, default=0, help="with --tracemalloc: the N largest files and lines at the end"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.tracemalloc:
        tracemalloc.start(1)
    phases = Phases(args.tracemalloc)
    imports = status_kib()
    phases.rows.append({"phase": "imports", "rss_mib": round(imports["VmRSS"] / 1024, 1)})

    from groupwarden.adapters.kafka_connect import open_gateway
    from groupwarden.cleanup.cluster_pass import decide_pass, gather_and_decide, scope_of
    from groupwarden.cleanup.gather import ClusterKnowledge, catch_up_ledger, gather_snapshot, listed_kind
    from groupwarden.controller.listing_cache import ListedOnce
    from groupwarden.core.gc_pause import gc_paused
    from groupwarden.core.observed_clocks import ObservedTimes
    from groupwarden.core.render import plan_to_json
    from groupwarden.core.snapshot import GroupState

    phases.rows[0]["rss_mib"] = round(status_kib()["VmRSS"] / 1024, 1)
    policies = [policy(args.bootstrap, args.include or ["fleet-00000[0-5]"], args.operator_rules)]
    scope = scope_of(policies)
    now = datetime.now(UTC)
    raw = open_gateway(args.bootstrap)
    gateway = ListedOnce(raw)  # the first pass's listing, kept for its phases
    memory = ClusterKnowledge(ObservedTimes())
    try:
        with gc_paused():  # as gather_snapshot
            gateway.cluster_id()
            listed = phases.run("list", gateway.list_groups)
            active = [
                g
                for g in listed
                if scope.accepts(g.group_id) and g.state is not GroupState.EMPTY and listed_kind(g)
            ]
            phases.run("describe", lambda: gateway.describe_groups(active) if active else {})
            phases.run("ledger", lambda: catch_up_ledger(gateway, memory, scope))
        snapshot = phases.run("gather", lambda: gather_snapshot(gateway, memory, now, scope))
        with gc_paused():
            cluster_pass = phases.run("decide", lambda: decide_pass(snapshot, policies, now, memory.verdicts))
        phases.run("render", lambda: json.dumps([plan_to_json(p) for p in cluster_pass.plans], indent=2))
        for n in range(2, args.passes + 1):
            del snapshot, cluster_pass  # (the operator keeps neither between passes)
            cluster_pass = phases.run(
                f"pass {n}", lambda: gather_and_decide(ListedOnce(raw), memory, policies, datetime.now(UTC))
            )
            snapshot = cluster_pass.snapshot
    finally:
        gateway.close()
    ledger = memory.ledger
    result: dict[str, Any] = {
        "include": args.include or ["fleet-00000[0-5]"],
        "listed_groups": len(listed),
        "selected_groups": len(snapshot.groups),
        "ledger_groups": 0 if ledger is None else ledger.group_count,
        "log_records": 0 if ledger is None else ledger.records,
        "out_of_scope_records": 0 if ledger is None else ledger.out_of_scope,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "phases": phases.rows,
        "load": os.getloadavg(),
    }
    if args.tracemalloc and args.top:
        traced = tracemalloc.take_snapshot()
        result["live_by_file"] = by_file(traced, args.top)
        result["live_by_line"] = [
            {"mib": round(s.size / 2**20, 1), "count": s.count, "line": str(s.traceback[0])}
            for s in traced.statistics("lineno")[: args.top]
        ]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

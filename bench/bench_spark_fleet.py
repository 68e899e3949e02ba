"""Benchmark: the real-shaped fleet end to end, as a user runs it (docs/benchmarks.md,
"The real-shaped fleet").

1. A broker with `--groups` standalone groups (`bench/fleet_fill.py`: admin OffsetCommits on 6
   partitions each, then once more with `--recommit`, as a live cluster's log grows). Use a
   PRIVATE broker (devstack/kafka.sh with DEVSTACK_DIR and ports of your own), never a shared one.
2. `groupwarden export-offsets-log` of its `__consumer_offsets` (timed: records/s), next to the
   core's live reader over the same log (`OffsetsLogReader.read`, records only).
3. The export copied as `--clusters` clusters (the same records under other `cluster` names).
4. `groupwarden audit --input ... (x clusters) --master local[2]` with default settings, a policy
   selecting `--include`, `--what-if 1d,7d`: wall time, peak RSS of the audit process (the driver)
   and of its JVM, and no traceback in its output (the bench fails otherwise).

    .venv/bin/python -m bench.bench_spark_fleet --bootstrap 127.0.0.1:39592 [--fill] [--groups 100000]

Without a broker, `--synthetic` writes the export step 1-2 would make (the same shape: `--groups`
standalone groups, 6 partitions of one of 8 topics each, committed twice, in the partition of
`__consumer_offsets` Kafka hashes each group to, `--offsets-partitions` of them), dated
`--age-days` ago (old enough for the policy's 7d: every group is eligible, so a whole-fleet
policy plans its limit and defers the rest, one skip per group):

    .venv/bin/python -m bench.bench_spark_fleet --synthetic [--groups 100000] [--include '*']
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from groupwarden.fleet.schema import EXPORT_METADATA

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "groupwarden" / "bench-fleet"
CLI = [sys.executable, "-m", "groupwarden.cli"]

POLICY = """\
apiVersion: groupwarden.io/v1alpha1
kind: ConsumerGroupPolicy
metadata: {name: fleet, namespace: bench}
spec:
  kafka: {bootstrapServers: "127.0.0.1:9"}
  selector: {include: %s, groupTypes: [classic, consumer, simple]}
  rules: {emptyGroupRetention: 7d, simpleGroupOffsetRetention: 7d}
  limits: {maxDeletionRatio: 1.0}
"""


class TreePeak:
    """Peak resident memory of a process and, apart, of its descendants (the JVM and the Python
    workers of a local-mode audit), sampled from /proc every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.own_kib = 0
        self.children_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _rss_kib(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _descendants(self) -> list[int]:
        parents: dict[int, int] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        found, frontier = [], [self.pid]
        while frontier:
            parent = frontier.pop()
            children = [pid for pid, ppid in parents.items() if ppid == parent]
            found.extend(children)
            frontier.extend(children)
        return found

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.own_kib = max(self.own_kib, self._rss_kib(self.pid))
            total = sum(self._rss_kib(pid) for pid in self._descendants())
            self.children_kib = max(self.children_kib, total)


def run_measured(command: list[str], log: Path) -> dict[str, Any]:
    started = time.perf_counter()
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        peak = TreePeak(process.pid)
        code = process.wait()
        peak.stop()
    seconds = time.perf_counter() - started
    text = log.read_text()
    return {
        "exit_code": code,
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak.own_kib / 1024),
        "children_peak_rss_mib": round(peak.children_kib / 1024),
        "traceback": "Traceback" in text or "Exception in thread" in text,
        "log": str(log),
    }


def live_read(bootstrap: str) -> dict[str, Any]:
    from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
    from groupwarden.cleanup.connection_settings import settings_from_file

    reader = OffsetsLogReader(settings_from_file(bootstrap, None))
    started = time.perf_counter()
    records = sum(1 for _ in reader.read({}))
    seconds = time.perf_counter() - started
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds)}


def copy_as_clusters(export: Path, clusters: int, into: Path) -> list[Path]:
    """The export under `clusters` names (`fleet-00`, ...): same records, own `cluster` column."""
    meta = json.loads((export / EXPORT_METADATA).read_text())
    copies = []
    for n in range(clusters):
        name = f"fleet-{n:02d}"
        target = into / name
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(export.glob("partition-*.parquet")):
            table = pq.read_table(path)
            column = pa.array([name] * table.num_rows, pa.string())
            table = table.set_column(table.schema.get_field_index("cluster"), "cluster", column)
            pq.write_table(table, target / path.name)
        (target / EXPORT_METADATA).write_text(json.dumps({**meta, "cluster": name, "clusterId": name}))
        copies.append(target)
    return copies


def java_partition(group_id: str, partitions: int) -> int:
    """`__consumer_offsets` partition of a group: Java `Utils.abs(groupId.hashCode()) % n`."""
    h = 0
    for unit in group_id.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


def synthetic_export(export: Path, groups: int, partitions: int, age_days: float) -> dict[str, Any]:
    """What `fleet_fill.py` (with and without `--recommit`) and `export-offsets-log` leave, written
    with the core's encoder: each group's 6 commits, then 6 more one offset further."""
    from bench.fleet_fill import TOPIC_COUNT, topics
    from groupwarden.fleet.export import write_export
    from groupwarden.offsets_log.ledger import OffsetsLogRecord
    from groupwarden.offsets_log.records import OffsetCommitKey, OffsetCommitValue
    from groupwarden.testing.offsets_log_encoder import encode_key, encode_value

    started = time.perf_counter()
    names = topics("fleet-")
    base_ms = int((time.time() - age_days * 86400) * 1000)
    next_offset = [0] * partitions
    records: list[OffsetsLogRecord] = []
    for round_ in (0, 1):
        for i in range(groups):
            group = f"fleet-{i:06d}"
            partition = java_partition(group, partitions)
            at = base_ms + round_ * 60_000 + i // 1000
            for p in range(6):
                key = encode_key(OffsetCommitKey(group, names[i % TOPIC_COUNT], p))
                value = encode_value(OffsetCommitValue(i + round_, -1, "", at))
                records.append(OffsetsLogRecord(key, value, at, partition, next_offset[partition]))
                next_offset[partition] += 1
    records.sort(key=lambda r: (r.partition, r.offset))
    write_export(export, "fleet", "fleet", names, records)
    return {"records": len(records), "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="a PRIVATE broker (it is filled)")
    parser.add_argument("--synthetic", action="store_true", help="no broker: write the export's shape")
    parser.add_argument("--offsets-partitions", type=int, default=3)
    parser.add_argument("--age-days", type=float, default=30.0)
    parser.add_argument("--fill", action="store_true", help="fill the broker first (fleet_fill.py)")
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--include",
        action="append",
        help="the policy's include globs (default fleet-00*: 10%% of the groups)",
    )
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark settings")
    parser.add_argument("--skip-export", action="store_true", help="audit the last export again")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    args = parser.parse_args()

    result: dict[str, Any] = {"bootstrap": args.bootstrap, "clusters": args.clusters}
    if args.fill:
        from bench.fleet_fill import fill

        created, seconds = fill(args.bootstrap, "fleet-", args.groups, 6)
        _, seconds_again = fill(args.bootstrap, "fleet-", args.groups, 6, recommit=True)
        result["fill"] = {"groups": created, "seconds": round(seconds + seconds_again, 1)}
    export = CACHE / ("synthetic-export" if args.synthetic else "export")
    if args.synthetic and not args.skip_export:
        result["synthetic_export"] = synthetic_export(
            export, args.groups, args.offsets_partitions, args.age_days
        )
        copy_as_clusters(export, args.clusters, CACHE / "clusters")
    elif not args.skip_export:
        if not args.bootstrap:
            parser.error("--bootstrap (a private broker) or --synthetic")
        result["live_reader"] = live_read(args.bootstrap)
        run = run_measured(
            [
                *CLI,
                "export-offsets-log",
                "--bootstrap-servers",
                args.bootstrap,
                "--cluster",
                "fleet",
                "--out",
                str(export),
            ],
            CACHE.parent / "bench-fleet-export.log",
        )
        records = json.loads((export / EXPORT_METADATA).read_text())["records"]
        run.update(records=records, records_per_s=round(records / run["seconds"]))
        result["export"] = run
        copy_as_clusters(export, args.clusters, CACHE / "clusters")
    inputs = sorted((CACHE / "clusters").iterdir())[: args.clusters]
    policy = CACHE / "policy.yaml"
    policy.write_text(POLICY % json.dumps(args.include or ["fleet-00*"]))
    out = CACHE / "audit"
    command = [
        *CLI,
        "audit",
        "-f",
        str(policy),
        "--out",
        str(out),
        "--master",
        args.master,
        "--what-if",
        "1d,7d",
    ]
    for directory in inputs:
        command += ["--input", str(directory)]
    for pair in args.conf:
        command += ["--conf", pair]
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    audit = run_measured(command, CACHE.parent / "bench-fleet-audit.log")
    audit["load_average_before"] = load
    audit["load_average_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    if audit["exit_code"] == 0:
        summary = json.loads((out / "summary.json").read_text())
        clusters = summary["clusters"]
        audit.update(
            records=sum(c["log"]["records"] for c in clusters),
            groups=sum(c["groups"] for c in clusters),
            groups_selected=sum(c["groupsSelected"] for c in clusters),
            offsets=sum(c["offsets"] for c in clusters),
            engine=summary["engine"],
        )
        audit["records_per_s"] = round(audit["records"] / audit["seconds"])
    result["audit"] = audit
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")
    if audit["exit_code"] != 0 or audit["traceback"]:
        raise SystemExit(f"the audit failed (exit {audit['exit_code']}); see {audit['log']}")


if __name__ == "__main__":
    main()

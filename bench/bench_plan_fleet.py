"""Benchmark: `groupwarden plan` on a cluster of 100k+ groups against Kafka's own tool
(docs/benchmarks.md, "`plan` at 100k groups").

On a broker filled by `bench/fleet_fill.py` (100k `fleet-*` simple groups with 6 partitions each,
plus 15k `other-*` groups: ListGroups answers with 115k groups), in one run on the same broker:
- `plan` of a policy selecting the 100k `fleet-*` groups, cold (`--no-ledger-cache`: the whole
  `__consumer_offsets` is read) and warm (the checkpoint of the run before: only the log's tail);
- `plan` of a policy selecting 6 groups, cold and warm;
- a policy selecting every group (`*`: more than 100k groups listed, described and planned);
- `kafka-consumer-groups --describe --all-groups`.
`--checkpoint-runs` instead: repeated `plan`s of small policies on one ledger checkpoint (the CLI's
day-to-day use, docs/benchmarks.md "`plan` at 100k groups"): the
first run (no checkpoint: the whole log is read, the checkpoint written), the same policy again,
one policy added (its groups replayed from the log's start, the checkpoint written again), both
again, and a cold run (`--no-ledger-cache`) of the small policy for comparison.
Each `plan` runs as a subprocess; time is wall clock and CPU time, memory its peak RSS (getrusage of
the child).

    .venv/bin/python -m bench.fleet_fill --groups 100000 && \\
    .venv/bin/python -m bench.fleet_fill --prefix other- --groups 15000 && \\
    .venv/bin/python -m bench.bench_plan_fleet --bootstrap 127.0.0.1:39292
    .venv/bin/python -m bench.bench_plan_fleet --bootstrap 127.0.0.1:39292 --checkpoint-runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.bench_plan import time_tool  # the same oracle run as the issue-3 benchmark

REPO = Path(__file__).resolve().parents[1]
GROUPWARDEN = str(Path(sys.executable).with_name("groupwarden"))


def write_policy(directory: Path, name: str, bootstrap: str, include: list[str]) -> Path:
    path = directory / f"{name}.yaml"
    document = {
        "apiVersion": "groupwarden.io/v1beta1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "selector": {"include": include},
            "rules": {"emptyGroupRetention": "1d", "simpleGroupOffsetRetention": "7d"},
        },
    }
    path.write_text(yaml.safe_dump(document))
    return path


def time_plan(policy: Path | list[Path], cache: Path | None) -> dict[str, Any]:
    args = [GROUPWARDEN, "plan", "-o", "json"]
    for path in policy if isinstance(policy, list) else [policy]:
        args += ["-f", str(path)]
    args += ["--ledger-cache", str(cache)] if cache else ["--no-ledger-cache"]
    # ru_maxrss of children is the largest of any child so far, so each run gets a fresh wrapper
    # process that reports its own child's peak (as /usr/bin/time would).
    wrapper = (
        "import resource, subprocess, sys, time; t = time.monotonic(); "
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE); "
        "sys.stderr.write(r.stderr.decode()[-2000:]) if r.returncode else None; "
        "sys.stdout.write(r.stdout.decode()); "
        "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(f'\\n##{time.monotonic() - t} {u.ru_maxrss} {u.ru_utime + u.ru_stime}', "
        "file=sys.stderr); sys.exit(r.returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", wrapper, *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"plan failed: {result.stderr[-2000:]}")
    seconds, peak, cpu = result.stderr.rsplit("##", 1)[1].split()
    document = json.loads(result.stdout)
    plans = document.get("plans", [document])
    failed = [s for plan in plans for s in plan["skipped"] if s["reason"] == "DescribeFailed"]
    if failed:
        raise RuntimeError(f"{len(failed)} groups were not described, e.g. {failed[0]}")
    matched = [plan["summary"]["groupsMatched"] for plan in plans]
    return {
        "seconds": round(float(seconds), 2),
        # CPU time (user + system) of the run: what a loaded machine inflates least.
        "cpu_seconds": round(float(cpu), 2),
        "peak_rss_mib": round(int(peak) / 1024, 1),
        "groups_matched": matched[0] if len(matched) == 1 else matched,
        "load": round(os.getloadavg()[0], 1),
    }


def checkpoint_runs(work: Path, bootstrap: str) -> dict[str, Any]:
    """Repeated small plans on one checkpoint (see the module docstring)."""
    first = write_policy(work, "small", bootstrap, ["fleet-00000[0-5]"])
    second = write_policy(work, "small-b", bootstrap, ["fleet-00001[0-5]"])
    cache = work / "cache-runs"
    rows: dict[str, Any] = {}
    rows["first_run"] = time_plan(first, cache)
    rows["same_again"] = time_plan(first, cache)
    rows["same_third"] = time_plan(first, cache)
    rows["policy_added"] = time_plan([first, second], cache)
    rows["both_again"] = time_plan([first, second], cache)
    rows["cold_no_checkpoint"] = time_plan(first, None)
    rows["checkpoint_bytes"] = sum(f.stat().st_size for f in cache.glob("*.ledger"))
    return rows


def log_records(bootstrap: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        topic = consumer.list_topics("__consumer_offsets", timeout=30).topics["__consumer_offsets"]
        total = 0
        for partition in topic.partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition("__consumer_offsets", partition), timeout=30
            )
            total += high - low
        return total
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default=os.environ.get("BENCH_BOOTSTRAP", "127.0.0.1:39292"))
    parser.add_argument("--tool-timeout", type=float, default=1800)
    parser.add_argument("--skip-tool", action="store_true")
    parser.add_argument(
        "--checkpoint-runs", action="store_true", help="repeated small plans on one checkpoint"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-plan-fleet-"))
    if args.checkpoint_runs:
        runs = {"log_records": log_records(args.bootstrap), **checkpoint_runs(work, args.bootstrap)}
        out = args.out or REPO / "bench" / "out" / "bench_plan_fleet-checkpoint.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(runs, indent=2))
        print(json.dumps(runs, indent=2))
        return 0
    fleet = write_policy(work, "fleet", args.bootstrap, ["fleet-*"])
    small = write_policy(work, "small", args.bootstrap, ["fleet-00000[0-5]"])
    everything = write_policy(work, "everything", args.bootstrap, ["*"])
    cache = work / "cache"
    rows: dict[str, Any] = {"log_records": log_records(args.bootstrap)}
    rows["fleet_cold"] = time_plan(fleet, None)
    rows["fleet_warm_first"] = time_plan(fleet, cache)  # writes the checkpoint
    rows["fleet_warm"] = time_plan(fleet, cache)
    rows["small_cold"] = time_plan(small, None)
    rows["small_warm_first"] = time_plan(small, work / "cache-small")
    rows["small_warm"] = time_plan(small, work / "cache-small")
    rows["everything_cold"] = time_plan(everything, None)
    if not args.skip_tool:
        rows["tool_describe_all_seconds"] = time_tool(args.bootstrap, args.tool_timeout)
        tool = rows["tool_describe_all_seconds"]
        if tool:
            rows["speedup_fleet_cold"] = round(tool / rows["fleet_cold"]["seconds"], 1)
            rows["speedup_fleet_warm"] = round(tool / rows["fleet_warm"]["seconds"], 1)
    out = args.out or REPO / "bench" / "out" / "bench_plan_fleet.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The decision's steps per selected group, in one process (docs/benchmarks.md, "In-process benches").

The synthetic 1M log (20k groups, 50 partitions, the bench's seed) is audited unit by unit
(`audit_partitions`, every group selected), and the decision's rows of the first `--units` units
(what the stage hands `task_decide.run_step`) are decided by COUNT and, on the rows COUNT judged,
DECIDE, with the whole-fleet bench policy and what-if 1h/1d/7d (bench/bench_spark.py); the
collector is off, as in the tasks. Prints the best CPU time of `--runs` runs per step, per
selected group: COUNT with the common shapes on columns (`fleet/columnar_count.py`) and by the core
alone (`count-core`, every group's facts built), and DECIDE likewise (its skips written to a
`skips` table as in the audit), after checking that both give the same results and skip rows.

    PYTHONPATH=operator:tests:. .venv/bin/python -m bench.bench_decide_steps [--units 8] [--runs 5]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.bench_spark import CACHE, WHAT_IF, bench_now, bench_policies


def decision_rows(units: int, path: Path) -> pa.Table:
    """The decision's rows of the log's first `units` partitions (cached in `path`)."""
    if path.exists():
        return pq.read_table(path)
    from groupwarden.fleet.partition_audit import audit_partitions
    from groupwarden.fleet.task_decide import DECIDE_COLUMNS, DECISION_ROW_KINDS
    from groupwarden.testing.synthetic_offsets_log import synthetic_log
    from gwtest.fleet_records import partition_table

    by_partition: dict[int, list[object]] = {}
    for record in synthetic_log(1_000_000, 20_000, seed=7):
        if record[3] < units:
            by_partition.setdefault(record[3], []).append(record)
    now_ms = int(bench_now().timestamp() * 1000)
    tables = []
    for partition in sorted(by_partition):
        rows = audit_partitions(partition_table("bench", by_partition[partition]), now_ms=now_ms)  # type: ignore[arg-type]
        kinds = pc.is_in(rows.column("row_kind"), value_set=pa.array(DECISION_ROW_KINDS))
        tables.append(rows.filter(kinds).select(list(DECIDE_COLUMNS)))
    table = pa.concat_tables(tables)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--profile",
        choices=("count-core", "count", "decide-core", "decide"),
        help="cProfile one run of a step",
    )
    args = parser.parse_args()

    import pickle

    from groupwarden.core.parts import cluster_cutoffs, merge_counts
    from groupwarden.fleet.decide import decide_settings
    from groupwarden.fleet.sources import ClusterSource
    from groupwarden.fleet.task_decide import Facts, Globals, Step, judged_rows, run_step, selects_id

    rows = decision_rows(args.units, CACHE / f"decide-steps-{args.units}.parquet")
    policies = bench_policies(["*"])
    now = bench_now()
    settings = decide_settings([ClusterSource("bench", "bench")], policies, now, WHAT_IF)
    groups = pc.sum(pc.equal(rows.column("row_kind"), "group")).as_py()

    def count(columns: bool = True) -> tuple[Facts, list[bytes]]:
        facts = Facts(selects_id(settings))
        return facts, [p for _, p in run_step(rows, Step.COUNT, settings, None, 0, facts, columns=columns)]

    facts, payloads = count()
    counted = [pickle.loads(p) for p in payloads]
    # The same COUNT by the core alone (every group's facts built): the fast path's oracle.
    core_facts = Facts(selects_id(settings))
    core = [
        pickle.loads(p) for _, p in run_step(rows, Step.COUNT, settings, None, 0, core_facts, columns=False)
    ]
    assert [(c.counts, c.what_if) for c in counted] == [(c.counts, c.what_if) for c in core]
    assert facts.judged == core_facts.judged
    merged = merge_counts((c.counts for c in counted), len(policies))
    later = judged_rows(rows, facts)
    found = Globals({"bench": merged.totals}, {"bench": cluster_cutoffs(policies, merged)})

    skips = CACHE / "decide-steps-skips"
    skips.mkdir(exist_ok=True)
    writing = replace(settings, skips=str(skips))

    def decide(columns: bool = True) -> list[bytes]:
        return [p for _, p in run_step(later, Step.DECIDE, writing, found, 0, columns=columns)]

    core_decided = [pickle.loads(p) for p in decide(False)]
    core_skips = pq.read_table(skips / "part-00000.parquet")
    assert [pickle.loads(p) for p in decide()] == core_decided
    assert pq.read_table(skips / "part-00000.parquet").equals(core_skips)

    steps = {
        "count-core": lambda: count(False),
        "count": count,
        "decide-core": lambda: decide(False),
        "decide": decide,
    }
    gc.collect()
    gc.disable()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(steps[args.profile])
        pstats.Stats(profile).sort_stats("cumulative").print_stats(45)
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        return
    print(
        f"{args.units} units, {rows.num_rows} rows, {groups} selected groups, "
        f"judged {len(facts.judged.get('bench', ()))}"
    )
    for name, step in steps.items():
        best = float("inf")
        for _ in range(args.runs):
            started = time.process_time()
            step()
            best = min(best, time.process_time() - started)
        print(
            f"{name}: {best:.3f} CPU-s best of {args.runs}, {best / groups * 1e6:.1f} us per selected group"
        )
    print(
        "what-if rows:",
        [(r.rule.value, r.retention, r.groups, r.offsets) for c in counted for r in c.what_if],
    )


if __name__ == "__main__":
    main()

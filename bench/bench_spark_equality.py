"""Equality at scale: the Spark audit vs the core's single-process replay, >= 1M records
(docs/benchmarks.md, "Equality with the core").

The synthetic log (`groupwarden.testing.synthetic_offsets_log`, 1M records and 20k groups by
default, exported as `export-offsets-log` writes it) is audited by the Spark job exactly as
`groupwarden audit --input DIR --what-if ...` runs it (one stage over (cluster, partition) units),
with two overlapping policies (Enforce-style limits, the breaker) and what-if retentions, decided in
the tasks (`fleet/decide.py`: plan.json with its skips merged from the tasks' `skips` table). The
oracle is the core: `ReplayWithHistory` over the same records in log order, then the same
`testing.fleet_oracle.decide_reference` (snapshot, `decide_many`, what-if) over the core's groups
and come-backs.
Asserts, and reports: groups (every `LedgerGroup` and `LedgerOffset`, collected for the check),
offsets, come-backs, plans (plan.json byte for byte, skips included), skip counts and what-if rows;
the run fails on any difference.

    .venv/bin/python -m bench.bench_spark_equality [--records 1000000] [--groups 20000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.bench_spark import CACHE, bench_now, export_records
from groupwarden.fleet.schema import EXPORT_METADATA

POLICIES = """\
apiVersion: groupwarden.io/v1beta1
kind: ConsumerGroupPolicy
metadata: {name: everything, namespace: bench}
spec:
  kafka: {bootstrapServers: "127.0.0.1:9"}
  selector: {include: ["*"], groupTypes: [classic, consumer, simple]}
  rules: {emptyGroupRetention: 1h, simpleGroupOffsetRetention: 1d}
  limits: {maxDeletionRatio: 0.9, maxGroupDeletionsPerRun: 500}
---
apiVersion: groupwarden.io/v1beta1
kind: ConsumerGroupPolicy
metadata: {name: app-1, namespace: bench}
spec:
  kafka: {bootstrapServers: "127.0.0.1:9"}
  selector: {include: ["app-1*"], groupTypes: [classic, consumer]}
  rules: {emptyGroupRetention: 30m}
  limits: {maxDeletionRatio: 1.0}
"""
WHAT_IF = (timedelta(minutes=10), timedelta(hours=1), timedelta(days=1))


def core_audit(directory: Path, source: Any, policies: Any) -> tuple[Any, float]:
    from groupwarden.fleet.cluster_audit import ClusterAudit
    from groupwarden.offsets_log import OffsetsLedger
    from groupwarden.offsets_log.history import ReplayWithHistory
    from groupwarden.offsets_log.snapshot import ledger_answers
    from groupwarden.testing.fleet_oracle import decide_reference

    started = time.perf_counter()
    replay = ReplayWithHistory(OffsetsLedger())
    for key, value, ts, partition, offset in export_records(directory):
        replay.apply(key, value, ts, partition, offset)
    audit = ClusterAudit(source)
    audit.answers = sorted(ledger_answers(replay.ledger), key=lambda a: a[0].group_id)
    audit.comebacks = sorted(replay.comebacks)
    audit.positions = dict(replay.ledger.positions)
    audit.totals_from_answers()
    decide_reference([audit], policies, bench_now(), WHAT_IF)
    return audit, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    args = parser.parse_args()

    import tempfile

    from bench.bench_spark import generate
    from groupwarden.core.policy import load_policy_file
    from groupwarden.fleet.decide import decide_in_tasks, decide_settings
    from groupwarden.fleet.job import (
        DECISION_ROWS,
        _select_all,
        collect_audits,
        collect_selected,
        prepare_decision_rows,
    )
    from groupwarden.fleet.outputs import plans_document, write_plans
    from groupwarden.fleet.session import start_session
    from groupwarden.fleet.sources import read_exports

    directory = CACHE / f"r{args.records}-g{args.groups}-s{args.seed}"
    if (directory / EXPORT_METADATA).exists():
        from groupwarden.fleet.export import convert_export

        convert_export(directory)
    else:
        print(f"generating {args.records:,} records -> {directory}", file=sys.stderr)
        generate(directory, args.records, args.groups, args.seed)
    policy_path = CACHE / "equality-policies.yaml"
    policy_path.write_text(POLICIES)
    policies = list(load_policy_file(policy_path))

    out = Path(tempfile.mkdtemp(prefix="equality-"))
    spark, _ = start_session(args.master, kafka_source=False)
    try:
        started = time.perf_counter()
        records, sources = read_exports(spark, [directory])
        # the audit's own path (`job.run_audit`): COUNT in the stage, the later steps' rows in files
        collected = collect_audits(
            spark,
            records,
            sources,
            _select_all,
            keep_history=True,
            now=bench_now(),
            decide=decide_settings(sources, policies, bench_now(), WHAT_IF),
            decision_rows=prepare_decision_rows(out),
        )
        [spark_audit] = collected.audits
        decide_in_tasks(
            spark, collected.ledgers, [spark_audit], policies, bench_now(), WHAT_IF, out, out / DECISION_ROWS
        )
        write_plans(out / "plan.json", [spark_audit], out / "skips")
        spark_seconds = time.perf_counter() - started
        collected.ledgers.release()
        # every group, offset and come-back, for the check only: the same stage again, returning
        # its rows (the audit's own run hands them to the decision's files instead)
        records, _ = read_exports(spark, [directory])
        every = collect_audits(spark, records, sources, _select_all, keep_history=True, now=bench_now())
        collect_selected(every)
        [all_groups] = every.audits
        every.ledgers.release()
    finally:
        spark.stop()
    core, core_seconds = core_audit(directory, sources[0], policies)
    core_plans = json.dumps(plans_document(core.plans), indent=2) + "\n"
    core_skips = [dict(sorted(Counter(s.reason_code.value for s in p.skipped).items())) for p in core.plans]

    checks = {
        "groups": ({a[0].group_id: a for a in all_groups.answers}, {a[0].group_id: a for a in core.answers}),
        "offsets": (spark_audit.offset_count, core.offset_count),
        "comebacks": (all_groups.comebacks, core.comebacks),
        "positions": (spark_audit.positions, core.positions),
        "plans": ((out / "plan.json").read_text(), core_plans),
        "skip_counts": (spark_audit.skips_by_reason, core_skips),
        "groups_selected": (spark_audit.groups_selected, core.groups_selected),
        "what_if": (spark_audit.what_if, core.what_if),
    }
    result: dict[str, Any] = {
        "records": spark_audit.reach.records,
        "groups": len(core.answers),
        "offsets": core.offset_count,
        "comebacks": len(core.comebacks),
        "planned_actions": [len(p.actions) for p in core.plans],
        "what_if_rows": len(core.what_if),
        "spark_seconds": round(spark_seconds, 2),
        "core_seconds": round(core_seconds, 2),
        "equal": {name: a == b for name, (a, b) in checks.items()},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")
    different = [name for name, same in result["equal"].items() if not same]
    if different:
        sys.exit(f"the Spark audit and the core differ in: {', '.join(different)}")


if __name__ == "__main__":
    main()

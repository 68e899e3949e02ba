"""The fleet job's Python parts without a JVM: the worker function on Arrow tables, the driver's
per-cluster decision, and the outputs (plan.json schema, Parquet tables, self-contained report)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq

from groupwarden.core.overlap import decide_many
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.render import plan_to_json
from groupwarden.fleet.evaluate import collect_clusters, decide_clusters
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.partition_audit import audit_partitions
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.offsets_log.snapshot import snapshot_from_ledger
from groupwarden.testing.synthetic_offsets_log import T0, synthetic_log
from gwtest.fleet_records import partition_table

NOW = datetime.fromtimestamp(T0 / 1000, tz=UTC) + timedelta(days=2)


def policy() -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1alpha1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "fleet", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092"},
                "selector": {"include": ["app-1*"], "groupTypes": ["classic", "consumer", "simple"]},
                "rules": {"emptyGroupRetention": "1h", "simpleGroupOffsetRetention": "1d"},
                "limits": {"maxDeletionRatio": 1.0, "maxGroupDeletionsPerRun": 5},
            },
        }
    )


def test_worker_rows_decide_like_the_core_ledger_and_outputs_are_complete(tmp_path: Path) -> None:
    records = list(synthetic_log(20_000, 400, partitions=4, seed=11))
    rows = []
    for partition in range(4):
        mine = [r for r in records if r[3] == partition]
        # shuffled input: the worker restores log order itself
        rows.extend(audit_partitions(partition_table("east", mine[::-1])).to_pylist())
    source = ClusterSource("east", "cluster-east")
    [audit] = collect_clusters(rows, [source])
    decide_clusters([audit], [policy()], NOW, [timedelta(hours=1), timedelta(days=1)])

    ledger = OffsetsLedger()
    ledger.apply_many(records)
    expected = decide_many(
        [policy()],
        snapshot_from_ledger(
            ledger, NOW, cluster_id="cluster-east", selects_id=lambda g: g.startswith("app-1")
        ),
        NOW,
    )
    assert [plan_to_json(p) for p in audit.plans] == [plan_to_json(p) for p in expected]
    assert audit.plans[0].actions, "the synthetic log must plan something"
    assert audit.reach.records == len(records) and audit.positions == ledger.positions
    assert audit.comebacks, "classic groups of the synthetic log empty out and come back"

    summary = write_outputs(tmp_path, [audit], NOW, {"master": "test"})
    assert json.loads((tmp_path / "plan.json").read_text()) == plan_to_json(expected[0])
    offsets = pq.read_table(tmp_path / "offsets")
    assert offsets.num_rows == ledger.offset_count
    groups = pq.read_table(tmp_path / "groups")
    assert groups.num_rows == ledger.group_count
    assert pq.read_table(tmp_path / "plan").num_rows == len(expected[0].actions)
    what_if = summary["clusters"][0]["whatIf"]
    assert {(w["rule"], w["retention"]) for w in what_if} == {
        (rule, retention)
        for rule in ("emptyGroupRetention", "simpleGroupOffsetRetention")
        for retention in ("1h", "1d")
    }
    report = (tmp_path / "report.html").read_text()
    assert report.count("<svg") >= 3 and "How far back the log reaches" in report
    assert "Fleet overview" in report and "idle-histogram" in report
    # self-contained: nothing is fetched (no src/href to anything, no URL but the SVG namespace)
    assert "src=" not in report and "href=" not in report
    assert "http://" not in report.replace("http://www.w3.org/2000/svg", "") and "https://" not in report

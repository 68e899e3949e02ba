"""The fleet job's Python parts without a JVM: the worker function on Arrow tables, the driver's
per-cluster decision, and the outputs (plan.json schema, Parquet tables, self-contained report)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from groupwarden.core.decide_many import decide_many
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.render import plan_to_json
from groupwarden.fleet.cluster_audit import ClusterAudit
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.partition_audit import audit_partitions
from groupwarden.fleet.sources import ClusterSource
from groupwarden.fleet.task_decide import Globals, Step
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.offsets_log.snapshot import snapshot_from_ledger
from groupwarden.testing.fleet_oracle import collect_reference, decide_reference
from groupwarden.testing.synthetic_offsets_log import T0, synthetic_log
from gwtest.fleet_records import partition_table

NOW = datetime.fromtimestamp(T0 / 1000, tz=UTC) + timedelta(days=2)


def policy() -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
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
    [audit] = collect_reference(rows, [source])
    decide_reference([audit], [policy()], NOW, [timedelta(hours=1), timedelta(days=1)])

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


def _policy(
    name: str, include: str, mode: str, rules: dict[str, str], limits: dict[str, object]
) -> ConsumerGroupPolicy:
    document = policy().model_dump(by_alias=True, mode="json")
    document["metadata"]["name"] = name
    document["spec"].update(mode=mode, rules=rules, limits=limits)
    document["spec"]["selector"]["include"] = [include]
    return parse_policy(document)


@pytest.mark.parametrize(("seed", "judged_only"), [(3, True), (11, False), (11, True)])
def test_the_decision_in_the_tasks_equals_decide_many_without_a_jvm(
    tmp_path: Path, seed: int, judged_only: bool
) -> None:
    """`fleet.decide.decide_with` with the tasks' steps (`task_decide.run_step`) run here on the
    rows `audit_partitions` returns, two clusters packed into tasks as the pipeline packs them:
    plan.json (its skips merged from the tasks' files), skip counts and what-if rows equal
    `decide_many` / `what_if` over the core ledger of each cluster; overlapping policies, limits,
    a breaker tripping for the others, DryRun. `judged_only`: KEYS and DECIDE read only the rows
    of the groups COUNT found a verdict on (`judged_rows`), as the stage writes them."""
    import pickle

    from groupwarden.core.whatif import PausedGroup, what_if
    from groupwarden.fleet.decide import decide_settings, decide_with, prepare_skips
    from groupwarden.fleet.outputs import plans_document, write_plans
    from groupwarden.fleet.task_decide import Facts, judged_rows, run_step, selects_id
    from groupwarden.offsets_log.history import ReplayWithHistory
    from groupwarden.offsets_log.snapshot import ledger_answers, snapshot_from_answers

    policies = [
        policy(),
        _policy(
            "wide",
            "app-*",
            "Enforce",
            {"emptyGroupRetention": "30m", "simpleGroupOffsetRetention": "2h"},
            {"maxDeletionRatio": 1.0, "maxGroupDeletionsPerRun": 7, "maxOffsetDeletionsPerRun": 11},
        ),
        _policy("tripping", "app-2*", "Enforce", {"emptyGroupRetention": "10m"}, {"maxDeletionRatio": 0.05}),
    ]
    retentions = [timedelta(minutes=10), timedelta(days=1)]
    logs = {
        name: list(synthetic_log(8_000, 300, partitions=4, seed=seed + i))
        for i, name in enumerate(["east", "west"])
    }
    sources = [ClusterSource(name, f"cluster-{name}") for name in logs]
    # tasks as the pipeline packs units: each holds some (cluster, partition) units
    tasks: list[list[tuple[str, int]]] = [
        [("east", 0), ("west", 3)],
        [("east", 1), ("east", 2)],
        [("west", 0), ("west", 1), ("west", 2), ("east", 3)],
    ]
    rows = []
    for units in tasks:
        parts = [
            audit_partitions(
                partition_table(c, [r for r in logs[c] if r[3] == p]),
                selects=lambda g: g.startswith("app-"),
                now_ms=int(NOW.timestamp() * 1000),
            )
            for c, p in units
        ]
        rows.append(pa.concat_tables(parts))
    audits = [ClusterAudit(s) for s in sources]
    skips = prepare_skips(tmp_path)
    settings = decide_settings(sources, policies, NOW, retentions, skips)

    later = list(rows)

    def run(step: Step, found: Globals | None) -> dict[str, list[object]]:
        results: dict[str, list[object]] = {}
        for index, table in enumerate(rows if step is Step.COUNT else later):
            facts = Facts(selects_id(settings))
            for cluster, payload in run_step(table, step, settings, found, index, facts):
                results.setdefault(cluster, []).append(pickle.loads(payload))
            if step is Step.COUNT and judged_only:
                later[index] = judged_rows(table, facts)
        return results

    decide_with(run, audits, policies, NOW, retentions)
    for audit in audits:
        audit.skips_in_table = True
    write_plans(tmp_path / "plan.json", audits, skips)

    expected_plans = []
    for audit in audits:
        replay = ReplayWithHistory(OffsetsLedger())
        replay.apply_many(sorted(logs[audit.source.name], key=lambda r: (r[3], r[4])))
        snapshot = snapshot_from_answers(
            ledger_answers(replay.ledger),
            NOW,
            cluster_id=audit.source.cluster_id,
            selects_id=lambda g: g.startswith("app-"),
        )
        plans = decide_many(policies, snapshot, NOW)
        expected_plans.extend(plans)
        assert audit.skips_by_reason == [
            dict(sorted(Counter(s.reason_code.value for s in p.skipped).items())) for p in plans
        ]
        paused = [PausedGroup(c.group, c.pause) for c in replay.comebacks]
        assert audit.what_if == what_if(policies, snapshot, NOW, retentions, paused)
        assert audit.groups_selected == len(snapshot.groups)
        assert all(p.actions for p in plans[:2]) and plans[2].summary.blast_radius_exceeded
    assert (tmp_path / "plan.json").read_text() == json.dumps(plans_document(expected_plans), indent=2) + "\n"
    if judged_only:  # the later steps read fewer rows (the Stable groups without a verdict are left out)
        assert sum(t.num_rows for t in later) < sum(t.num_rows for t in rows)


def test_the_decisions_lean_views_give_the_facts_of_the_full_rows() -> None:
    """The decision's steps build views without member lists (`parts_of(members=False)`): the
    snapshot built from them equals the one built from the full rows (members, topics, topology)."""
    from groupwarden.fleet.task_decide import parts_of
    from groupwarden.offsets_log.snapshot import snapshot_from_answers

    records = list(synthetic_log(6_000, 200, partitions=2, seed=13))
    rows = pa.concat_tables(
        [audit_partitions(partition_table("east", [r for r in records if r[3] == p])) for p in range(2)]
    )
    [full] = parts_of(rows)
    [lean] = parts_of(rows, members=False)
    assert any(view.classic_members for view, _ in full.answers)
    assert not any(view.classic_members for view, _ in lean.answers)
    assert [o for _, o in lean.answers] == [o for _, o in full.answers]
    assert snapshot_from_answers(lean.answers, NOW) == snapshot_from_answers(full.answers, NOW)

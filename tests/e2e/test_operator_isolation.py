"""Tenant isolation, the minimum retention and the operator's Kafka audit trail, end to end: the
operator process, the real API server and the real broker.

Three namespaces share one cluster. The allowlist gives team A the groups `<p>-a-*` and team B
`<p>-b-*`; team C is not listed. Team A's policy selects `<p>-*` (overlapping team B's groups), so
it is Forbidden and touches nothing, while team B's own policy cleans team B's group. A policy
with a `1s` retention is refused by `--min-retention 2s`. Every deletion is written to the audit
topic first, and `groupwarden restore --audit-topic` puts the offsets back so that a real consumer
resumes exactly where the group was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from groupwarden.adapters.kafka_audit_topic import read_audit_topic
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.deletion_trail import read_trail
from groupwarden.testing.audit_keys import fixed_trusted_keys
from gwtest.audit_log import audit_records_of_log
from gwtest.cli import run_cli
from gwtest.k8s import create_namespace, delete_namespace
from gwtest.kafka import (
    consumer_in_group,
    create_topics,
    describe_offsets_with_tool,
    first_offsets,
    produce,
)
from gwtest.operator import (
    condition,
    create_policy,
    events_of,
    existing_groups,
    get_policy,
    patch_spec,
    policy_manifest,
    running_operator,
    wait_for_status,
)
from gwtest.wait import wait_for

FAST = {"emptyGroupRetention": "2s"}
NO_BREAKER = {"maxDeletionRatio": 1}


pytestmark = pytest.mark.usefixtures("policy_crd")


def enforce(name: str, namespace: str, bootstrap: str, include: list[str], **spec: Any) -> dict[str, Any]:
    return policy_manifest(
        name,
        namespace,
        bootstrap,
        mode="Enforce",
        interval="2s",
        limits=NO_BREAKER,
        rules=spec.pop("rules", FAST),
        selector={"include": include},
        **spec,
    )


def stalled(api: ApiClient, namespace: str, name: str, reason: str) -> dict[str, Any]:
    policy = wait_for_status(api, namespace, name, reason=reason, ready="False", timeout=90)
    found = condition(policy, "Stalled")
    assert found is not None and (found["status"], found["reason"]) == ("True", reason)
    warnings = [e for e in events_of(api, namespace, name) if e["reason"] == reason]
    assert warnings and all(e["type"] == "Warning" for e in warnings)
    return policy


def test_tenants_confined_short_retention_refused_and_deletions_audited_and_restorable(
    k8s: ApiClient,
    kubeconfig: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    p = unique_name("tenant")
    team_a, team_b, team_c = f"{p}-a", f"{p}-b", f"{p}-c"
    audit_topic = f"{p}-audit"
    topic = f"{p}-orders"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 6)
    groups = [f"{p}-a-1", f"{p}-b-1", f"{p}-c-1"]
    for group in groups:
        with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=6):
            pass
    produce(kafka_bootstrap, topic, 4)  # committed offsets sit mid-log: skipping or rereading would show
    recorded = describe_offsets_with_tool(kafka_bootstrap, f"{p}-b-1")
    assert recorded == {(topic, 0): 3, (topic, 1): 3}

    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(
        yaml.safe_dump(
            {
                "namespaces": {
                    team_a: {"bootstrapServers": [kafka_bootstrap], "groups": [f"{p}-a-*"]},
                    team_b: {"bootstrapServers": [kafka_bootstrap], "groups": [f"{p}-b-*"]},
                }
            }
        )
    )
    for ns in (team_a, team_b, team_c):
        create_namespace(k8s, ns)
    flags = [
        f"--default-credentials-namespaces={team_a},{team_b}",
        f"--tenant-allowlist={allowlist}",
        "--min-retention=2s",
        f"--audit-topic={audit_topic}",
    ]
    try:
        with running_operator(
            kubeconfig, [team_a, team_b, team_c], tmp_path / "operator.log", extra_args=flags
        ) as operator:
            # Team A's wide glob reaches team B's group: Forbidden, nothing planned or deleted.
            create_policy(k8s, enforce("wide", team_a, kafka_bootstrap, [f"{p}-*"]))
            wide = stalled(k8s, team_a, "wide", "Forbidden")
            assert f"{p}-b-1" in condition(wide)["message"]  # type: ignore[index]
            assert not (wide["status"].get("plan") or [])
            # Team C: not in --default-credentials-namespaces (and not in the allowlist).
            create_policy(k8s, enforce("own", team_c, kafka_bootstrap, [f"{p}-c-*"]))
            refused = stalled(k8s, team_c, "own", "Forbidden")
            assert "default Kafka credentials" in condition(refused)["message"]  # type: ignore[index]
            # Team B: a 1s typo is refused by the minimum retention ...
            create_policy(
                k8s,
                enforce("own", team_b, kafka_bootstrap, [f"{p}-b-*"], rules={"emptyGroupRetention": "1s"}),
            )
            short = stalled(k8s, team_b, "own", "RetentionBelowMinimum")
            assert "emptyGroupRetention 1s" in condition(short)["message"]  # type: ignore[index]
            assert existing_groups(kafka_bootstrap, groups) == set(groups)

            # ... and once fixed, team B's policy deletes exactly team B's group.
            patch_spec(k8s, team_b, "own", {"rules": FAST})
            wait_for(
                lambda: existing_groups(kafka_bootstrap, groups) == {f"{p}-a-1", f"{p}-c-1"},
                timeout=90,
                what="team B's group to be deleted",
            )
            wait_for_status(k8s, team_b, "own", reason="Succeeded", ready="True", timeout=60)
            # Team A narrows its selector to what it owns: it acts again, on its own group only.
            patch_spec(k8s, team_a, "wide", {"selector": {"include": [f"{p}-a-*"]}})
            wait_for(
                lambda: existing_groups(kafka_bootstrap, groups) == {f"{p}-c-1"},
                timeout=90,
                what="team A's group to be deleted",
            )
            assert get_policy(k8s, team_c, "own")["status"]["conditions"]
            log = operator.logs()
    finally:
        for ns in (team_a, team_b, team_c):
            delete_namespace(k8s, ns)

    # The audit topic holds intent then outcome for each deletion, keyed by group.
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    reading = read_trail(read_audit_topic(settings, audit_topic), fixed_trusted_keys())
    assert reading.refused == ()  # every record signed with the operator's key
    trail = [dict(r.record) for r in reading.records]
    team_b_records = [r for r in trail if r["group"] == f"{p}-b-1"]
    assert [r["type"] for r in team_b_records] == ["intent", "outcome"]
    intent, outcome = team_b_records
    assert intent["policy"] == {"namespace": team_b, "name": "own"} and intent["mode"] == "Enforce"
    assert {(x["topic"], x["partition"]): x["offset"] for x in intent["partitions"]} == recorded
    assert outcome["result"] == "Deleted" and outcome["actionId"] == intent["actionId"]
    assert {r["group"] for r in trail} == {f"{p}-a-1", f"{p}-b-1"}
    # The always-on log sink wrote the same records (one JSON object per kopf JSON log line).
    logged = audit_records_of_log(log)
    assert sorted((r["type"], r["actionId"]) for r in logged) == sorted(
        (r["type"], r["actionId"]) for r in trail
    )

    # Restore team B's group from the topic; a real consumer resumes exactly at the recorded offsets.
    done = run_cli(
        "restore",
        "--audit-topic",
        audit_topic,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--group",
        f"{p}-b-1",
        "--yes",
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stderr
    statuses = {(x["topic"], x["partition"]): x["status"] for x in json.loads(done.stdout)["partitions"]}
    assert statuses == {tp: "restored" for tp in recorded}
    assert describe_offsets_with_tool(kafka_bootstrap, f"{p}-b-1") == recorded
    assert first_offsets(kafka_bootstrap, f"{p}-b-1", topic, "classic") == {0: 3, 1: 3}


def test_an_audit_topic_that_cannot_be_written_blocks_every_operator_deletion(
    k8s: ApiClient,
    kubeconfig: str,
    kafka_bootstrap: str,
    namespace: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    p = unique_name("unaudited")
    topic, group = f"{p}-t", f"{p}-g"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 4)
    with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=4):
        pass
    recorded = describe_offsets_with_tool(kafka_bootstrap, group)
    # The topic does not exist and the operator may not create it: no record can be stored.
    flags = [f"--audit-topic={p}-missing-audit", "--no-create-audit-topic"]
    with running_operator(kubeconfig, [namespace], tmp_path / "operator.log", extra_args=flags) as operator:
        create_policy(k8s, enforce("p", namespace, kafka_bootstrap, [group]))
        policy = wait_for_status(k8s, namespace, "p", reason="AuditUnavailable", ready="False", timeout=120)
        message = condition(policy)["message"]  # type: ignore[index]
        assert f"{p}-missing-audit" in message and "nothing more deleted" in message
        assert [e["type"] for e in events_of(k8s, namespace, "p") if e["reason"] == "AuditUnavailable"] == [
            "Warning"
        ]
        assert existing_groups(kafka_bootstrap, [group]) == {group}
        assert describe_offsets_with_tool(kafka_bootstrap, group) == recorded
        assert "GroupDeleted" not in operator.logs()

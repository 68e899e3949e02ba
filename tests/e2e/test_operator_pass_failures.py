"""The operator's cluster pass when a deletion fails (cleanup/pass_deletions.py), with the operator
as a process on the real API server and the shared broker: the write-ahead audit topic
(`--audit-topic`) refuses a record over its size limit, as a broker does. Sinks are per connection:
the policies that reach the cluster through the same connection write to the same sink, and after
the refusal none of their later deletions in the pass runs (although their records would have been
taken); a policy acting as another principal (SASL, its own Secret) writes through its own
producer and still deletes in the same pass."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from groupwarden.adapters.kafka_audit_topic import read_audit_topic
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.deletion_trail import read_trail
from groupwarden.testing.audit_keys import fixed_trusted_keys
from gwtest.audit_log import audit_records_of_log
from gwtest.kafka import commit_offsets, create_topics
from gwtest.operator import (
    Failpoint,
    OperatorProcess,
    condition,
    create_policy,
    existing_groups,
    fast_enforce_manifest,
    get_policy,
    policy_manifest,
    wait_for_status,
)
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

# The audit topic takes records up to this size; an intent record of a group with a short id is
# ~1.2 KB, one whose id is longer than the limit is refused (MESSAGE_TOO_LARGE).
AUDIT_RECORD_LIMIT = 4096
LONG_GROUP_ID = 5000


def log_messages(operator: OperatorProcess) -> list[str]:
    """The `message` of each of the operator's JSON log lines, in order."""
    messages = []
    for line in operator.logs().splitlines():
        try:
            messages.append(str(json.loads(line).get("message", "")))
        except (ValueError, AttributeError):
            continue
    return messages


def reconciling(k8s: ApiClient, namespace: str, name: str) -> bool:
    """The policy's worker has started its first run (it marks the generation before asking its
    cluster for a pass)."""
    found = condition(get_policy(k8s, namespace, name), "Reconciling")
    return found is not None and found.get("status") == "True"


def test_a_refused_audit_record_stops_the_later_deletions_of_its_sink_in_the_pass_and_no_others(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    sasl: dict[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name("passfail")
    topic, audit = f"{prefix}-t", f"{prefix}-audit"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    create_topics(
        kafka_bootstrap, [audit], partitions=1, config={"max.message.bytes": str(AUDIT_RECORD_LIMIT)}
    )
    groups = {
        "gate": f"{prefix}-gate",
        "a": f"{prefix}-a-".ljust(LONG_GROUP_ID, "x"),  # its record is refused
        "b": f"{prefix}-b",  # same connection (sink) as a, after it
        "c": f"{prefix}-c",  # another principal: its own connection and sink
    }
    for group in groups.values():
        commit_offsets(kafka_bootstrap, group, {(topic, 0): 1})  # simple groups: one commit each
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "other-principal"},
            "stringData": {k: v for k, v in sasl.items() if k != "bootstrap"},
        },
    )
    other_principal = {"bootstrapServers": sasl["bootstrap"], "authSecretRef": {"name": "other-principal"}}

    failpoint = Failpoint(tmp_path / "failpoint")
    operator = OperatorProcess(
        kubeconfig,
        [namespace],
        tmp_path / "operator.log",
        ["--audit-topic", audit, "--no-create-audit-topic"],
        env=failpoint.env,
    ).start()
    try:
        # The other principal's connection is opened first (a DryRun policy that selects nothing),
        # so c's run reaches its cluster's queue at once later on.
        create_policy(
            k8s,
            policy_manifest(
                "warm", namespace, sasl["bootstrap"], kafka=other_principal, selector={"include": ["none-*"]}
            ),
        )
        wait_for_status(k8s, namespace, "warm", reason="DryRun", timeout=90)
        # A pass held at its deletion step (the gate's): the runs that ask meanwhile all wait for
        # the next pass of the cluster, which takes them together.
        failpoint.hold()
        gate = fast_enforce_manifest("gate", namespace, kafka_bootstrap, [groups["gate"]], interval="1h")
        create_policy(k8s, gate)
        assert groups["gate"] in failpoint.wait_held()
        for name in ("c", "b", "a"):
            kafka = {"kafka": other_principal} if name == "c" else {}
            bootstrap = sasl["bootstrap"] if name == "c" else kafka_bootstrap
            include = [f"{prefix}-{name}*"]
            create_policy(
                k8s, fast_enforce_manifest(name, namespace, bootstrap, include, interval="1h", **kafka)
            )
        for name in ("a", "b", "c"):
            wait_for(lambda name=name: reconciling(k8s, namespace, name), timeout=60, what=f"{name} to start")
        failpoint.release()

        refused = wait_for_status(k8s, namespace, "a", reason="AuditUnavailable", ready="False", timeout=90)
        assert "cannot write the audit record of DeleteGroup" in (condition(refused) or {})["message"]
        stopped = wait_for_status(k8s, namespace, "b", reason="AuditUnavailable", ready="False", timeout=90)
        assert (condition(stopped) or {})["message"].startswith(
            "nothing deleted: the audit trail refused a record of an earlier deletion of this pass"
        )
        wait_for_status(
            k8s,
            namespace,
            "c",
            reason="Succeeded",
            ready="True",
            timeout=90,
            extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
        )
        messages = log_messages(operator)
    finally:
        failpoint.release()
        operator.stop()

    # a, b and c were one pass (the gate's came before it, alone).
    passes = [m for m in messages if ": pass for " in m]
    assert any("pass for 3 due policies" in m for m in passes), passes
    assert existing_groups(kafka_bootstrap, groups.values()) == {groups["a"], groups["b"]}
    # The trail holds the deletions that happened, nothing of a's or b's: b was never tried.
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    reading = read_trail(read_audit_topic(settings, audit), fixed_trusted_keys())
    assert reading.refused == ()
    trail = [(r.record["type"], r.record["group"]) for r in reading.records]
    assert sorted(trail) == sorted(
        [
            ("intent", groups["gate"]),
            ("outcome", groups["gate"]),
            ("intent", groups["c"]),
            ("outcome", groups["c"]),
        ]
    )
    intents_logged = [r for r in audit_records_of_log(operator.logs()) if r["type"] == "intent"]
    logged_groups = {r["group"] for r in intents_logged}  # a's was logged before the topic refused it
    assert groups["b"] not in logged_groups and {groups["gate"], groups["c"]} <= logged_groups

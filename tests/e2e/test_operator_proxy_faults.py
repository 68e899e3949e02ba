"""Network faults between the operator and Kafka, injected by a real proxy (Toxiproxy) in front of
a private broker's PROXIED listener (gwtest/proxied_kafka.py; docs/fault-injection.md):

- the connection reset in the middle of a DeleteGroups request, after the broker executed it:
  the outcome is `Unknown` (not Failed, not Deleted), the status and an event say so, the audit
  trail records it as possibly deleted, the next run finds nothing left to do (no repeated
  deletion), and `groupwarden restore` from the trail puts the offsets back; the same cut on an
  OffsetDelete request is unanswered too (the broker deleted that partition's offset only);
- latency and a bandwidth limit on every connection: runs are slower and still right;
- the broker stopped and started again while a deletion step runs: KafkaUnavailable once it
  lasts longer than the client's `default.api.timeout.ms` (the retries of one run, here 10 s), an
  Unknown outcome on the trail for the interrupted step, one deletion after it is back.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.audit_log import audit_lines_of_group, audit_records_of_log
from gwtest.cli import run_cli
from gwtest.kafka import commit_offsets, empty_group, topic_with_messages
from gwtest.operator import (
    Failpoint,
    OperatorProcess,
    committed_offsets,
    condition,
    create_policy,
    events_of,
    existing_groups,
    fast_enforce_manifest,
    policy_manifest,
    wait_for_status,
)
from gwtest.proxied_kafka import ProxiedBroker, proxied_broker
from gwtest.toxiproxy import ToxiproxyServer
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, toxiproxy: ToxiproxyServer) -> Iterator[ProxiedBroker]:
    with proxied_broker(tmp_path_factory.mktemp("proxied-broker"), toxiproxy) as started:
        yield started


def audit_records(operator: OperatorProcess, group: str) -> list[dict[str, Any]]:
    """The operator's always-on audit sink: one signed record per log line (the `message` of
    kopf's JSON log lines), in order, each verified."""
    return audit_records_of_log(operator.logs(), group)


# FindCoordinator answers ~40 bytes + the group id, DeleteGroups ~20 bytes + the group id. With a
# 200-character id, a connection closed after this many bytes towards the client has delivered
# the whole FindCoordinator answer and a part of the DeleteGroups answer: the broker executed the
# deletion, the client never learns it. (The window is +-110 bytes wide.)
LONG_ID = 200
CUT_AFTER_BYTES = 40 + LONG_ID + (20 + LONG_ID) // 2


def test_reset_in_the_middle_of_delete_groups_is_an_unknown_outcome_and_restore_still_works(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    broker: ProxiedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name("cut")
    topic = topic_with_messages(broker.direct, f"{prefix}-t")
    group = (prefix + "-g-").ljust(LONG_ID, "x")
    empty_group(broker.direct, group, [topic])
    before = committed_offsets(broker.direct, group)
    assert before

    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.hold(at_request=True)  # the fault hits the DeleteGroups itself
    operator = OperatorProcess(kubeconfig, [namespace], tmp_path / "operator.log", env=failpoint.env).start()
    try:
        create_policy(
            k8s, fast_enforce_manifest("p", namespace, broker.proxied, [f"{prefix}-*"], interval="4s")
        )
        assert "DeleteGroup" in failpoint.wait_held()
        broker.proxy.add_toxic("cut", "limit_data", bytes=CUT_AFTER_BYTES)
        failpoint.release()
        outcome = wait_for(
            lambda: [r for r in audit_records(operator, group) if r["type"] == "outcome"],
            timeout=60,
            what="the outcome record of the cut DeleteGroups",
        )
        broker.proxy.remove_toxic("cut")
        # The broker executed it; the operator knows it does not know.
        assert existing_groups(broker.direct, [group]) == set()
        assert [r["type"] for r in audit_records(operator, group)] == ["intent", "outcome"]
        assert outcome[0]["result"] == "Unknown", outcome
        unknown = wait_for_status(
            k8s,
            namespace,
            "p",
            reason="PartialFailure",
            ready="False",
            extra=lambda p: "unknown outcome" in (condition(p) or {}).get("message", ""),
        )
        assert "the broker may have executed" in (condition(unknown) or {})["message"]
        assert "OutcomeUnknown" in [e["reason"] for e in events_of(k8s, namespace, "p")]

        # The next run (the proxy healed) reads the cluster again: nothing left, nothing repeated.
        wait_for_status(k8s, namespace, "p", reason="Succeeded", ready="True", timeout=30)
        assert [r["type"] for r in audit_records(operator, group)] == ["intent", "outcome"]
        assert operator.running
    finally:
        failpoint.release()
        operator.stop()

    # Restore from the operator's trail: the Unknown outcome counts as possibly deleted.
    trail = tmp_path / "audit.jsonl"
    trail.write_text("".join(line + "\n" for line in audit_lines_of_group(operator.logs(), group)))
    done = run_cli(
        "restore", "--audit-file", str(trail), "--bootstrap-servers", broker.direct, "--yes", "-o", "json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert {p["status"] for p in report["partitions"] if p["group"] == group} == {"restored"}, report
    assert committed_offsets(broker.direct, group) == before


def test_latency_and_a_bandwidth_limit_slow_runs_down_and_they_stay_right(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    broker: ProxiedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name("slow")
    topic = topic_with_messages(broker.direct, f"{prefix}-t")
    groups = [f"{prefix}-g{i}" for i in range(3)]
    for group in groups:
        empty_group(broker.direct, group, [topic])
    operator = OperatorProcess(kubeconfig, [namespace], tmp_path / "operator.log").start()
    # 150 ms each way on every packet and 64 KB/s towards the client: each request round trip
    # costs >= 300 ms, and reading __consumer_offsets is throttled.
    toxics = (("latency", {"latency": 150}), ("bandwidth", {"rate": 64}))
    try:
        for kind, attributes in toxics:
            broker.proxy.add_toxic(f"slow-{kind}", kind, "downstream", **attributes)
        broker.proxy.add_toxic("slow-latency-up", "latency", "upstream", latency=150)
        manifest = policy_manifest(
            "p",
            namespace,
            broker.proxied,
            interval="5s",
            rules={"emptyGroupRetention": "1s"},
            limits={"maxDeletionRatio": 1},
            selector={"include": [f"{prefix}-*"]},
        )
        create_policy(k8s, manifest)
        dry = wait_for_status(k8s, namespace, "p", reason="DryRun", ready="True", timeout=60)
        assert "would delete 3 groups" in (condition(dry) or {})["message"], condition(dry)
        last_run = dry["status"]["lastRun"]
        assert last_run["durationSeconds"] >= 1.0, last_run  # the toxics were really in the way
        assert existing_groups(broker.direct, groups) == set(groups)  # DryRun: nothing deleted
        assert operator.running
    finally:
        for name in ("slow-latency", "slow-bandwidth", "slow-latency-up"):
            with contextlib.suppress(OSError):
                broker.proxy.remove_toxic(name)
        operator.stop()


def test_broker_restart_in_the_middle_of_a_step_is_reported_and_converges_with_one_deletion(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    broker: ProxiedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name("restart")
    topic = topic_with_messages(broker.direct, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(broker.direct, group, [topic])
    # Every Kafka request is retried through an outage until default.api.timeout.ms (60 s by
    # default): a short one (Kafka client properties in the Secret) ends the run while it is down.
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace, {"metadata": {"name": "timeouts"}, "stringData": {"default.api.timeout.ms": "10000"}}
    )
    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.hold()
    operator = OperatorProcess(kubeconfig, [namespace], tmp_path / "operator.log", env=failpoint.env).start()
    try:
        kafka = {"bootstrapServers": broker.proxied, "authSecretRef": {"name": "timeouts"}}
        create_policy(
            k8s,
            fast_enforce_manifest(
                "p", namespace, broker.proxied, [f"{prefix}-*"], interval="4s", kafka=kafka
            ),
        )
        assert "DeleteGroup" in failpoint.wait_held()
        broker.down()  # the broker stops while the operator is about to send DeleteGroups
        failpoint.release()
        down = wait_for_status(k8s, namespace, "p", reason="KafkaUnavailable", ready="False", timeout=90)
        assert (condition(down, "Reconciling") or {}).get("status") == "True"
        assert [
            (r["type"], r["result"]) for r in audit_records(operator, group) if r["type"] == "outcome"
        ] == [("outcome", "Unknown")]
        broker.up()
        back = time.monotonic()
        done = wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            ready="True",
            timeout=90,
            extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
        )
        print(f"converged {time.monotonic() - back:.1f}s after the broker was back (interval 4s)")
        assert "deleted 1 group and" in (condition(done) or {})["message"]
        assert existing_groups(broker.direct, [group]) == set()
        # The trail matches the broker: the interrupted attempt (Unknown), then the deletion, once.
        trail = [(r["type"], r.get("result")) for r in audit_records(operator, group)]
        assert trail == [("intent", None), ("outcome", "Unknown"), ("intent", None), ("outcome", "Deleted")]
        assert operator.running
    finally:
        failpoint.release()
        operator.stop()


def test_reset_in_the_middle_of_offset_delete_is_unanswered_and_the_broker_executed_it(
    broker: ProxiedBroker, unique_name: Callable[[str], str]
) -> None:
    """The same cut on an OffsetDelete request, through the gateway alone (the operator's path
    to it is the one above): the answer is lost, the adapter marks it unanswered (-> Unknown),
    and the broker did delete the partition's offset, only that one."""
    from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
    from groupwarden.cleanup.execute import classify
    from groupwarden.connectivity.settings import settings_from_properties
    from groupwarden.core.plan import ResultKind
    from groupwarden.core.snapshot import TopicPartition

    prefix = unique_name("cut-od")
    topic = topic_with_messages(broker.direct, (prefix + "-t-").ljust(LONG_ID, "t"))
    group = (prefix + "-g-").ljust(LONG_ID, "x")
    commit_offsets(broker.direct, group, {(topic, 0): 2, (topic, 1): 3})
    gateway = KafkaAdminGateway(settings_from_properties({}, bootstrap_servers=broker.proxied))
    try:
        assert group in {g.group_id for g in gateway.list_groups()}  # connected through the proxy
        with broker.proxy.toxic("cut-od", "limit_data", bytes=CUT_AFTER_BYTES):
            group_error, partitions = gateway.delete_offsets(group, [TopicPartition(topic, 0)])
    finally:
        gateway.close()
    assert group_error is not None and group_error.unanswered, (group_error, partitions)
    assert classify(group_error) is ResultKind.UNKNOWN
    assert committed_offsets(broker.direct, group) == {(topic, 1): 3}

"""Faults with the operator as a process: a Kafka outage and recovery (a second, throwaway
broker that is really stopped and started), the operator killed mid-run and restarted, and two
replicas of which only the Lease holder acts."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.k8s import lease_holder
from gwtest.kafka import consumer_in_group, empty_group, topic_with_messages
from gwtest.operator import (
    Failpoint,
    OperatorProcess,
    committed_offsets,
    condition,
    create_policy,
    events_of,
    existing_groups,
    fast_enforce_manifest,
    get_policy,
    wait_for_status,
)
from gwtest.proxied_kafka import ThrowawayBroker, throwaway_broker
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")


def totals(policy: dict[str, object]) -> dict[str, int]:
    status = policy.get("status") or {}
    assert isinstance(status, dict)
    return dict(status.get("totals") or {})


@pytest.fixture(scope="module")
def second_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayBroker]:
    """A throwaway single-node broker, for outages the shared one must not have."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip(reason="no JDK: cannot start a throwaway broker for the outage test")
    with throwaway_broker(tmp_path_factory.mktemp("broker2")) as broker:
        yield broker


def start_operator(kubeconfig: str, namespace: str, log: Path, **env: str) -> OperatorProcess:
    return OperatorProcess(kubeconfig, [namespace], log, env=env).start()


def test_kafka_outage_is_reported_retried_and_recovers_by_itself(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
    second_broker: ThrowawayBroker,
) -> None:
    bootstrap = second_broker.bootstrap
    prefix = unique_name("outage")
    topic = topic_with_messages(bootstrap, f"{prefix}-t")
    first, second = f"{prefix}-1", f"{prefix}-2"
    empty_group(bootstrap, first, [topic])
    # Short client timeouts (Kafka client properties in the Secret) so the outage shows quickly.
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "timeouts"},
            "stringData": {"request.timeout.ms": "5000", "default.api.timeout.ms": "10000"},
        },
    )
    operator = start_operator(kubeconfig, namespace, tmp_path / "operator.log")
    try:
        create_policy(
            k8s,
            fast_enforce_manifest(
                "outage",
                namespace,
                bootstrap,
                [f"{prefix}-*"],
                kafka={"bootstrapServers": bootstrap, "authSecretRef": {"name": "timeouts"}},
            ),
        )
        wait_for_status(
            k8s, namespace, "outage", reason="Succeeded", extra=lambda p: totals(p).get("groupsDeleted") == 1
        )
        second_broker.down()
        down = wait_for_status(
            k8s, namespace, "outage", reason="KafkaUnavailable", ready="False", timeout=120
        )
        reconciling = condition(down, "Reconciling")
        assert reconciling is not None and reconciling["status"] == "True"  # kstatus: retrying, not stalled
        second_broker.up()
        wait_for_status(k8s, namespace, "outage", reason="Succeeded", ready="True", timeout=120)
        empty_group(bootstrap, second, [topic])  # it acts again after the recovery
        wait_for_status(
            k8s,
            namespace,
            "outage",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 2,
        )
        assert existing_groups(bootstrap, [first, second]) == set()
        outage_events = [e for e in events_of(k8s, namespace, "outage") if e["reason"] == "KafkaUnavailable"]
        assert len(outage_events) == 1 and outage_events[0]["type"] == "Warning", (
            outage_events
        )  # not one per retry
        assert "groupwarden_runs_total" in operator.metrics()
        assert 'result="KafkaUnavailable"' in operator.metrics()
    finally:
        operator.stop()
        print("---- operator log (tail) ----\n" + "\n".join(operator.logs().splitlines()[-60:]))


def test_operator_killed_mid_run_converges_after_restart_without_repeating_deletions(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    prefix = unique_name("crash")
    kept, old = (
        topic_with_messages(kafka_bootstrap, f"{prefix}-kept"),
        topic_with_messages(kafka_bootstrap, f"{prefix}-old"),
    )
    groups = [f"{prefix}-a", f"{prefix}-b"]
    for group in groups:
        empty_group(kafka_bootstrap, group, [kept])
    moved = f"{prefix}-moved"
    empty_group(kafka_bootstrap, moved, [kept, old], messages=20)
    emptied = time.monotonic()
    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.hold(let_through=1)  # the group deletions go through, the run stops at the offsets step
    first = OperatorProcess(kubeconfig, [namespace], tmp_path / "first.log", env=failpoint.env)
    second = OperatorProcess(kubeconfig, [namespace], tmp_path / "second.log")
    try:
        with consumer_in_group(kafka_bootstrap, moved, [kept]):  # Stable, no longer subscribed to `old`
            # Everything must already be eligible at the first run (retention is elapsed time).
            wait_for(lambda: time.monotonic() - emptied > 3, what="the retention to pass")
            first.start()
            create_policy(
                k8s,
                fast_enforce_manifest(
                    "crash",
                    namespace,
                    kafka_bootstrap,
                    [f"{prefix}-*"],
                ),
            )
            assert failpoint.wait_held() == f"DeleteOffsets {moved}"
            first.kill()  # SIGKILL between two deletion steps: no status write, no Lease release
            failpoint.release()
            assert existing_groups(kafka_bootstrap, groups) == set()
            second.start()
            wait_for_status(
                k8s,
                namespace,
                "crash",
                reason="Succeeded",
                ready="True",
                timeout=90,
                extra=lambda p: (p.get("status") or {}).get("eligible") == "0/0",
            )
            assert set(committed_offsets(kafka_bootstrap, moved)) == {(kept, 0), (kept, 1)}
    finally:
        for process in (first, second):
            if process.running:
                process.stop()
        print("---- second operator log (tail) ----\n" + "\n".join(second.logs().splitlines()[-40:]))
    events = events_of(k8s, namespace, "crash")
    deleted = sorted(e["message"].split()[3].rstrip(":") for e in events if e["reason"] == "GroupDeleted")
    assert deleted == sorted(groups), events  # each once: posted by the killed process right after the step
    assert [e["reason"] for e in events].count("OffsetsDeleted") == 1, events
    assert runs_in(first.logs(), "crash") == 0  # the killed run never finished
    assert "GroupDeleted" not in second.logs() and runs_in(second.logs(), "crash") >= 1
    assert get_policy(k8s, namespace, "crash")["status"]["totals"]["offsetsDeleted"] == 2


def test_a_bug_in_a_run_is_an_internal_error_the_operator_survives_and_retries(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    prefix = unique_name("bug")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic_with_messages(kafka_bootstrap, f"{prefix}-t")])
    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.raise_errors()  # every deletion step raises, as a bug of ours would
    operator = OperatorProcess(kubeconfig, [namespace], tmp_path / "operator.log", env=failpoint.env)
    try:
        operator.start()
        create_policy(
            k8s,
            fast_enforce_manifest(
                "bug",
                namespace,
                kafka_bootstrap,
                [f"{prefix}-*"],
            ),
        )
        broken = wait_for_status(k8s, namespace, "bug", reason="InternalError", ready="False", timeout=60)
        ready, reconciling, stalled = (condition(broken, c) for c in ("Ready", "Reconciling", "Stalled"))
        assert ready is not None and "FailpointError" in ready["message"]
        assert reconciling is not None and reconciling["status"] == "True"  # kstatus: retrying
        assert stalled is not None and stalled["status"] == "False"
        assert existing_groups(kafka_bootstrap, [group]) == {group}
        # Still running, still retrying (not one failure per worker and then silence).
        wait_for(lambda: operator.logs().count("internal error") >= 2, timeout=60, what="a retry of the run")
        assert operator.running
        assert 'result="InternalError"' in operator.metrics()
        failpoint.raise_errors(on=False)  # "the fix": the next retry deletes the group
        wait_for_status(
            k8s,
            namespace,
            "bug",
            reason="Succeeded",
            timeout=90,
            extra=lambda p: totals(p).get("groupsDeleted") == 1,
        )
        assert existing_groups(kafka_bootstrap, [group]) == set()
    finally:
        operator.stop()
        print("---- operator log (tail) ----\n" + "\n".join(operator.logs().splitlines()[-40:]))
    assert "Traceback" in operator.logs() and "failpoints.py" in operator.logs()
    warnings = [e for e in events_of(k8s, namespace, "bug") if e["reason"] == "InternalError"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings  # once, not per retry


def runs_in(log: str, policy: str) -> int:
    return log.count(f"/{policy} generation")


def test_two_replicas_only_the_lease_holder_acts_and_the_standby_takes_over(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    prefix = unique_name("ha")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    first_group, second_group = f"{prefix}-1", f"{prefix}-2"
    empty_group(kafka_bootstrap, first_group, [topic])
    a = start_operator(kubeconfig, namespace, tmp_path / "a.log", POD_NAME="replica-a")
    b: OperatorProcess | None = None
    try:
        wait_for(lambda: lease_holder(k8s, namespace) == "replica-a", timeout=30, what="replica-a to lead")
        b = start_operator(kubeconfig, namespace, tmp_path / "b.log", POD_NAME="replica-b")
        wait_for(
            lambda: "groupwarden_leader 0.0" in b.metrics(), timeout=30, what="replica-b to be up as standby"
        )
        create_policy(
            k8s,
            fast_enforce_manifest(
                "ha",
                namespace,
                kafka_bootstrap,
                [f"{prefix}-*"],
            ),
        )
        wait_for_status(
            k8s, namespace, "ha", reason="Succeeded", extra=lambda p: totals(p).get("groupsDeleted") == 1
        )
        started = get_policy(k8s, namespace, "ha")["status"]["lastRun"]["startTime"]
        wait_for_status(
            k8s,
            namespace,
            "ha",
            reason="Succeeded",
            extra=lambda p: p["status"]["lastRun"]["startTime"] > started,
        )
        assert runs_in(a.logs(), "ha") >= 2 and runs_in(b.logs(), "ha") == 0  # only the leader acted
        assert "groupwarden_leader 1.0" in a.metrics() and "groupwarden_leader 0.0" in b.metrics()
        a.stop()  # graceful: releases the Lease
        wait_for(
            lambda: lease_holder(k8s, namespace) == "replica-b", timeout=30, what="replica-b to take over"
        )
        empty_group(kafka_bootstrap, second_group, [topic])
        wait_for_status(
            k8s,
            namespace,
            "ha",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 2,
        )
        assert runs_in(b.logs(), "ha") >= 1
        assert existing_groups(kafka_bootstrap, [first_group, second_group]) == set()
    finally:
        for process in (a, b):
            if process is not None and process.running:
                process.stop()
        print("---- a ----\n" + "\n".join(a.logs().splitlines()[-30:]))
        if b is not None:
            print("---- b ----\n" + "\n".join(b.logs().splitlines()[-30:]))

"""The Helm chart as users install it, on the devstack's real node: the image built from our
Dockerfile (`make image`), the chart's real securityContext, ServiceAccount and RBAC, probes, the
operator in the pod cleaning real groups on the real broker, upgrades and leader failover.

The pod reaches the API server through the `kubernetes` Service and Kafka through the broker's POD
listener at the node's address (devstack/node.sh, docs/devstack-k8s.md "The node").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.env import setting
from gwtest.k8s import lease_holder
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.node import (
    CHART,
    build_image,
    chart_values,
    cordoned,
    deployment_available,
    helm,
    installed_chart,
    lease_history,
    pod_exec,
    pod_logs,
    printed_columns,
    wait_for_pods,
)
from gwtest.operator import (
    create_policy,
    deleted_groups,
    existing_groups,
    fast_enforce_manifest,
    get_policy,
    wait_for_status,
)
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")


@pytest.fixture(scope="module")
def node_kafka() -> str:
    """Kafka as pods see it: the broker's POD listener at the node's address."""
    return setting("GROUPWARDEN_NODE_KAFKA_BOOTSTRAP", "node")


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


def status_of(policy: dict[str, Any]) -> dict[str, Any]:
    return dict(policy.get("status") or {})


def test_the_chart_runs_our_image_on_the_node_and_the_pod_cleans_real_groups(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    node_kafka: str,
    image: str,
    unique_name: Callable[[str], str],
) -> None:
    release = unique_name("gw")
    with installed_chart(kubeconfig, release, namespace):
        # helm --wait returned: the Deployment is Available, i.e. the probes on /metrics passed.
        assert deployment_available(k8s, namespace, release)
        (pod,) = wait_for_pods(k8s, namespace, release, 1)
        assert pod.spec.node_name == setting("GROUPWARDEN_NODE_NAME", "node")
        assert pod.spec.service_account_name == release
        assert pod.status.container_statuses[0].image.endswith(image)
        # The chart's securityContext, as the running process has it (not only as declared).
        probe = pod_exec(
            kubeconfig,
            namespace,
            pod.metadata.name,
            [
                "sh",
                "-c",
                "id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd):' /proc/1/status; touch /probe; echo rc=$?",
            ],
        )
        lines = probe.splitlines()
        assert lines[0] == "10001" and lines[1] == "10001", probe
        for cap in ("CapEff", "CapPrm", "CapBnd"):
            assert f"{cap}:\t0000000000000000" in probe, probe
        assert "Read-only file system" in probe and "rc=1" in probe, probe

        prefix = unique_name("node")
        topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
        empty, active = f"{prefix}-empty", f"{prefix}-kept"
        empty_group(kafka_bootstrap, empty, [topic])
        # The policy names the broker as the pod reaches it; the test's own clients use loopback.
        create_policy(k8s, fast_enforce_manifest("clean", namespace, node_kafka, [f"{prefix}-empty*"]))
        policy = wait_for_status(
            k8s,
            namespace,
            "clean",
            reason="Succeeded",
            ready="True",
            timeout=120,
            extra=lambda p: status_of(p).get("totals", {}).get("groupsDeleted") == 1,
        )
        assert status_of(policy)["lastRun"]["mode"] == "Enforce"
        assert existing_groups(kafka_bootstrap, [empty]) == set()
        assert deleted_groups(k8s, namespace, "clean") == [empty]
        assert active not in deleted_groups(k8s, namespace, "clean")
        # `kubectl get cgp`: DELETED counts what the policy has deleted, also after a later run
        # that deleted nothing (the last run's counts stay in status).
        started = status_of(policy)["lastRun"]["startTime"]
        later = wait_for_status(
            k8s,
            namespace,
            "clean",
            timeout=60,
            extra=lambda p: status_of(p)["lastRun"]["startTime"] > started,
        )
        assert status_of(later)["deleted"] == "0/0" and status_of(later)["summary"]["groupsDeleted"] == 0
        columns = printed_columns(k8s, namespace, "groupwarden.io/v1beta1/consumergrouppolicies", "clean")
        assert columns["Deleted"] == "1" and columns["Last Run Deleted"] == "0/0", columns
        # kubectl logs: API server -> kubelet on the node.
        logs = pod_logs(kubeconfig, namespace, pod.metadata.name)
        assert f"groupwarden operator {pod.metadata.name} starting" in logs
        assert "holds the leader Lease" in logs


def test_helm_upgrade_to_a_new_image_tag_rolls_the_pod_without_a_double_deletion(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    node_kafka: str,
    image: str,
    unique_name: Callable[[str], str],
) -> None:
    release = unique_name("gw")
    new_tag = build_image("groupwarden:dev-rollout")
    prefix = unique_name("roll")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    with installed_chart(kubeconfig, release, namespace):
        (old_pod,) = wait_for_pods(k8s, namespace, release, 1)
        create_policy(k8s, fast_enforce_manifest("roll", namespace, node_kafka, [f"{prefix}-g*"]))
        empty_group(kafka_bootstrap, f"{prefix}-g0", [topic])
        wait_for_status(
            k8s,
            namespace,
            "roll",
            timeout=120,
            extra=lambda p: status_of(p).get("totals", {}).get("groupsDeleted") == 1,
        )
        # Groups that become deletable while the Deployment rolls: old and new pod overlap.
        for i in (1, 2, 3):
            empty_group(kafka_bootstrap, f"{prefix}-g{i}", [topic])
        helm(
            kubeconfig,
            "upgrade",
            release,
            str(CHART),
            "--namespace",
            namespace,
            *chart_values(namespace, f"image.tag={new_tag.split(':')[1]}"),
            "--wait",
            "--timeout",
            "240s",
        )
        (new_pod,) = wait_for_pods(k8s, namespace, release, 1)
        assert new_pod.metadata.name != old_pod.metadata.name
        assert new_pod.spec.containers[0].image == new_tag
        groups = [f"{prefix}-g{i}" for i in range(4)]
        wait_for(
            lambda: existing_groups(kafka_bootstrap, groups) == set(), timeout=120, what="every group deleted"
        )
        # A new run after the roll: whatever the old or new leader did, each group is deleted once.
        started = status_of(get_policy(k8s, namespace, "roll"))["lastRun"]["startTime"]
        policy = wait_for_status(
            k8s, namespace, "roll", timeout=60, extra=lambda p: status_of(p)["lastRun"]["startTime"] > started
        )
        assert deleted_groups(k8s, namespace, "roll") == sorted(groups)
        assert status_of(policy)["totals"]["groupsDeleted"] == 4


def test_two_replicas_one_leader_and_the_other_takes_over_within_the_lease_time(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    node_kafka: str,
    image: str,
    unique_name: Callable[[str], str],
) -> None:
    """The leader's pod is evicted as in a drain (its node cordoned first, so the ReplicaSet's
    replacement pod stays Pending): it releases the Lease on SIGTERM and the standby, already
    running, holds it at its next attempt, well within the Lease time.

    Without the cordon the replacement pod competes for the released Lease too and wins whenever
    its first attempt comes before the standby's next one (the standby retries every 2.5 s): a
    correct outcome, but not this test's question (CI 2026-11-26: 4 of 6 runs)."""
    release = unique_name("gw")
    lease_seconds = 15  # the chart's default leaderElection.leaseDuration
    with installed_chart(kubeconfig, release, namespace, "replicaCount=2"):
        pods = wait_for_pods(k8s, namespace, release, 2)
        names = {p.metadata.name for p in pods}
        leader = wait_for(lambda: lease_holder(k8s, namespace), timeout=60, what="a leader")
        assert leader in names
        (standby,) = names - {leader}
        assert "holds the leader Lease" not in pod_logs(kubeconfig, namespace, standby)

        with (
            lease_history(k8s, namespace) as history,
            cordoned(k8s, setting("GROUPWARDEN_NODE_NAME", "node")),
        ):
            deleted_at = time.monotonic()
            client.CoreV1Api(k8s).delete_namespaced_pod(leader, namespace)
            try:
                wait_for(
                    lambda: lease_holder(k8s, namespace) == standby,
                    timeout=lease_seconds,
                    interval=0.2,
                    what=f"{standby} taking over the Lease within {lease_seconds}s",
                )
            except AssertionError as error:
                raise AssertionError(
                    f"{error}; Lease holders seen (s since the deletion): {history}"
                ) from None
            took_over = time.monotonic() - deleted_at
            wait_for(lambda: history[-1][1] == standby, timeout=10, what=f"the watch to see {standby}")
        assert took_over < lease_seconds
        # Released (no holder), then taken: the standby did not wait for the Lease to expire.
        assert [holder for _, holder in history] == [leader, None, standby], history
        # The new leader acts: a group emptied now is cleaned by it.
        prefix = unique_name("ha")
        topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
        empty_group(kafka_bootstrap, f"{prefix}-g", [topic])
        create_policy(k8s, fast_enforce_manifest("ha", namespace, node_kafka, [f"{prefix}-g"]))
        wait_for_status(
            k8s,
            namespace,
            "ha",
            timeout=120,
            extra=lambda p: status_of(p).get("totals", {}).get("groupsDeleted") == 1,
        )
        assert "holds the leader Lease" in pod_logs(kubeconfig, namespace, standby)

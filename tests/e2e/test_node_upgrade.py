"""Release to release on the devstack's node: the previous release (deploy/releases.txt; its chart
and image rebuilt from its recorded commit) runs policies with history, then the steps of
docs/deploy.md "Upgrading" move it to this tree's chart and image, and a rollback moves it back.

What must survive the upgrade: every policy's status and totals, each group deleted once and never
early, the first-observed clocks held in the observation store (the policies run with
`--no-offsets-log`, as on a broker whose `__consumer_offsets` they cannot read), the Lease (taken
by the new pod), and the audit trail (restore reads both releases' records and says which it
trusts). Manifests of both API versions apply. The rollback keeps the policies running; the older
release's `restore` refuses the newer, signed records by name (use the newer CLI).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from gwtest.cli import run_cli
from gwtest.env import setting
from gwtest.k8s import lease_holder
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.node import (
    CHART,
    Release,
    build_image,
    chart_values,
    create_signing_secret,
    helm,
    kubectl,
    pod_exec,
    pod_logs,
    previous_release,
    wait_for_pods,
)
from gwtest.operator import (
    FAST_RULES,
    NO_BREAKER,
    deleted_groups,
    events_of,
    existing_groups,
    get_policy,
    groupwarden_executable,
    wait_for_status,
)
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

SLOW_RETENTION = 120  # seconds: long enough for the upgrade to happen inside it


@pytest.fixture(scope="module")
def previous() -> Release:
    return previous_release()


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


@pytest.fixture
def topics(unique_name: Callable[[str], str]) -> dict[str, str]:
    return {"audit": unique_name("gw-audit"), "observations": unique_name("gw-observations")}


def shared_sets(namespace: str, topics: dict[str, str]) -> list[str]:
    """The values both releases get: the test's topics and first-observed clocks."""
    return [
        f"audit.topic={topics['audit']}",
        f"observations.topic={topics['observations']}",
        "extraArgs={--no-offsets-log}",
    ]


def previous_values(previous: Release, namespace: str, topics: dict[str, str]) -> list[str]:
    args = ["-f", str(previous.devstack_values), "--set", f"watchNamespaces={{{namespace}}}"]
    args += ["--set", "minRetention=", "--set", "image.repository=groupwarden"]
    args += ["--set", f"image.tag={previous.image.split(':')[1]}"]
    for item in shared_sets(namespace, topics):
        args += ["--set", item]
    return args


def manifest(name: str, namespace: str, bootstrap: str, include: list[str], **spec: Any) -> dict[str, Any]:
    """As 0.1.0's users wrote them: v1alpha1."""
    return {
        "apiVersion": "groupwarden.io/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "selector": {"include": include},
            "interval": "3s",
            "limits": NO_BREAKER,
            **spec,
        },
    }


def apply(kubeconfig: str, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(document), check=False)


def run_started(policy: dict[str, Any]) -> float:
    """When the policy's last run started (status.lastRun.startTime, RFC 3339), epoch seconds."""
    started = str(policy["status"]["lastRun"]["startTime"]).replace("Z", "+00:00")
    return datetime.fromisoformat(started).timestamp()


def plan_clock(policy: dict[str, Any], group: str) -> str | None:
    for action in (policy.get("status") or {}).get("plan") or []:
        if action["group"] == group:
            return str(action["eligibleSince"])
    return None


def totals(policy: dict[str, Any]) -> dict[str, int]:
    return dict((policy.get("status") or {}).get("totals") or {})


@pytest.fixture
def release_name(unique_name: Callable[[str], str]) -> Iterator[str]:
    yield unique_name("gw")


def test_an_upgrade_from_the_previous_release_keeps_status_clocks_lease_and_trail_and_rolls_back(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    previous: Release,
    image: str,
    topics: dict[str, str],
    release_name: str,
    unique_name: Callable[[str], str],
) -> None:
    node_kafka = setting("GROUPWARDEN_NODE_KAFKA_BOOTSTRAP", "node")
    prefix = unique_name("up")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")

    # -- the previous release, with history ---------------------------------------------------
    helm(
        kubeconfig,
        "install",
        release_name,
        str(previous.chart),
        "--namespace",
        namespace,
        *previous_values(previous, namespace, topics),
        # The shared API server serves this tree's CRD to every test running beside this one: the
        # previous release runs on it through v1alpha1 (still served). The CRD's own change, from
        # 0.1.0's to this one and the storage migration, is proven on a private API server
        # (tests/e2e/test_api_versions.py).
        "--skip-crds",
        "--wait",
        "--timeout",
        "240s",
    )
    try:
        (old_pod,) = wait_for_pods(k8s, namespace, release_name, 1)
        assert old_pod.spec.containers[0].image.endswith(previous.image)
        wait_for(
            lambda: lease_holder(k8s, namespace) == old_pod.metadata.name, timeout=60, what="0.1.0 leads"
        )
        empty_group(kafka_bootstrap, f"{prefix}-h1", [topic])
        empty_group(kafka_bootstrap, f"{prefix}-w1", [topic])
        empty_group(kafka_bootstrap, f"{prefix}-s1", [topic])
        slow_empty_at = time.time()
        policies = {
            "history": manifest(
                "history", namespace, node_kafka, [f"{prefix}-h*"], mode="Enforce", rules=FAST_RULES
            ),
            "watch": manifest(
                "watch", namespace, node_kafka, [f"{prefix}-w*"], rules={"emptyGroupRetention": "1s"}
            ),
            "slow": manifest(
                "slow",
                namespace,
                node_kafka,
                [f"{prefix}-s*"],
                mode="Enforce",
                rules={"emptyGroupRetention": f"{SLOW_RETENTION}s"},
            ),
        }
        for document in policies.values():
            applied = apply(kubeconfig, document)
            assert applied.returncode == 0, applied.stderr
        wait_for_status(
            k8s, namespace, "history", timeout=90, extra=lambda p: totals(p).get("groupsDeleted") == 1
        )
        watched = wait_for_status(
            k8s,
            namespace,
            "watch",
            reason="DryRun",
            timeout=90,
            extra=lambda p: plan_clock(p, f"{prefix}-w1") is not None,
        )
        clock = plan_clock(watched, f"{prefix}-w1")
        assert watched["status"]["lastRun"]["timestampSource"] == "observed"
        # A few more passes: the previous release has written its clocks to the observation store.
        seen = watched["status"]["lastRun"]["startTime"]
        wait_for_status(
            k8s, namespace, "watch", timeout=60, extra=lambda p: p["status"]["lastRun"]["startTime"] > seen
        )
        history_before = get_policy(k8s, namespace, "history")
        assert existing_groups(kafka_bootstrap, [f"{prefix}-s1"]) == {f"{prefix}-s1"}

        # -- the upgrade, exactly as docs/deploy.md "Upgrading" says --------------------------
        upgrade_started = time.time()
        crds = helm(kubeconfig, "show", "crds", str(CHART))
        kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=crds)
        create_signing_secret(kubeconfig, namespace)
        helm(
            kubeconfig,
            "upgrade",
            release_name,
            str(CHART),
            "--namespace",
            namespace,
            *chart_values(namespace, f"image.tag={image.split(':')[1]}", *shared_sets(namespace, topics)),
            "--wait",
            "--timeout",
            "240s",
        )
        (new_pod,) = wait_for_pods(k8s, namespace, release_name, 1)
        assert new_pod.metadata.name != old_pod.metadata.name and new_pod.spec.containers[0].image == image
        wait_for(
            lambda: lease_holder(k8s, namespace) == new_pod.metadata.name, timeout=60, what="new pod leads"
        )
        new_leader_at = time.time()
        migrated = subprocess.run(
            [groupwarden_executable(), "migrate-storage", "--kubeconfig", kubeconfig],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrated.returncode == 0, migrated.stderr
        assert "storedVersions: v1beta1" in migrated.stdout, migrated.stdout

        # Status and totals as the previous release left them, then a run of the new one.
        after = wait_for_status(
            k8s,
            namespace,
            "history",
            timeout=90,
            extra=lambda p: run_started(p) > new_leader_at,
        )
        assert totals(after) == totals(history_before)
        # The clock the previous release started continues (resumed from the store: the first
        # pass of a new leader uses fresh clocks, which can only delay; the next ones resume).
        resumed = wait_for_status(
            k8s,
            namespace,
            "watch",
            reason="DryRun",
            timeout=90,
            extra=lambda p: run_started(p) > new_leader_at and plan_clock(p, f"{prefix}-w1") == clock,
        )
        assert plan_clock(resumed, f"{prefix}-w1") == clock
        # A deletion by the new release adds to the totals and is signed.
        empty_group(kafka_bootstrap, f"{prefix}-h2", [topic])
        wait_for_status(
            k8s, namespace, "history", timeout=90, extra=lambda p: totals(p).get("groupsDeleted") == 2
        )
        # The slow group: deleted once its first-observed clock (started by the previous
        # release) reached the retention; never before it, and not a retention after the upgrade.
        slow = f"{prefix}-s1"
        wait_for(
            lambda: existing_groups(kafka_bootstrap, [slow]) == set(),
            timeout=SLOW_RETENTION + 60,
            interval=1,
            what=f"{slow} deleted",
        )
        deleted_at = time.time()
        timeline = (
            f"emptied {slow_empty_at:.1f}, upgrade started {upgrade_started:.1f}, new leader "
            f"{new_leader_at:.1f}, deleted {deleted_at:.1f}; events: {events_of(k8s, namespace, 'slow')}; "
            f"new pod's log: {pod_logs(kubeconfig, namespace, new_pod.metadata.name)[-6000:]}"
        )
        print(timeline)  # shown when the test fails later
        # The clock the deletion used, as its event states it: the previous release's first
        # observation (before the upgrade began), not one the new release started.
        (message,) = [
            e["message"] for e in events_of(k8s, namespace, "slow") if e["reason"] == "GroupDeleted"
        ]
        found_since = re.search(r"since (\S+), observed\)", message)
        assert found_since, message
        since = datetime.fromisoformat(found_since.group(1).replace("Z", "+00:00")).timestamp()
        assert slow_empty_at - 2 <= since < upgrade_started, f"the clock restarted: {timeline}"
        assert deleted_at >= since + SLOW_RETENTION, f"deleted before its retention: {timeline}"
        assert deleted_at >= slow_empty_at + SLOW_RETENTION, f"deleted before its retention: {timeline}"
        assert upgrade_started < slow_empty_at + SLOW_RETENTION, "the upgrade took longer than the retention"
        assert deleted_groups(k8s, namespace, "slow") == [slow]
        assert deleted_groups(k8s, namespace, "history") == [f"{prefix}-h1", f"{prefix}-h2"]
        # Both API versions apply against the upgraded operator.
        for version in ("v1alpha1", "v1beta1"):
            document = manifest(
                f"late-{version}",
                namespace,
                node_kafka,
                [f"{prefix}-{version}-*"],
                rules={"emptyGroupRetention": "1d"},
            )
            document["apiVersion"] = f"groupwarden.io/{version}"
            applied = apply(kubeconfig, document)
            assert applied.returncode == 0, applied.stderr
            assert ("deprecated" in applied.stderr) == (version == "v1alpha1"), applied.stderr
            wait_for_status(k8s, namespace, f"late-{version}", reason="DryRun", timeout=60)

        # The trail holds both releases' records; restore trusts the signed ones and names the rest.
        base = [
            "restore",
            "--audit-topic",
            topics["audit"],
            "--bootstrap-servers",
            kafka_bootstrap,
            "-o",
            "json",
        ]
        read = run_cli(*base)
        assert read.returncode == 1, read.stderr  # unsigned records refused: exit 1 by contract
        found = json.loads(read.stdout)
        assert {p["group"] for p in found["partitions"]} == {f"{prefix}-h2", slow}
        refused = {r["claimedGroup"]: r["reason"] for r in found["refusedRecords"]}
        assert set(refused) == {f"{prefix}-h1"} and "unsigned (auditVersion 1)" in refused[f"{prefix}-h1"]
        trusted = run_cli(*base, "--trust-unsigned")
        assert trusted.returncode == 0, trusted.stderr
        groups = {p["group"] for p in json.loads(trusted.stdout)["partitions"]}
        assert groups == {f"{prefix}-h1", f"{prefix}-h2", slow}

        # -- rollback: the previous release runs again on what the new one left ---------------
        status_before_rollback = get_policy(k8s, namespace, "history")
        helm(
            kubeconfig, "rollback", release_name, "1", "--namespace", namespace, "--wait", "--timeout", "240s"
        )
        (back_pod,) = wait_for_pods(k8s, namespace, release_name, 1)
        assert back_pod.spec.containers[0].image.endswith(previous.image)
        wait_for(
            lambda: lease_holder(k8s, namespace) == back_pod.metadata.name, timeout=60, what="0.1.0 leads"
        )
        empty_group(kafka_bootstrap, f"{prefix}-h3", [topic])
        rolled = wait_for_status(
            k8s, namespace, "history", timeout=90, extra=lambda p: totals(p).get("groupsDeleted") == 3
        )
        assert totals(rolled)["groupsDeleted"] == totals(status_before_rollback)["groupsDeleted"] + 1
        back = wait_for_status(
            k8s,
            namespace,
            "watch",
            reason="DryRun",
            timeout=90,
            extra=lambda p: plan_clock(p, f"{prefix}-w1") == clock,
        )
        assert plan_clock(back, f"{prefix}-w1") == clock  # the newer release's stored clocks read back
        # The previous release's restore cannot read signed records: it says so and stops.
        old_restore = pod_exec(
            kubeconfig,
            namespace,
            back_pod.metadata.name,
            ["groupwarden", "restore", "--audit-topic", topics["audit"], "--bootstrap-servers", node_kafka],
        )
        assert "unsupported auditVersion 2" in old_restore, old_restore
    finally:
        helm(kubeconfig, "uninstall", release_name, "--namespace", namespace, "--wait", "--timeout", "120s")

"""The API server goes away in the middle of a run (docs/fault-injection.md):

- seen through a real proxy (Toxiproxy) between the operator and the devstack's kube-apiserver:
  disabling the proxy cuts every connection of the operator and refuses new ones; latency on every
  answer makes it slow;
- a real restart of etcd and kube-apiserver: a private control plane (devstack/k8s.sh with its
  own DEVSTACK_DIR and ports, no controller-manager or scheduler) is stopped and started again.
  The shared API server is never restarted.

Expected: the run in flight deletes nothing while the operator cannot confirm it still leads (the
Lease cannot be renewed), the operator does not crash, and once the API server is back the next
run deletes the group exactly once and the status says so, within a few intervals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient
from test_operator_proxy_faults import audit_records

from gwtest.control_plane import ControlPlane, private_control_plane
from gwtest.k8s import api_client, create_namespace
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.operator import (
    Failpoint,
    OperatorProcess,
    create_policy,
    ensure_crd,
    existing_groups,
    fast_enforce_manifest,
    wait_for_status,
)
from gwtest.toxiproxy import Proxy, ToxiproxyServer
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")


def proxied_kubeconfig(kubeconfig: str, toxiproxy: ToxiproxyServer, path: Path) -> tuple[Proxy, str]:
    """A copy of `kubeconfig` whose server is a proxy to the real one (same CA: the API server's
    certificate is for 127.0.0.1, whatever the port)."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    upstream = cluster["server"].removeprefix("https://")
    proxy = toxiproxy.proxy(f"apiserver-{path.parent.name}"[:60], upstream)
    cluster["server"] = f"https://{proxy.address}"
    if "certificate-authority" in cluster:
        cluster["certificate-authority"] = str(Path(kubeconfig).parent / cluster["certificate-authority"])
    path.write_text(yaml.safe_dump(config))
    return proxy, str(path)


def test_api_server_unreachable_mid_run_deletes_nothing_blind_and_converges_once_back(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    toxiproxy: ToxiproxyServer,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name("api")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    proxy, config = proxied_kubeconfig(kubeconfig, toxiproxy, tmp_path / "kubeconfig")
    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.hold()
    operator = OperatorProcess(config, [namespace], tmp_path / "operator.log", env=failpoint.env).start()
    try:
        create_policy(
            k8s, fast_enforce_manifest("p", namespace, kafka_bootstrap, [f"{prefix}-*"], interval="4s")
        )
        assert "DeleteGroup" in failpoint.wait_held()
        proxy.enabled(False)  # the API server "restarts": every connection cut, new ones refused
        wait_for(lambda: "lost the leader Lease" in operator.logs(), timeout=30, what="the Lease to lapse")
        failpoint.release()
        wait_for(
            lambda: "run interrupted (this replica lost the leader Lease)" in operator.logs(),
            timeout=30,
            what="the run in flight to stop before its deletion",
        )
        assert existing_groups(kafka_bootstrap, [group]) == {group}
        assert audit_records(operator, group) == []  # not even an intent: nothing was attempted

        healed = time.monotonic()
        proxy.enabled(True)
        wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            ready="True",
            timeout=60,
            extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
        )
        print(f"converged {time.monotonic() - healed:.1f}s after the API server came back")
        assert existing_groups(kafka_bootstrap, [group]) == set()
        assert [(r["type"], r.get("result")) for r in audit_records(operator, group)] == [
            ("intent", None),
            ("outcome", "Deleted"),
        ]
        assert operator.running
    finally:
        failpoint.release()
        proxy.enabled(True)
        operator.stop()


def test_a_slow_api_server_slows_the_operator_down_without_wrong_or_repeated_deletions(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    toxiproxy: ToxiproxyServer,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Every answer of the API server 400 ms late (status writes, events, Lease renewals, the
    watch): the operator still deletes each eligible group once, with a status that says so, and
    later runs repeat nothing. (The tests' 5 s Lease renews every 1.7 s within a 3.3 s deadline,
    and a renewal is two calls: 400 ms keeps it inside, 800 ms is the edge; docs/fault-injection.md.)"""
    prefix = unique_name("slowapi")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    groups = [f"{prefix}-g{i}" for i in range(2)]
    for group in groups:
        empty_group(kafka_bootstrap, group, [topic])
    proxy, config = proxied_kubeconfig(kubeconfig, toxiproxy, tmp_path / "kubeconfig")
    operator = OperatorProcess(config, [namespace], tmp_path / "operator.log").start()
    try:
        with proxy.toxic("slow", "latency", "downstream", latency=400):
            manifest = fast_enforce_manifest("p", namespace, kafka_bootstrap, [f"{prefix}-*"], interval="3s")
            create_policy(k8s, manifest)
            done = wait_for_status(
                k8s,
                namespace,
                "p",
                reason="Succeeded",
                ready="True",
                timeout=90,
                extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 2,
            )
            assert existing_groups(kafka_bootstrap, groups) == set()
            # A few more runs under the slow API server: nothing repeated, totals stay right.
            generation_runs = done["status"]["lastRun"]["startTime"]
            wait_for_status(
                k8s,
                namespace,
                "p",
                reason="Succeeded",
                timeout=60,
                extra=lambda p: p["status"]["lastRun"]["startTime"] != generation_runs,
            )
        for group in groups:
            assert [r["type"] for r in audit_records(operator, group)] == ["intent", "outcome"]
        assert operator.running
    finally:
        operator.stop()


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with private_control_plane(tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


def test_etcd_and_api_server_restart_mid_run_deletes_nothing_blind_and_converges_once_back(
    control_plane: ControlPlane,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    api = api_client(control_plane.kubeconfig)
    ensure_crd(api)
    namespace = unique_name("gw-restart")
    create_namespace(api, namespace)
    prefix = unique_name("restart-api")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.hold()
    log = tmp_path / "operator.log"
    operator = OperatorProcess(control_plane.kubeconfig, [namespace], log, env=failpoint.env).start()
    try:
        manifest = fast_enforce_manifest("p", namespace, kafka_bootstrap, [f"{prefix}-*"], interval="4s")
        create_policy(api, manifest)
        assert "DeleteGroup" in failpoint.wait_held()
        control_plane.k8s("down")  # etcd and kube-apiserver really stop (their data stays)
        wait_for(lambda: "lost the leader Lease" in operator.logs(), timeout=30, what="the Lease to lapse")
        failpoint.release()
        wait_for(
            lambda: "run interrupted (this replica lost the leader Lease)" in operator.logs(),
            timeout=30,
            what="the run in flight to stop before its deletion",
        )
        assert existing_groups(kafka_bootstrap, [group]) == {group}
        assert audit_records(operator, group) == []

        restarted = time.monotonic()
        control_plane.k8s("up")
        api.close()
        api = api_client(control_plane.kubeconfig)
        wait_for_status(
            api,
            namespace,
            "p",
            reason="Succeeded",
            ready="True",
            timeout=90,
            extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
        )
        print(
            f"converged {time.monotonic() - restarted:.1f}s after etcd and the API server were started again"
        )
        assert existing_groups(kafka_bootstrap, [group]) == set()
        assert [(r["type"], r.get("result")) for r in audit_records(operator, group)] == [
            ("intent", None),
            ("outcome", "Deleted"),
        ]
        assert operator.running
    finally:
        failpoint.release()
        operator.stop()
        api.close()

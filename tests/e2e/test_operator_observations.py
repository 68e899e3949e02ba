"""First-observed clocks that survive the operator (--observations-topic), as a managed service's
tenant (gwtest/tenant.py) through the policy's Secret: `__consumer_offsets` is not readable, so
times are first-observed, and the store (created, written and read by the tenant with the ACLs
docs/operator.md lists) is what keeps them. An Empty group made by a real consumer is deleted at
the retention counted from its FIRST observation, across a restart of the operator and across a
failover to the standby after the leader was killed.

Both tests cost about 20-23 s each (the 15 s retention runs once per test); measured 2026-11-26 on
a private devstack broker, as the tenant: deleted 17.4 s after the first observation (8.8 s after
the restart) and 15.4 s after it (6.7 s after the standby took over); the module took 43.7 s, as
the super user with `--no-offsets-log` before (43.0 s)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kubernetes import client
from kubernetes.client import ApiClient

from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.connectivity.settings import settings_from_properties
from gwtest.k8s import lease_holder
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.operator import OperatorProcess, create_policy, existing_groups, fast_enforce_manifest, get_policy
from gwtest.tenant import Tenant, tenant_observations_topic, tenant_principal
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

RETENTION_S = 15
INTERVAL_S = 2
# A deletion comes at the first pass after the retention: within an interval, plus the pass and
# this test's polling (0.2 s) on a loaded machine. The restart / takeover comes early enough that
# a restarted clock could not fit in this window (asserted separately).
TOLERANCE_S = INTERVAL_S + 3


@pytest.fixture(scope="module")
def tenant() -> Tenant:
    return tenant_principal()


@pytest.fixture
def store_topic(kafka_bootstrap: str, tenant: Tenant, unique_name: Callable[[str], str]) -> Iterator[str]:
    """Under the tenant's observations prefix; the operator creates it as the tenant."""
    name = unique_name(tenant_observations_topic())
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([name], operation_timeout=10)[name].exception(15)


def first_observed(bootstrap: str, topic: str, group: str) -> float | None:
    """The group's Empty-since clock as the operator stored it (epoch seconds), None before."""
    since = None
    reader = OffsetsLogReader(settings_from_properties({}, bootstrap_servers=bootstrap), topic=topic)
    for record in reader.read({}):
        value = json.loads(record.value) if record.value else {}
        if value.get("group") == group and value.get("emptySince"):
            since = value["emptySince"]
    return None if since is None else datetime.fromisoformat(since).timestamp()


def deleted_at(bootstrap: str, group: str, timeout: float) -> float:
    return wait_for(
        lambda: time.time() if not existing_groups(bootstrap, [group]) else None,
        timeout=timeout,
        what=f"{group} to be deleted",
    )


def setup(
    k8s: ApiClient,
    namespace: str,
    bootstrap: str,
    tenant: Tenant,
    unique_name: Callable[[str], str],
    name: str,
) -> tuple[str, dict[str, object]]:
    """The tenant's group (made as a super user on PLAINTEXT) and a policy acting as the tenant."""
    prefix = unique_name(f"{tenant.prefix}{name}")
    topic = topic_with_messages(bootstrap, f"{prefix}-t")
    group = f"{prefix}-idle"
    empty_group(bootstrap, group, [topic])
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "tenant"}, "stringData": tenant.secret_data("PLAIN"), "type": "Opaque"},
    )
    manifest = fast_enforce_manifest(
        name,
        namespace,
        tenant.bootstrap,
        [f"{prefix}-*"],
        kafka={"bootstrapServers": tenant.bootstrap, "authSecretRef": {"name": "tenant"}},
        rules={"emptyGroupRetention": f"{RETENTION_S}s"},
    )
    return group, manifest


def assert_observed_as_the_tenant(
    k8s: ApiClient, namespace: str, name: str, tenant: Tenant, logs: str
) -> None:
    """The last run dated the group by first-observed times (the offsets log refused), and the
    tenant's password appears nowhere in the operator's log."""
    last_run = (get_policy(k8s, namespace, name).get("status") or {}).get("lastRun") or {}
    assert last_run.get("timestampSource") == "observed", last_run
    assert tenant.password not in logs


def test_a_restart_in_the_middle_of_the_retention_keeps_the_first_observation(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    store_topic: str,
    tenant: Tenant,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    group, manifest = setup(k8s, namespace, kafka_bootstrap, tenant, unique_name, "restart")
    args = ["--observations-topic", store_topic]
    first = OperatorProcess(kubeconfig, [namespace], tmp_path / "first.log", args).start()
    second = OperatorProcess(kubeconfig, [namespace], tmp_path / "second.log", args)
    try:
        create_policy(k8s, manifest)
        seen = wait_for(lambda: first_observed(kafka_bootstrap, store_topic, group), timeout=30)
        wait_for(lambda: time.time() > seen + 7, timeout=10, what="the middle of the retention")
        first.stop()  # a rolling upgrade: SIGTERM, the Lease released
        restarted = time.time()
        second.start()
        gone = deleted_at(kafka_bootstrap, group, timeout=RETENTION_S + 15)
    finally:
        for process in (first, second):
            if process.running:
                process.stop()
        print("---- second ----\n" + "\n".join(second.logs().splitlines()[-30:]))
    print(f"deleted {gone - seen:.1f}s after the first observation, {gone - restarted:.1f}s after restart")
    # Counted from the first observation, never earlier (and not before the new process could act,
    # on a machine slow enough to start it late); a restarted clock would have deleted it at
    # restarted + RETENTION_S at the soonest.
    assert seen + RETENTION_S <= gone <= max(seen + RETENTION_S, restarted) + TOLERANCE_S
    assert gone < restarted + RETENTION_S
    assert "restored 1 groups' clocks" in second.logs()
    assert_observed_as_the_tenant(k8s, namespace, "restart", tenant, first.logs() + second.logs())


def test_the_standby_that_takes_over_from_a_killed_leader_keeps_the_first_observation(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    store_topic: str,
    tenant: Tenant,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    group, manifest = setup(k8s, namespace, kafka_bootstrap, tenant, unique_name, "failover")
    args = ["--observations-topic", store_topic]
    a = OperatorProcess(kubeconfig, [namespace], tmp_path / "a.log", args, {"POD_NAME": "replica-a"}).start()
    b = OperatorProcess(kubeconfig, [namespace], tmp_path / "b.log", args, {"POD_NAME": "replica-b"})
    try:
        wait_for(lambda: lease_holder(k8s, namespace) == "replica-a", timeout=30, what="replica-a to lead")
        b.start()
        wait_for(lambda: "groupwarden_leader 0.0" in b.metrics(), timeout=30, what="replica-b as standby")
        create_policy(k8s, manifest)
        seen = wait_for(lambda: first_observed(kafka_bootstrap, store_topic, group), timeout=30)
        wait_for(lambda: time.time() > seen + 3, timeout=10, what="the middle of the retention")
        a.kill()  # a crashed pod: no Lease release, the standby waits the Lease out (5 s)
        wait_for(lambda: lease_holder(k8s, namespace) == "replica-b", timeout=30, what="replica-b to lead")
        took_over = time.time()
        gone = deleted_at(kafka_bootstrap, group, timeout=RETENTION_S + 15)
    finally:
        for process in (a, b):
            if process.running:
                process.stop()
        print("---- b ----\n" + "\n".join(b.logs().splitlines()[-30:]))
    print(f"deleted {gone - seen:.1f}s after the first observation, {gone - took_over:.1f}s after takeover")
    assert seen + RETENTION_S <= gone <= max(seen + RETENTION_S, took_over) + TOLERANCE_S
    assert gone < took_over + RETENTION_S  # not from the takeover
    assert "restored 1 groups' clocks" in b.logs()
    assert_observed_as_the_tenant(k8s, namespace, "failover", tenant, a.logs() + b.logs())

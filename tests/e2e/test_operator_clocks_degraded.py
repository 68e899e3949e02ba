"""What the operator cannot keep shows on the policies: a policy acting as the devstack's tenant
(no `__consumer_offsets`: first-observed times) on an operator whose observation topic the tenant
has no grants for. Within one pass the policy carries `ClocksPersisted=False` with the missing
grant and the principal, one Warning event, the condition's metric series, and `Ready` stays as
the run was; after the ACLs are granted (no restart) the next passes store the clocks and it all
clears. Real broker with an authorizer, real API server, the operator as a process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.kafka import empty_group, topic_with_messages
from gwtest.operator import (
    OperatorProcess,
    condition,
    create_policy,
    events_of,
    policy_manifest,
    wait_for_status,
)
from gwtest.tenant import Tenant, tenant_principal
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")


def grants(tenant: Tenant, topic: str) -> list[AclBinding]:
    """What docs/operator.md ("RBAC") lists for the store: Create, Write, Read on the topic, Write
    on its producer's transactional id."""
    principal = f"User:{tenant.username}"

    def acl(kind: ResourceType, name: str, operation: AclOperation) -> AclBinding:
        return AclBinding(
            kind, name, ResourcePatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW
        )

    return [
        *(
            acl(ResourceType.TOPIC, topic, op)
            for op in (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ)
        ),
        acl(ResourceType.TRANSACTIONAL_ID, f"groupwarden-observations:{topic}", AclOperation.WRITE),
    ]


@pytest.fixture
def denied_topic(kafka_bootstrap: str, tenant_: Tenant) -> Iterator[str]:
    """A topic name the tenant may see (its prefix) but not create, write or fence."""
    name = f"{tenant_.prefix}clocks-denied-{uuid.uuid4().hex[:8]}"
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    filters = [
        AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
        )
        for b in grants(tenant_, name)
    ]
    for future in admin.delete_acls(filters, request_timeout=10).values():
        future.result(timeout=15)
    admin.delete_topics([name], operation_timeout=10)[name].exception(15)


@pytest.fixture(scope="module")
def tenant_() -> Tenant:
    return tenant_principal()


def clocks(policy: dict[str, Any]) -> dict[str, Any] | None:
    return condition(policy, "ClocksPersisted")


def condition_series(metrics: str, status: str) -> list[str]:
    return [
        line
        for line in metrics.splitlines()
        if line.startswith("groupwarden_policy_condition{")
        and 'condition="ClocksPersisted"' in line
        and f'status="{status}"' in line
        and line.endswith(" 1.0")
    ]


def test_a_store_without_its_grants_shows_on_the_policy_and_clears_once_they_are_granted(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    tenant_: Tenant,
    denied_topic: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name(f"{tenant_.prefix}clocks")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    empty_group(kafka_bootstrap, f"{prefix}-idle", [topic])
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "tenant"}, "stringData": tenant_.secret_data("PLAIN"), "type": "Opaque"},
    )
    manifest = policy_manifest(
        "watch",
        namespace,
        tenant_.bootstrap,
        kafka={"bootstrapServers": tenant_.bootstrap, "authSecretRef": {"name": "tenant"}},
        selector={"include": [f"{prefix}-*"]},
        rules={"emptyGroupRetention": "1h"},
        interval="2s",
    )
    operator = OperatorProcess(
        kubeconfig,
        [namespace],
        tmp_path / "operator.log",
        extra_args=[f"--observations-topic={denied_topic}"],
    )
    operator.start()
    try:
        create_policy(k8s, manifest)
        degraded = wait_for_status(
            k8s,
            namespace,
            "watch",
            reason="DryRun",
            ready="True",  # degraded, not failing: health checks and PolicyNotReady stay quiet
            extra=lambda p: (clocks(p) or {}).get("status") == "False",
        )
        found = clocks(degraded) or {}
        assert found["reason"] == "ObservationStoreUnavailable"
        assert f"missing Write on TransactionalId groupwarden-observations:{denied_topic}" in found["message"]
        assert f"as '{tenant_.username}'" in found["message"]  # the principal
        assert "kept in memory only" in found["message"]
        assert (degraded.get("status") or {}).get("lastRun", {}).get("timestampSource") == "observed"
        assert condition_series(operator.metrics(), "False"), operator.metrics()
        time.sleep(6)  # three more passes: still one event, one log line
        warned = [
            e for e in events_of(k8s, namespace, "watch") if e["reason"] == "ObservationStoreUnavailable"
        ]
        assert len(warned) == 1 and "TransactionalId" in warned[0]["message"]
        logs = operator.logs()
        assert logs.count("cannot open the observation store") == 1
        assert "not created (TOPIC_AUTHORIZATION_FAILED)" not in logs  # per attempt: DEBUG only
        assert tenant_.password not in logs

        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.create_acls(grants(tenant_, denied_topic), request_timeout=10).values():
            future.result(timeout=15)
        granted = time.monotonic()
        stored = wait_for_status(
            k8s,
            namespace,
            "watch",
            reason="DryRun",
            ready="True",
            timeout=60,
            extra=lambda p: (clocks(p) or {}).get("status") == "True",
        )
        print(f"cleared {time.monotonic() - granted:.1f}s after the grant")
        assert (clocks(stored) or {})["reason"] == "Stored"
        wait_for(
            lambda: "Stored" in [e["reason"] for e in events_of(k8s, namespace, "watch")],
            timeout=15,
            what="the Stored event",
        )
        metrics = operator.metrics()
        assert condition_series(metrics, "True") and not condition_series(metrics, "False")
        assert operator.logs().count("observation store written again") == 1
    finally:
        operator.stop()

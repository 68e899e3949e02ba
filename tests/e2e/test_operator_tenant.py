"""The operator acting as a managed service's tenant (gwtest/tenant.py) through the policy's
Secret: `__consumer_offsets` is not readable (observed times), ListGroups shows only the tenant's
groups, and a group it may see but not delete is a per-item authorization failure: the status says
AuthorizationFailed, the rest of the pass is done, and an Event names the group and the reason."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.kafka import create_topics, empty_group, produce
from gwtest.operator import (
    OperatorProcess,
    condition,
    create_policy,
    events_of,
    existing_groups,
    policy_manifest,
    wait_for_status,
)
from gwtest.tenant import Tenant, tenant_principal

pytestmark = pytest.mark.usefixtures("policy_crd")


@pytest.fixture(scope="module")
def tenant() -> Tenant:
    return tenant_principal()


def test_operator_as_tenant_reports_the_group_it_may_not_delete_and_deletes_the_others(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    tenant: Tenant,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    token = unique_name("op")
    mine, readonly, foreign = f"{tenant.prefix}{token}", f"{tenant.readonly_prefix}{token}", f"other-{token}"
    topic = f"{tenant.prefix}{token}"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    produce(kafka_bootstrap, topic, 2, partitions=1)
    for group in (mine, readonly, foreign):  # made as a super user on the PLAINTEXT listener
        empty_group(kafka_bootstrap, group, [topic], messages=2)
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "tenant"}, "stringData": tenant.secret_data("PLAIN"), "type": "Opaque"},
    )
    create_policy(
        k8s,
        policy_manifest(
            "tenant",
            namespace,
            tenant.bootstrap,
            kafka={"bootstrapServers": tenant.bootstrap, "authSecretRef": {"name": "tenant"}},
            mode="Enforce",
            interval="2s",
            rules={"emptyGroupRetention": "1s"},
            limits={"maxDeletionRatio": 1},
            selector={"include": [f"*{token}*"]},
        ),
    )
    policy = wait_for_status(
        k8s,
        namespace,
        "tenant",
        reason="AuthorizationFailed",
        ready="False",
        timeout=90,
        extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
    )
    ready = condition(policy) or {}
    assert "GROUP_AUTHORIZATION_FAILED" in ready.get("message", ""), ready
    # The status names the operation and the group (which ACL is missing) and what was done.
    assert f"DeleteGroup of group {readonly}: GROUP_AUTHORIZATION_FAILED" in ready["message"], ready
    assert "deleted 1 group" in ready["message"], ready
    # The tenant saw its two groups only, and the pass went on past the denied one.
    assert "2 groups matched" in ready["message"], ready
    assert (condition(policy, "Stalled") or {}).get("status") == "True", policy["status"]
    assert existing_groups(kafka_bootstrap, [mine, readonly, foreign]) == {readonly, foreign}

    events = events_of(k8s, namespace, "tenant")
    denied = [e for e in events if e["reason"] == "AuthorizationFailed"]
    assert denied and all(e["type"] == "Warning" for e in denied), events
    naming = [e for e in denied if readonly in e["message"] and "GROUP_AUTHORIZATION_FAILED" in e["message"]]
    assert naming, f"no Event names {readonly} and the reason: {denied}"
    assert not any(mine in e["message"] for e in denied), denied
    assert any(e["reason"] == "GroupDeleted" and mine in e["message"] for e in events), events
    assert tenant.password not in operator.logs()

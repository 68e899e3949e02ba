"""Credentials from a Secret: SASL/SCRAM over TLS against the devstack's SASL_SSL listener, a
missing Secret or key, a wrong password -- and the password never shows up anywhere."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.env import tool_path
from gwtest.kafka import consumer_in_group, create_topics, produce
from gwtest.operator import (
    OperatorProcess,
    condition,
    create_policy,
    events_of,
    existing_groups,
    get_policy,
    policy_manifest,
    wait_for_status,
)

pytestmark = pytest.mark.usefixtures("policy_crd")


def create_secret(api: ApiClient, namespace: str, name: str, data: dict[str, str]) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": name}, "stringData": data, "type": "Opaque"}
    )


def kubectl_output(kubeconfig: str, *args: str) -> str:
    done = subprocess.run(
        [tool_path("kubectl"), "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60
    )
    return done.stdout + done.stderr


def assert_never_shown(
    secret: str, operator: OperatorProcess, api: ApiClient, kubeconfig: str, namespace: str
) -> None:
    """The secret value is in no log line, no status, no event, no `kubectl describe`."""
    places = {
        "operator log": operator.logs(),
        "policies": json.dumps([get_policy(api, namespace, n) for n in policy_names(api, namespace)]),
        "events": json.dumps([events_of(api, namespace, n) for n in policy_names(api, namespace)]),
        "kubectl describe": kubectl_output(kubeconfig, "describe", "cgp", "-n", namespace),
    }
    for where, text in places.items():
        assert text, f"{where} is empty: the check would prove nothing"
        assert secret not in text, f"the secret value appears in the {where}"


def policy_names(api: ApiClient, namespace: str) -> list[str]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "groupwarden.io", "v1beta1", namespace, "consumergrouppolicies"
    )
    return [item["metadata"]["name"] for item in listed["items"]]


def test_sasl_scram_over_tls_from_a_secret_and_the_password_never_leaks(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
    sasl: dict[str, str],
) -> None:
    prefix = unique_name("sasl")
    topic = f"{prefix}-t"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 10)
    group = f"{prefix}-g"
    with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=10):
        pass
    properties = {k: v for k, v in sasl.items() if k != "bootstrap"}
    create_secret(k8s, namespace, "kafka-sasl", properties)
    kafka = {"bootstrapServers": sasl["bootstrap"], "authSecretRef": {"name": "kafka-sasl"}}
    create_policy(
        k8s,
        policy_manifest(
            "sasl",
            namespace,
            sasl["bootstrap"],
            kafka=kafka,
            mode="Enforce",
            interval="2s",
            rules={"emptyGroupRetention": "2s"},
            limits={"maxDeletionRatio": 1},
            selector={"include": [f"{prefix}-*"]},
        ),
    )
    wait_for_status(
        k8s,
        namespace,
        "sasl",
        reason="Succeeded",
        ready="True",
        timeout=90,
        extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
    )
    assert existing_groups(kafka_bootstrap, [group]) == set()
    # A wrong password: AuthenticationFailed, and neither password is shown anywhere.
    wrong = "wrong-" + sasl["sasl.password"][::-1]
    create_secret(k8s, namespace, "kafka-wrong", {**properties, "sasl.password": wrong})
    create_policy(
        k8s,
        policy_manifest(
            "wrong",
            namespace,
            sasl["bootstrap"],
            interval="2s",
            selector={"include": [f"{prefix}-*"]},
            kafka={"bootstrapServers": sasl["bootstrap"], "authSecretRef": {"name": "kafka-wrong"}},
        ),
    )
    failed = wait_for_status(
        k8s, namespace, "wrong", reason="AuthenticationFailed", ready="False", timeout=120
    )
    stalled = condition(failed, "Stalled")
    assert stalled is not None and stalled["status"] == "True"
    assert "AuthenticationFailed" in [e["reason"] for e in events_of(k8s, namespace, "wrong")]
    assert_never_shown(sasl["sasl.password"], operator, k8s, kubeconfig, namespace)
    assert_never_shown(wrong, operator, k8s, kubeconfig, namespace)


def test_missing_secret_or_key_is_a_condition_and_recovers_once_fixed(
    k8s: ApiClient, namespace: str, operator: OperatorProcess, sasl: dict[str, str]
) -> None:
    kafka = {"bootstrapServers": sasl["bootstrap"], "authSecretRef": {"name": "later"}}
    create_policy(
        k8s,
        policy_manifest(
            "p",
            namespace,
            sasl["bootstrap"],
            interval="2s",
            kafka=kafka,
            selector={"include": ["no-such-group"]},
        ),
    )
    missing = wait_for_status(k8s, namespace, "p", reason="SecretNotFound", ready="False")
    assert f"Secret {namespace}/later not found" in (condition(missing) or {})["message"]
    # The Secret appears without its password: still SecretNotFound, naming the key.
    properties = {k: v for k, v in sasl.items() if k not in ("bootstrap", "sasl.password")}
    create_secret(k8s, namespace, "later", properties)
    wait_for_status(
        k8s,
        namespace,
        "p",
        reason="SecretNotFound",
        extra=lambda p: "sasl.password" in (condition(p) or {}).get("message", ""),
    )
    client.CoreV1Api(k8s).patch_namespaced_secret(
        "later", namespace, {"stringData": {"sasl.password": sasl["sasl.password"]}}
    )
    wait_for_status(k8s, namespace, "p", reason="DryRun", ready="True", timeout=90)
    warnings = [e for e in events_of(k8s, namespace, "p") if e["reason"] == "SecretNotFound"]
    # One Warning per distinct problem (missing Secret, then missing key), not one per retry.
    assert len(warnings) == 2 and all(e["type"] == "Warning" for e in warnings), warnings
    assert operator.running

"""The operator with SASL/OAUTHBEARER (OIDC client credentials) from a policy's Secret, against a
private broker that validates the tokens of the test's loopback identity provider: the Secret holds
the client secret and the token endpoint's CA as PEM content (`https.ca.pem`). A refused client
secret is AuthenticationFailed, the identity provider is asked at most once per backoff, and
neither secret shows up in the log, status, events or `kubectl describe`."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from groupwarden.adapters.oauth_token import FAILURE_BACKOFF_S
from gwtest.env import tool_path
from gwtest.kafka import commit_offsets, create_topics
from gwtest.oauth_idp import OAuthBroker, oauth_broker
from gwtest.operator import (
    OperatorProcess,
    condition,
    create_policy,
    events_of,
    existing_groups,
    fast_enforce_manifest,
    get_policy,
    policy_manifest,
    wait_for_status,
)

pytestmark = pytest.mark.usefixtures("policy_crd")

CLIENT_ID = "groupwarden-operator"
CLIENT_SECRET = "operator-oidc-secret-5h8q"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthBroker]:
    with oauth_broker(tmp_path_factory.mktemp("oauth-e2e"), CLIENT_ID, CLIENT_SECRET) as running:
        yield running


def create_secret(api: ApiClient, namespace: str, name: str, data: dict[str, str]) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": name}, "stringData": data, "type": "Opaque"}
    )


def assert_never_shown(
    secret: str, operator: OperatorProcess, api: ApiClient, kubeconfig: str, namespace: str
) -> None:
    """The value is in no log line, no status, no event, no `kubectl describe`."""
    describe = subprocess.run(
        [tool_path("kubectl"), "--kubeconfig", kubeconfig, "describe", "cgp", "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
    )
    places = {
        "operator log": operator.logs(),
        "policies": json.dumps([get_policy(api, namespace, n) for n in ("oauth", "wrong")]),
        "events": json.dumps([events_of(api, namespace, n) for n in ("oauth", "wrong")]),
        "kubectl describe": describe.stdout + describe.stderr,
    }
    for where, text in places.items():
        assert text, f"{where} is empty: the check would prove nothing"
        assert secret not in text, f"the secret value appears in the {where}"


def secret_data(broker: OAuthBroker, client_secret: str) -> dict[str, str]:
    """librdkafka's spelling, as a Secret made from a Confluent Cloud or Event Hubs example has."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": broker.idp.token_url,
        "sasl.oauthbearer.client.id": CLIENT_ID,
        "sasl.oauthbearer.client.secret": client_secret,
        "https.ca.pem": Path(broker.idp.ca_file).read_text(),
        # A refused login ends when bootstrapping gives up (at most 15 s): 4 s is plenty here.
        "default.api.timeout.ms": "4000",
    }


def test_operator_with_oauthbearer_from_a_secret(
    broker: OAuthBroker,
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("oauth")
    topic, group = f"{prefix}-t", f"{prefix}-g"
    create_topics(broker.direct, [topic])
    commit_offsets(broker.direct, group, {(topic, 0): 1})
    create_secret(k8s, namespace, "kafka-oauth", secret_data(broker, CLIENT_SECRET))
    kafka = {"bootstrapServers": broker.oauth, "authSecretRef": {"name": "kafka-oauth"}}
    create_policy(k8s, fast_enforce_manifest("oauth", namespace, broker.oauth, [f"{prefix}-*"], kafka=kafka))
    wait_for_status(
        k8s,
        namespace,
        "oauth",
        reason="Succeeded",
        ready="True",
        timeout=90,
        extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
    )
    assert existing_groups(broker.direct, [group]) == set()

    # A refused client secret: AuthenticationFailed naming the token endpoint's answer.
    wrong = "wrong-" + CLIENT_SECRET[::-1]
    create_secret(k8s, namespace, "kafka-wrong", secret_data(broker, wrong))
    refused_before = broker.idp.token_requests - broker.idp.granted
    started = time.monotonic()
    create_policy(
        k8s,
        policy_manifest(
            "wrong",
            namespace,
            broker.oauth,
            interval="2s",
            selector={"include": [f"{prefix}-*"]},
            kafka={"bootstrapServers": broker.oauth, "authSecretRef": {"name": "kafka-wrong"}},
        ),
    )
    failed = wait_for_status(
        k8s, namespace, "wrong", reason="AuthenticationFailed", ready="False", timeout=60
    )
    message = (condition(failed) or {}).get("message", "")
    assert "invalid_client" in message and "HTTP 401" in message, message
    # kafka-python asks our provider, which asks the endpoint at most once per backoff; librdkafka
    # (the offsets-log reader) is never started for a connection that failed to authenticate.
    refused = broker.idp.token_requests - broker.idp.granted - refused_before
    assert 1 <= refused <= 1 + (time.monotonic() - started) // FAILURE_BACKOFF_S, refused
    assert_never_shown(CLIENT_SECRET, operator, k8s, kubeconfig, namespace)
    assert_never_shown(wrong, operator, k8s, kubeconfig, namespace)

"""SASL/OAUTHBEARER with OIDC client credentials (KIP-768) against a real broker that validates the
tokens: a private broker (devstack/kafka.sh's OAUTH listener) checks every JWT's signature against
the JWKS that the test's identity provider serves on loopback, and its audience and issuer.

groupwarden's two clients both authenticate there: kafka-python through our token provider
(requests-oauthlib), confluent-kafka with librdkafka's built-in OIDC method (the offsets-log
reader of `plan`). A refused client secret and a token the broker rejects end the run with a clear
authentication error, a bounded number of token requests, and no secret in the output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groupwarden.adapters.oauth_token import FAILURE_BACKOFF_S, ClientCredentialsTokenProvider
from groupwarden.connectivity.settings import settings_from_properties
from gwtest.cli import run_cli, write_policy
from gwtest.kafka import commit_offsets, create_topics
from gwtest.oauth_idp import OAuthBroker, oauth_broker
from gwtest.ports import free_port

pytestmark = pytest.mark.integration

CLIENT_ID = "groupwarden-tests"
CLIENT_SECRET = "oidc-client-secret-9f3k2"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthBroker]:
    with oauth_broker(tmp_path_factory.mktemp("oauth"), CLIENT_ID, CLIENT_SECRET) as running:
        yield running


def java_properties(broker: OAuthBroker, secret: str) -> str:
    """The client.properties a Java user has (Kafka 3.x+: the secret inside sasl.jaas.config)."""
    return (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        f"sasl.oauthbearer.token.endpoint.url={broker.idp.token_url}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="{CLIENT_ID}" clientSecret="{secret}" scope="kafka";\n'
        f"https.ca.location={broker.idp.ca_file}\n"
        # A refused login ends when bootstrapping gives up (at most 15 s): 4 s is plenty here.
        "default.api.timeout.ms=4000\n"
    )


def simple_group_policy(broker: OAuthBroker, tmp_path: Path, group: str) -> Path:
    topic = group + "-t"
    create_topics(broker.direct, [topic])
    commit_offsets(broker.direct, group, {(topic, 0): 1})
    time.sleep(1.1)  # the group's offsets become older than the 1 s retention
    return write_policy(
        tmp_path / "p.yaml", "oauth", broker.oauth, [group], rules={"simpleGroupOffsetRetention": "1s"}
    )


def test_plan_authenticates_with_oidc_client_credentials(
    broker: OAuthBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    group = unique_name("oauth")
    policy = simple_group_policy(broker, tmp_path, group)
    props = tmp_path / "client.properties"
    props.write_text(java_properties(broker, CLIENT_SECRET))
    granted = broker.idp.granted

    result = run_cli("plan", "-f", str(policy), "--command-config", str(props), "-o", "json")

    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    # The offsets log was read (confluent-kafka's OIDC login) and the group listed (kafka-python's).
    assert [(a["group"], a["timestampSource"]) for a in plan["actions"]] == [(group, "offsetsLog")]
    # One token per client library, the scope asked for as configured.
    assert broker.idp.granted - granted == 2 and broker.idp.scopes[-1] == "kafka"
    assert CLIENT_SECRET not in result.stdout + result.stderr


def test_a_refused_client_secret_is_a_clear_authentication_error_without_a_retry_storm(
    broker: OAuthBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "p.yaml", "oauth", broker.oauth, [unique_name("none")])
    wrong = "wrong-secret-7c1d"
    props = tmp_path / "client.properties"
    props.write_text(java_properties(broker, wrong))
    requests = broker.idp.token_requests

    result = run_cli("plan", "-f", str(policy), "--command-config", str(props))

    assert result.returncode == 1
    assert "authentication to" in result.stderr and "invalid_client" in result.stderr, result.stderr
    assert "HTTP 401" in result.stderr and "Traceback" not in result.stderr
    # kafka-python reconnects for the whole bootstrap timeout; the token endpoint was asked once.
    assert broker.idp.token_requests - requests == 1
    assert wrong not in result.stdout + result.stderr


@pytest.mark.parametrize("flaw", ["expired", "audience"])
def test_a_token_the_broker_rejects_is_a_clear_authentication_error(
    broker: OAuthBroker, unique_name: Callable[[str], str], tmp_path: Path, flaw: str
) -> None:
    policy = write_policy(tmp_path / "p.yaml", "oauth", broker.oauth, [unique_name("none")])
    props = tmp_path / "client.properties"
    props.write_text(java_properties(broker, CLIENT_SECRET))
    idp, requests = broker.idp, broker.idp.token_requests
    audience = idp.audience
    if flaw == "expired":
        idp.expired = True
    else:
        idp.audience = "some-other-service"
    try:
        result = run_cli("plan", "-f", str(policy), "--command-config", str(props))
    finally:
        idp.expired, idp.audience = False, audience

    assert result.returncode == 1
    assert "authentication to" in result.stderr and "OAUTHBEARER" in result.stderr, result.stderr
    refused_by_broker = "invalid_token" in result.stderr and "audience and issuer" in result.stderr
    # When kafka-python sees only the closed socket, librdkafka diagnoses the failure, and it checks
    # a token's expiry itself before sending it.
    refused_by_librdkafka = flaw == "expired" and "Must supply an unexpired token" in result.stderr
    assert refused_by_broker or refused_by_librdkafka, result.stderr
    assert "Traceback" not in result.stderr
    # The token is kept for its stated lifetime: every reconnect of kafka-python sent the same
    # one; the second request is librdkafka's, diagnosing the failure.
    assert idp.token_requests - requests <= 2
    assert CLIENT_SECRET not in result.stdout + result.stderr


def test_the_token_provider_caches_tokens_and_failures(broker: OAuthBroker) -> None:
    props = {
        "bootstrap.servers": broker.oauth,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": broker.idp.token_url,
        "sasl.oauthbearer.client.id": CLIENT_ID,
        "sasl.oauthbearer.client.secret": CLIENT_SECRET,
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
        "sasl.oauthbearer.scope": "kafka",
        "https.ca.location": str(broker.idp.ca_file),
    }
    oauth = settings_from_properties(props).oauth
    assert oauth is not None
    now = [1000.0]
    provider = ClientCredentialsTokenProvider(oauth, clock=lambda: now[0])
    assert CLIENT_SECRET not in repr(provider)
    assert provider.extensions() == {"identityPoolId": "pool-2", "logicalCluster": "lkc-1"}

    first = provider.token()
    now[0] += broker.idp.lifetime_s * 0.79
    assert provider.token() == first and provider.requests_made == 1
    now[0] += broker.idp.lifetime_s * 0.02  # past 80 % of the lifetime: renewed
    broker.idp.granted_scope = "api://kafka/.default"  # another scope granted: still a token
    try:
        assert provider.token().count(".") == 2  # a JWT (equal to the first within one second)
    finally:
        broker.idp.granted_scope = None
    assert provider.requests_made == 2

    broker.idp.client_secret = "rotated"
    try:
        now[0] += broker.idp.lifetime_s  # the cached token expired
        for _ in range(5):
            with pytest.raises(Exception, match="invalid_client") as raised:
                provider.token()
            assert CLIENT_SECRET not in str(raised.value)
        assert provider.requests_made == 3  # one request per backoff, not one per reconnect
        now[0] += FAILURE_BACKOFF_S
        with pytest.raises(Exception, match="invalid_client"):
            provider.token()
        assert provider.requests_made == 4
    finally:
        broker.idp.client_secret = CLIENT_SECRET


def test_an_unreachable_or_untrusted_token_endpoint_is_a_clear_failure(broker: OAuthBroker) -> None:
    base = {
        "bootstrap.servers": broker.oauth,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.client.id": CLIENT_ID,
        "sasl.oauthbearer.client.secret": CLIENT_SECRET,
    }
    nobody = f"https://127.0.0.1:{free_port()}/token"
    untrusted = {**base, "sasl.oauthbearer.token.endpoint.url": broker.idp.token_url}  # no CA given
    cases = {
        "ConnectionError": {**base, "sasl.oauthbearer.token.endpoint.url": nobody},
        "certificate verify failed": untrusted,
    }
    for expected, props in cases.items():
        oauth = settings_from_properties(props).oauth
        assert oauth is not None
        with pytest.raises(Exception, match="could not reach the OAuth token endpoint") as raised:
            ClientCredentialsTokenProvider(oauth).token()
        assert expected in str(raised.value) and CLIENT_SECRET not in str(raised.value)

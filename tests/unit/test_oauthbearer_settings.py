"""OAUTHBEARER (OIDC client credentials) properties: every spelling users have, the mapping to our
two client libraries and to Spark, and no client secret in any repr, error or description.
The real broker and identity provider: tests/integration/test_oauthbearer.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from groupwarden.adapters.client_config import confluent_config, kafka_python_config
from groupwarden.adapters.oauth_token import ClientCredentialsTokenProvider
from groupwarden.adapters.spark_kafka import spark_kafka_options
from groupwarden.connectivity.redaction import Secret
from groupwarden.connectivity.settings import OAuthSettings, settings_from_properties

pytestmark = pytest.mark.unit

SECRET = "cl1ent-s3cret-value"
URL = "https://idp.example.com/oauth2/token"
MSK_OAUTH_HANDLER = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
BASE = {"bootstrap.servers": "broker:9093", "security.protocol": "SASL_SSL"}
EXPECTED = OAuthSettings(URL, "my-client", Secret(SECRET), scope="kafka", extensions=())

JAVA_JAAS = {
    **BASE,
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.login.callback.handler.class": (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    ),
    "sasl.oauthbearer.token.endpoint.url": URL,
    "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    f'clientId="my-client" clientSecret="{SECRET}" scope="kafka";',
}
JAVA_41 = {
    **BASE,
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.oauthbearer.token.endpoint.url": URL,
    "sasl.oauthbearer.client.credentials.client.id": "my-client",
    "sasl.oauthbearer.client.credentials.client.secret": SECRET,
    "sasl.oauthbearer.scope": "kafka",
    "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
}
LIBRDKAFKA = {
    **BASE,
    "sasl.mechanisms": "OAUTHBEARER",
    "sasl.oauthbearer.method": "oidc",
    "sasl.oauthbearer.token.endpoint.url": URL,
    "sasl.oauthbearer.client.id": "my-client",
    "sasl.oauthbearer.client.secret": SECRET,
    "sasl.oauthbearer.scope": "kafka",
}
STRIMZI = {
    **BASE,
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.login.callback.handler.class": "io.strimzi.kafka.oauth.client.JaasClientOauthLoginCallbackHandler",
    "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    f'oauth.client.id="my-client" oauth.client.secret="{SECRET}" oauth.scope="kafka" '
    f'oauth.token.endpoint.uri="{URL}";',
}


@pytest.mark.parametrize(
    "props", [JAVA_JAAS, JAVA_41, LIBRDKAFKA, STRIMZI], ids=["jaas", "java41", "rdk", "strimzi"]
)
def test_every_spelling_gives_the_same_client_credentials(props: dict[str, str]) -> None:
    settings = settings_from_properties(props)
    assert settings.sasl_mechanism == "OAUTHBEARER" and settings.oauth == EXPECTED
    assert settings.sasl_username is None and settings.unknown_keys == ()
    for text in (repr(settings), str(settings), settings.describe()):
        assert SECRET not in text
    assert "my-client" in settings.describe() and URL in settings.describe()
    assert settings.secrets() == (SECRET,) and settings.redact(f"x {SECRET} y") == "x *** y"


def test_extensions_from_jaas_and_librdkafka() -> None:
    jaas = dict(JAVA_JAAS)
    jaas["sasl.jaas.config"] = jaas["sasl.jaas.config"].replace(
        ";", ' extension_logicalCluster="lkc-abc" extension_identityPoolId="pool-xyz";'
    )
    rdk = {**LIBRDKAFKA, "sasl.oauthbearer.extensions": "logicalCluster=lkc-abc, identityPoolId=pool-xyz"}
    expected = (("identityPoolId", "pool-xyz"), ("logicalCluster", "lkc-abc"))
    for props in (jaas, rdk):
        oauth = settings_from_properties(props).oauth
        assert oauth is not None and oauth.extensions == expected


def test_client_library_configs(tmp_path: Path) -> None:
    ca = tmp_path / "idp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    props = {
        **LIBRDKAFKA,
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1",
        "https.ca.location": str(ca),
    }
    settings = settings_from_properties(props)
    rdk = confluent_config(settings)
    assert {k: v for k, v in rdk.items() if k.startswith(("sasl.", "https."))} == {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": URL,
        "sasl.oauthbearer.client.id": "my-client",
        "sasl.oauthbearer.client.secret": SECRET,
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1",
        "https.ca.location": str(ca),
    }
    python = kafka_python_config(settings)
    provider = python["sasl_oauth_token_provider"]
    assert isinstance(provider, ClientCredentialsTokenProvider) and python["sasl_mechanism"] == "OAUTHBEARER"
    assert "sasl_plain_password" not in python and SECRET not in repr(python)
    # Equal settings share one provider (its cached token and failure backoff).
    assert kafka_python_config(settings_from_properties(props))["sasl_oauth_token_provider"] is provider


def test_spark_gets_the_java_login() -> None:
    options = spark_kafka_options(settings_from_properties(LIBRDKAFKA))
    assert options["kafka.sasl.mechanism"] == "OAUTHBEARER"
    assert options["kafka.sasl.oauthbearer.token.endpoint.url"] == URL
    assert options["kafka.sasl.login.callback.handler.class"].endswith(".OAuthBearerLoginCallbackHandler")
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="my-client" clientSecret="{SECRET}" scope="kafka";'
    )


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"sasl.oauthbearer.token.endpoint.url": ""}, "sasl.oauthbearer.token.endpoint.url", "required"),
        ({"sasl.oauthbearer.token.endpoint.url": "ftp://x"}, "sasl.oauthbearer.token.endpoint.url", "https"),
        (
            {"sasl.oauthbearer.token.endpoint.url": "http://idp/t"},
            "sasl.oauthbearer.token.endpoint.url",
            "https",
        ),
        ({"sasl.oauthbearer.client.id": ""}, "client.id", "required"),
        ({"sasl.oauthbearer.client.secret": ""}, "client.secret", "required"),
        ({"sasl.oauthbearer.method": "default"}, "sasl.oauthbearer.method", "only oidc"),
        ({"sasl.oauthbearer.extensions": "a-b=1"}, "sasl.oauthbearer.extensions", "not a valid"),
        ({"https.ca.location": "/nonexistent/ca.pem"}, "https.ca.location", "not found"),
        (
            {"sasl.login.callback.handler.class": MSK_OAUTH_HANDLER},
            "sasl.login.callback.handler.class",
            "AWS MSK IAM",
        ),
        (
            {
                "sasl.mechanisms": "AWS_MSK_IAM",
                "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
            },
            "sasl.mechanism",
            "SCRAM",
        ),
    ],
)
def test_invalid_oauth_properties_name_the_key_never_the_secret(
    change: dict[str, str], key: str, words: str
) -> None:
    with pytest.raises(ValueError) as raised:
        settings_from_properties({**LIBRDKAFKA, **change})
    message = str(raised.value)
    assert message.startswith(key) or key in message.split(":")[0], message
    assert words in message and SECRET not in message


def test_a_mechanism_that_contradicts_the_login_module_is_refused() -> None:
    with pytest.raises(ValueError, match="does not match the OAuthBearerLoginModule"):
        settings_from_properties({**JAVA_JAAS, "sasl.mechanism": "PLAIN"})


def test_the_example_secret_gives_confluent_cloud_credentials() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "sasl-oauthbearer-secret.yaml"
    [secret] = [d for d in yaml.safe_load_all(example.read_text()) if d and d["kind"] == "Secret"]
    settings = settings_from_properties(secret["stringData"], bootstrap_servers="broker:9092")
    assert settings.oauth is not None and settings.oauth.client_id == "groupwarden"
    assert dict(settings.oauth.extensions) == {"logicalCluster": "lkc-xxxxx", "identityPoolId": "pool-xxxx"}

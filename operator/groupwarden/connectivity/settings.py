"""Kafka client properties (Java-style keys) -> connection settings for our two client libraries.

Users already have a `client.properties` for Kafka's own tools (`--command-config`) or a Secret
with the same keys; groupwarden reads exactly those keys, plus the librdkafka spellings
(`sasl.username`, `ssl.ca.location`, ...). `ConnectionSettings` is the one validated value both the
admin gateway (kafka-python) and the offsets-log reader (confluent-kafka) are built from
(`adapters/client_config.py` turns it into each library's configuration).

Secrets (`sasl.password`, `ssl.key.password`, the OAuth client secret, `sasl.jaas.config`) live in
`Secret` wrappers (`redaction.py`): no `repr`, `str` or error message of this module ever shows them.

SASL/OAUTHBEARER is supported with OIDC client credentials (KIP-768): the client fetches a token
from the identity provider's token endpoint with its client id and secret and hands it to the
broker. Every spelling users have is read: librdkafka's (`sasl.oauthbearer.method=oidc`,
`sasl.oauthbearer.client.id`, `sasl.oauthbearer.client.secret`), the Java client's of Kafka 4.1+
(`sasl.oauthbearer.client.credentials.client.id` / `.client.secret`, `sasl.oauthbearer.scope`),
and the older Java form with `clientId` / `clientSecret` / `scope` / `extension_<name>` options of
the `OAuthBearerLoginModule` in `sasl.jaas.config` (also Strimzi's `oauth.client.id` ... options).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from groupwarden.connectivity.redaction import Secret, redact

# The name it had as cleanup/connection_settings.py: logger names are an interface (a user's
# logging configuration may name it), kept across the move to connectivity/.
log = logging.getLogger("groupwarden.cleanup.connection_settings")

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTHBEARER: Final = "OAUTHBEARER"

# Keys that are valid for Kafka clients but mean nothing to an admin/reader that never joins a
# group: accepted silently (documented in docs/kafka-gateway.md).
IGNORED_KEYS: Final = frozenset(
    {
        "group.id", "group.instance.id", "group.protocol", "auto.offset.reset", "enable.auto.commit",
        "auto.commit.interval.ms", "key.deserializer", "value.deserializer", "key.serializer",
        "value.serializer", "isolation.level", "session.timeout.ms", "heartbeat.interval.ms",
        "max.poll.records", "max.poll.interval.ms", "fetch.min.bytes", "fetch.max.bytes",
        "retries", "retry.backoff.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
        "metadata.max.age.ms", "connections.max.idle.ms", "client.dns.lookup", "ssl.protocol",
        "ssl.enabled.protocols", "ssl.truststore.password", "ssl.keystore.password",
        "sasl.login.class", "sasl.client.callback.handler.class", "client.rack",
        # OAuth knobs of the Java client's login (timeouts, retries, refresh, token checks): our
        # token provider has its own (see adapters/oauth_token.py).
        "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
        "sasl.login.retry.backoff.max.ms", "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds", "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.header.urlencode", "enable.sasl.oauthbearer.unsecure.jwt",
    }
)  # fmt: skip
_SUPPORTED_KEYS: Final = frozenset(
    {
        "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
        "sasl.password", "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location",
        "ssl.truststore.type", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
        "ssl.keystore.location", "ssl.keystore.type", "ssl.endpoint.identification.algorithm",
        "client.id", "request.timeout.ms", "default.api.timeout.ms",
        # OAUTHBEARER (OIDC client credentials): librdkafka's and the Java client's keys
        "sasl.oauthbearer.method", "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret", "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.scope",
        "sasl.oauthbearer.extensions", "sasl.login.callback.handler.class", "https.ca.location",
    }
)  # fmt: skip

DEFAULT_CLIENT_ID: Final = "groupwarden"
DEFAULT_REQUEST_TIMEOUT_MS: Final = 30_000
DEFAULT_API_TIMEOUT_MS: Final = 60_000


# The Java client's login callback handler for OIDC client credentials (3.1-3.9 in `.secured`).
OAUTH_LOGIN_CALLBACK_HANDLERS: Final = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
        "io.strimzi.kafka.oauth.client.JaasClientOauthLoginCallbackHandler",
    }
)
_AWS_IAM_ADVICE: Final = (
    "AWS MSK IAM authentication needs AWS's own signer, which groupwarden does not include; "
    "use SASL/SCRAM on MSK (docs/deploy.md)"
)


@dataclass(frozen=True)
class OAuthSettings:
    """OIDC client credentials for SASL/OAUTHBEARER: where to get a token, and as whom. The
    client secret is a `Secret`; nothing else here is secret."""

    token_endpoint_url: str
    client_id: str
    client_secret: Secret
    scope: str | None = None
    # SASL extensions sent with the token (e.g. Confluent Cloud's logicalCluster, identityPoolId).
    extensions: tuple[tuple[str, str], ...] = ()
    # CA file that signs the token endpoint's certificate (default: the system's trust store).
    ca_file: str | None = None


@dataclass(frozen=True)
class ConnectionSettings:
    """Validated connection settings. `repr`/`str` show no secret (secret fields are `Secret`)."""

    bootstrap_servers: tuple[str, ...]
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_file: str | None = None
    ssl_cert_file: str | None = None
    ssl_key_file: str | None = None
    ssl_key_password: Secret | None = None
    ssl_check_hostname: bool = True
    oauth: OAuthSettings | None = None  # with sasl_mechanism OAUTHBEARER
    client_id: str = DEFAULT_CLIENT_ID
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    # Bounds connecting (bootstrap) and whole calls, so a dead cluster never hangs a run.
    api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS
    # Keys that were neither supported nor known-irrelevant (logged as a warning, never fatal).
    unknown_keys: tuple[str, ...] = field(default=(), compare=False)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def secrets(self) -> tuple[str, ...]:
        """The secret values (non-empty), for `redact`."""
        client_secret = self.oauth.client_secret if self.oauth else None
        return tuple(
            s.reveal() for s in (self.sasl_password, self.ssl_key_password, client_secret) if s and s.reveal()
        )

    def redact(self, text: str) -> str:
        """`text` with every secret value replaced by `***` (for messages built from client errors)."""
        return redact(text, self.secrets())

    def describe(self) -> str:
        """Where and how we connect, for error messages (no secrets)."""
        how = self.security_protocol
        if self.uses_sasl and self.oauth is not None:
            oauth = self.oauth
            how += f" {self.sasl_mechanism} as client {oauth.client_id!r} of {oauth.token_endpoint_url}"
        elif self.uses_sasl:
            how += f" {self.sasl_mechanism} as {self.sasl_username!r}"
        return f"{','.join(self.bootstrap_servers)} ({how})"

    def with_bootstrap_servers(self, servers: str) -> ConnectionSettings:
        return replace(self, bootstrap_servers=_bootstrap("--bootstrap-servers", servers))


# -- properties files ----------------------------------------------------------------------------

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text: `key=value`, `key: value`, `key value`, `#`/`!` comments,
    blank lines, backslash line continuations and escapes (`\\t`, `\\uXXXX`, `\\=`, ...)."""
    result: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.lstrip() if logical else raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        key, value = _split_entry("".join(logical))
        logical = []
        result[key] = value
    if logical:
        key, value = _split_entry("".join(logical))
        result[key] = value
    return result


def _split_entry(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":") and (i == len(line) or line[i] in " \t=:"):
        rest = rest[1:].lstrip(" \t")
    return _unescape(key), _unescape(rest)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def load_properties_file(path: str | Path) -> dict[str, str]:
    """Read a Kafka client properties file (as given to Kafka's tools with `--command-config`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read client properties file {str(path)!r}: {exc.strerror}") from None
    return parse_properties(text)


def settings_from_file(
    bootstrap_servers: str | None, command_config: str | Path | None
) -> ConnectionSettings:
    """The entry points' one loader: `--bootstrap-servers` (wins over `bootstrap.servers` in the
    file) with the client properties of `--command-config` (optional). Raises ValueError for an
    unreadable or invalid file (the message names the key, never a secret)."""
    properties = load_properties_file(command_config) if command_config else {}
    return settings_from_properties(properties, bootstrap_servers=bootstrap_servers)


# -- validation ----------------------------------------------------------------------------------

_JAAS: Final = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\b")
_JAAS_OPTION: Final = re.compile(
    r'\s*(?P<key>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))'
)
_HOST_PORT: Final = re.compile(r"(?:\[[0-9a-fA-F:.]+\]|[^\s:\[\],]+):(?P<port>\d{1,5})")


def settings_from_properties(
    properties: Mapping[str, str], *, bootstrap_servers: str | None = None
) -> ConnectionSettings:
    """Validate client properties; `bootstrap_servers` (e.g. `--bootstrap-servers`) wins over the
    file. Raises ValueError naming the offending key, never a secret value."""
    props = {k.strip(): v.strip() for k, v in properties.items()}
    unknown = sorted(k for k in props if k not in _SUPPORTED_KEYS and k not in IGNORED_KEYS)
    if unknown:
        log.warning("ignoring unsupported Kafka client properties: %s", ", ".join(unknown))

    servers = bootstrap_servers if bootstrap_servers else props.get("bootstrap.servers", "")
    key = "--bootstrap-servers" if bootstrap_servers else "bootstrap.servers"
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security.protocol: {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")

    sasl: tuple[str | None, str | None, Secret | None] = (None, None, None)
    oauth = None
    if protocol.startswith("SASL_"):
        oauth = _oauth(props)
        sasl = (OAUTHBEARER, None, None) if oauth is not None else _sasl(props)
    ca, cert, key_file, key_password, check_hostname = _ssl(props)
    return ConnectionSettings(
        bootstrap_servers=_bootstrap(key, servers),
        security_protocol=protocol,
        sasl_mechanism=sasl[0],
        sasl_username=sasl[1],
        sasl_password=sasl[2],
        ssl_ca_file=ca,
        ssl_cert_file=cert,
        ssl_key_file=key_file,
        ssl_key_password=key_password,
        ssl_check_hostname=check_hostname,
        oauth=oauth,
        client_id=props.get("client.id") or DEFAULT_CLIENT_ID,
        request_timeout_ms=_positive_int(props, "request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS),
        api_timeout_ms=_positive_int(props, "default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS),
        unknown_keys=tuple(unknown),
    )


def _bootstrap(key: str, servers: str) -> tuple[str, ...]:
    entries = tuple(s.strip() for s in servers.split(",") if s.strip())
    if not entries:
        raise ValueError(f"{key}: no bootstrap servers given (expected host:port[,host:port...])")
    for entry in entries:
        match = _HOST_PORT.fullmatch(entry)
        if match is None or not 0 < int(match["port"]) < 65536:
            raise ValueError(f"{key}: {entry!r} is not host:port")
    return entries


def _positive_int(props: Mapping[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{key}: {raw!r} is not an integer") from None
    if value <= 0:
        raise ValueError(f"{key}: must be positive, got {value}")
    return value


def _mechanism(props: Mapping[str, str]) -> str | None:
    return (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip().upper() or None


def _oauth(props: Mapping[str, str]) -> OAuthSettings | None:
    """OIDC client credentials when the properties ask for OAUTHBEARER, else None (PLAIN/SCRAM).
    Errors name the key, never a value of a secret."""
    mechanism = _mechanism(props)
    jaas = props.get("sasl.jaas.config")
    module, options = _parse_jaas(jaas) if jaas else ("", {})
    if mechanism == "AWS_MSK_IAM" or module.endswith(".IAMLoginModule"):
        raise ValueError(f"sasl.mechanism: {_AWS_IAM_ADVICE}")
    if module.endswith(".OAuthBearerLoginModule"):
        if mechanism not in (None, OAUTHBEARER):
            raise ValueError(f"sasl.mechanism: {mechanism} does not match the OAuthBearerLoginModule")
        mechanism = OAUTHBEARER
    if mechanism != OAUTHBEARER:
        return None
    handler = props.get("sasl.login.callback.handler.class", "").strip()
    if handler and handler not in OAUTH_LOGIN_CALLBACK_HANDLERS:
        advice = _AWS_IAM_ADVICE if "amazon" in handler else "only OIDC client credentials are supported"
        raise ValueError(f"sasl.login.callback.handler.class: {handler} is not supported ({advice})")
    method = props.get("sasl.oauthbearer.method", "oidc").strip().lower()
    if method != "oidc":
        raise ValueError(
            f"sasl.oauthbearer.method: {method!r} is not supported (only oidc: OIDC client credentials)"
        )

    def first(*candidates: str | None) -> str | None:
        return next((c.strip() for c in candidates if c is not None and c.strip()), None)

    url = first(
        props.get("sasl.oauthbearer.token.endpoint.url"),
        options.get("oauth.token.endpoint.uri"),  # Strimzi's login callback handler
    )
    client_id = first(
        props.get("sasl.oauthbearer.client.credentials.client.id"),
        props.get("sasl.oauthbearer.client.id"),
        options.get("clientId"),
        options.get("oauth.client.id"),
    )
    secret = first(
        props.get("sasl.oauthbearer.client.credentials.client.secret"),
        props.get("sasl.oauthbearer.client.secret"),
        options.get("clientSecret"),
        options.get("oauth.client.secret"),
    )
    scope = first(props.get("sasl.oauthbearer.scope"), options.get("scope"), options.get("oauth.scope"))
    if url is None:
        raise ValueError(
            "sasl.oauthbearer.token.endpoint.url: required with OAUTHBEARER (OIDC client credentials)"
        )
    if not re.fullmatch(r"https://[^\s/?#]+(?:[/?#]\S*)?", url):
        # The client secret is sent there: OAuth 2.0 (and requests-oauthlib) require TLS.
        raise ValueError("sasl.oauthbearer.token.endpoint.url: not an https:// URL")
    if client_id is None:
        raise ValueError(
            "sasl.oauthbearer.client.credentials.client.id: required with OAUTHBEARER "
            "(or sasl.oauthbearer.client.id, or clientId=... in sasl.jaas.config)"
        )
    if secret is None:
        raise ValueError(
            "sasl.oauthbearer.client.credentials.client.secret: required with OAUTHBEARER "
            "(or sasl.oauthbearer.client.secret, or clientSecret=... in sasl.jaas.config)"
        )
    ca_file = props.get("https.ca.location", "").strip() or None
    if ca_file and not Path(ca_file).is_file():
        raise ValueError(f"https.ca.location: file not found: {ca_file}")
    return OAuthSettings(
        token_endpoint_url=url,
        client_id=client_id,
        client_secret=Secret(secret),
        scope=scope,
        extensions=_extensions(props.get("sasl.oauthbearer.extensions"), options),
        ca_file=ca_file,
    )


def _extensions(librdkafka: str | None, options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """SASL extensions: librdkafka's `key=value,key=value` and the JAAS `extension_<key>="value"`."""
    found: dict[str, str] = {}
    for item in (librdkafka or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError("sasl.oauthbearer.extensions: expected key=value[,key=value...]")
        found[key.strip()] = value.strip()
    for key, value in options.items():
        if key.startswith("extension_"):
            found[key.removeprefix("extension_")] = value
    for key in found:
        # RFC 7628: extension keys are letters only; "auth" is the token itself.
        if not re.fullmatch(r"[A-Za-z]+", key) or key == "auth":
            raise ValueError(f"sasl.oauthbearer.extensions: {key!r} is not a valid SASL extension name")
    return tuple(sorted(found.items()))


def _sasl(props: Mapping[str, str]) -> tuple[str, str, Secret]:
    mechanism = _mechanism(props)
    username = props.get("sasl.username")
    password = props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas and (username is None or password is None):
        module, options = _parse_jaas(jaas)
        if module.endswith(".ScramLoginModule"):
            if mechanism is None:
                raise ValueError("sasl.mechanism: required with ScramLoginModule (SCRAM-SHA-256 or -512)")
            if not mechanism.startswith("SCRAM-"):
                raise ValueError(f"sasl.mechanism: {mechanism} does not match the ScramLoginModule")
        elif module.endswith(".PlainLoginModule"):
            if mechanism not in (None, "PLAIN"):
                raise ValueError(f"sasl.mechanism: {mechanism} does not match the PlainLoginModule")
            mechanism = "PLAIN"
        else:
            raise ValueError(
                f"sasl.jaas.config: login module {module} is not supported "
                "(only ScramLoginModule, PlainLoginModule and OAuthBearerLoginModule)"
            )
        username = username if username is not None else options.get("username")
        password = password if password is not None else options.get("password")
    if mechanism is None:
        raise ValueError(f"sasl.mechanism: required with SASL (one of {', '.join(SASL_MECHANISMS)})")
    if mechanism not in SASL_MECHANISMS or mechanism == OAUTHBEARER:
        supported = ", ".join(SASL_MECHANISMS)
        raise ValueError(f"sasl.mechanism: {mechanism!r} is not supported (one of {supported})")
    if not username:
        raise ValueError("sasl.username: required with SASL (or username=... in sasl.jaas.config)")
    if password is None:
        raise ValueError("sasl.password: required with SASL (or password=... in sasl.jaas.config)")
    return mechanism, username, Secret(password)


def _parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """`<LoginModule> <flag> key="value" ...;` -> (module, options). Errors never echo the text."""
    head = _JAAS.match(text)
    if head is None:
        raise ValueError('sasl.jaas.config: expected `<LoginModule> required username="..." password="...";`')
    options: dict[str, str] = {}
    pos = head.end()
    while True:
        option = _JAAS_OPTION.match(text, pos)
        if option is None:
            break
        quoted = option["quoted"]
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option["bare"]
        options[option["key"]] = value
        pos = option.end()
    if text[pos:].strip() not in (";", ""):
        raise ValueError("sasl.jaas.config: could not parse the login module options (check the quoting)")
    return head["module"], options


def _require_pem(props: Mapping[str, str], store: str, advice: str) -> None:
    """Java's default store type is JKS; the Python clients read PEM stores only."""
    store_type = props.get(f"ssl.{store}.type", "JKS").upper()
    if store_type != "PEM":
        raise ValueError(f"ssl.{store}.type: {store_type} {store}s are not supported; {advice}")


def _ssl(props: Mapping[str, str]) -> tuple[str | None, str | None, str | None, Secret | None, bool]:
    ca = props.get("ssl.ca.location") or None
    truststore = props.get("ssl.truststore.location") or None
    if truststore:
        _require_pem(
            props, "truststore", "convert it to PEM and set ssl.truststore.type=PEM (or use ssl.ca.location)"
        )
        ca = ca or truststore
    cert = props.get("ssl.certificate.location") or None
    key = props.get("ssl.key.location") or None
    keystore = props.get("ssl.keystore.location") or None
    if keystore:
        _require_pem(
            props,
            "keystore",
            "use a PEM file with the private key and certificate chain (ssl.keystore.type=PEM) "
            "or ssl.certificate.location",
        )
        cert, key = cert or keystore, key or keystore
    for name, path in (
        ("ssl.ca.location" if props.get("ssl.ca.location") else "ssl.truststore.location", ca),
        ("ssl.certificate.location", cert),
        ("ssl.key.location", key),
    ):
        if path and not Path(path).is_file():
            raise ValueError(f"{name}: file not found: {path}")
    if key and not cert:
        raise ValueError("ssl.certificate.location: required with ssl.key.location")
    password = props.get("ssl.key.password")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "", "none"):
        raise ValueError(f"ssl.endpoint.identification.algorithm: {algorithm!r} is not https, none or empty")
    return ca, cert, key, Secret(password) if password else None, algorithm == "https"

"""A small OAuth identity provider on loopback for the OAUTHBEARER tests (KIP-768).

- `token_url` (HTTPS, its own self-signed certificate in `ca_file`): the client-credentials grant.
  The client authenticates with HTTP Basic (as the Java client, librdkafka and requests-oauthlib
  send it) or form fields; a wrong secret gets RFC 6749's 401 `invalid_client`. The answer is an
  RS256 JWT signed with a key made here, with `sub` = the client id, and `audience`/`issuer`.
- `jwks_url` (plain HTTP: the broker fetches it, and the JVM would not trust our certificate):
  the public key as a JWKS.

Knobs a test turns between runs: `audience` (a token for someone else), `expired` (a token whose
`exp` is already past while `expires_in` says otherwise, as with a skewed clock), `granted_scope`
(an answer naming another scope than the one asked for). Counters:
`token_requests` (every POST), `granted`.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from gwtest.ports import free_port
from gwtest.proxied_kafka import PrivateBroker, purge_private_kafka

KEY_ID = "gwtest-key-1"


@dataclass
class IdentityProvider:
    client_id: str
    client_secret: str
    issuer: str
    audience: str
    ca_file: Path
    token_url: str = ""
    jwks_url: str = ""
    lifetime_s: int = 300
    expired: bool = False
    granted_scope: str | None = None  # a scope other than the one asked for, as Entra ID answers
    token_requests: int = 0
    granted: int = 0
    scopes: list[str] = field(default_factory=list)
    _key: rsa.RSAPrivateKey | None = None

    def issue(self) -> str:
        assert self._key is not None
        now = int(time.time())
        exp = now - 600 if self.expired else now + self.lifetime_s
        claims = {
            "sub": self.client_id,
            "iss": self.issuer,
            "aud": self.audience,
            "iat": now - 5,
            "nbf": now - 5,
            "exp": exp,
        }
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": KEY_ID})

    def jwks(self) -> dict[str, Any]:
        assert self._key is not None
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        return {"keys": [{**public, "kid": KEY_ID, "alg": "RS256", "use": "sig"}]}

    def _client_of(self, handler: BaseHTTPRequestHandler, form: dict[str, str]) -> tuple[str, str]:
        header = handler.headers.get("Authorization", "")
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            return urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)
        return form.get("client_id", ""), form.get("client_secret", "")

    def answer_token_request(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, Any]]:
        self.token_requests += 1
        length = int(handler.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(handler.rfile.read(length).decode()))
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id, secret = self._client_of(handler, form)
        if (client_id, secret) != (self.client_id, self.client_secret):
            return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
        self.granted += 1
        self.scopes.append(form.get("scope", ""))
        token = self.issue()
        answer: dict[str, Any] = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.lifetime_s,
        }
        if self.granted_scope is not None:
            answer["scope"] = self.granted_scope
        return 200, answer


def _handler(idp: IdentityProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="gwtest"')
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/jwks":
                self._send(200, idp.jwks())
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if self.path == "/token":
                self._send(*idp.answer_token_request(self))
            else:
                self._send(404, {"error": "not_found"})

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


def _self_signed(directory: Path, key: rsa.RSAPrivateKey) -> tuple[Path, Path]:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gwtest oauth idp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "idp-ca.pem", directory / "idp-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@contextmanager
def identity_provider(directory: Path, client_id: str, client_secret: str) -> Iterator[IdentityProvider]:
    """Serves the token endpoint (HTTPS) and the JWKS (HTTP) on 127.0.0.1 until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert_file, key_file = _self_signed(directory, key)
    idp = IdentityProvider(
        client_id=client_id,
        client_secret=client_secret,
        issuer="https://idp.gwtest.invalid",
        audience="groupwarden-kafka",
        ca_file=cert_file,
        _key=key,
    )
    handler = _handler(idp)
    jwks_server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    token_server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    token_server.socket = context.wrap_socket(token_server.socket, server_side=True)
    idp.jwks_url = f"http://127.0.0.1:{jwks_server.server_address[1]}/jwks"
    idp.token_url = f"https://127.0.0.1:{token_server.server_address[1]}/token"
    threads = [
        threading.Thread(target=server.serve_forever, name=f"gwtest-idp-{i}", daemon=True)
        for i, server in enumerate((jwks_server, token_server))
    ]
    for thread in threads:
        thread.start()
    try:
        yield idp
    finally:
        for server in (jwks_server, token_server):
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=5)


@dataclass
class OAuthBroker(PrivateBroker):
    direct: str  # PLAINTEXT: the tests' own clients
    oauth: str  # SASL_PLAINTEXT with OAUTHBEARER only: what groupwarden is given
    idp: IdentityProvider
    env: dict[str, str]


@contextmanager
def oauth_broker(directory: Path, client_id: str, client_secret: str) -> Iterator[OAuthBroker]:
    """An identity provider on loopback and a private broker (devstack/kafka.sh's OAUTH listener)
    that validates its tokens: signature (JWKS), audience and issuer. Purged afterwards."""
    with identity_provider(directory / "idp", client_id, client_secret) as idp:
        port, oauth_port = free_port(), free_port()
        env = {
            **os.environ,
            "DEVSTACK_DIR": str(directory / "devstack"),
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
            "KAFKA_SASL_PORT": str(free_port()),
            "KAFKA_POD_HOST": "none",
            "KAFKA_OAUTH_PORT": str(oauth_port),
            "KAFKA_OAUTH_JWKS_URL": idp.jwks_url,
            "KAFKA_OAUTH_AUDIENCE": idp.audience,
            "KAFKA_OAUTH_ISSUER": idp.issuer,
            "KAFKA_HEAP_OPTS": "-Xms128m -Xmx512m",
            # Authentication is what these tests are about: the token's principal needs no ACLs.
            "KAFKA_AUTHORIZER": "off",
        }
        running = OAuthBroker(f"127.0.0.1:{port}", f"127.0.0.1:{oauth_port}", idp, env)
        try:
            running.up()
            yield running
        finally:
            purge_private_kafka(env)

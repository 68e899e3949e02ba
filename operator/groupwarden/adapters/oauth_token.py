"""OIDC client-credentials tokens for SASL/OAUTHBEARER with kafka-python (KIP-768).

confluent-kafka fetches its tokens itself (`sasl.oauthbearer.method=oidc`); kafka-python asks a
token provider (`sasl_oauth_token_provider`) on every SASL handshake. `ClientCredentialsTokenProvider`
is that provider: requests-oauthlib does the client-credentials grant (client id and secret in
HTTP Basic, as the Java client and librdkafka send them), and the provider keeps

- the token until 80 % of its lifetime has passed (the Java client's default refresh window), so
  the connections of a run, and the runs of a long-lived operator, share one token;
- a failure for `FAILURE_BACKOFF_S`: every reconnect of kafka-python asks again within
  milliseconds, and a wrong client secret must cost the identity provider one request per backoff,
  not a retry storm.

A failure is raised as kafka-python's `SaslAuthenticationFailedError`, so the admin session reports
it as `KafkaAuthenticationFailed` with the provider's reason. No message, log record or `repr`
built here holds the client secret or a token: requests-oauthlib logs the request's headers (the
secret, base64-encoded) and the token at DEBUG level, so its records below WARNING are dropped.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import requests
from kafka.errors import SaslAuthenticationFailedError
from kafka.net.sasl.oauth import AbstractTokenProvider
from oauthlib.oauth2 import BackendApplicationClient, OAuth2Error
from requests_oauthlib import OAuth2Session

from groupwarden.connectivity.redaction import redact
from groupwarden.connectivity.settings import ConnectionSettings, OAuthSettings

# Seconds during which a failed token request is answered from memory.
FAILURE_BACKOFF_S: Final = 30.0
# A token is renewed after this share of its lifetime (the Java client's refresh window factor).
REFRESH_WINDOW_FACTOR: Final = 0.8
# Lifetime assumed when the token endpoint gives no expires_in (RFC 6749 makes it optional).
DEFAULT_LIFETIME_S: Final = 60.0
# Connect and read timeouts of one token request (the Java client's sasl.login.*.timeout.ms: 10 s).
REQUEST_TIMEOUT_S: Final = 10.0


class _DropVerboseRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


for _name in ("requests_oauthlib", "oauthlib"):
    logging.getLogger(_name).addFilter(_DropVerboseRecords())


class TokenRequestFailed(SaslAuthenticationFailedError):  # type: ignore[misc]
    """The token endpoint refused the client or could not be reached (no secret in the text)."""


class ClientCredentialsTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """kafka-python's token provider for OIDC client credentials. Thread-safe."""

    def __init__(self, oauth: OAuthSettings, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.oauth = oauth
        self.clock = clock
        self.requests_made = 0  # token requests sent to the endpoint (observable in tests)
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0
        self._failure: TokenRequestFailed | None = None
        self._retry_at = 0.0

    def __repr__(self) -> str:  # kafka-python logs its configuration: never the secret
        oauth = self.oauth
        return f"ClientCredentialsTokenProvider({oauth.token_endpoint_url!r}, client {oauth.client_id!r})"

    def token(self) -> str:
        with self._lock:
            now = self.clock()
            if self._token is not None and now < self._renew_at:
                return self._token
            if self._failure is not None and now < self._retry_at:
                raise self._failure
            try:
                token, lifetime = self._fetch()
            except TokenRequestFailed as failure:
                self._token, self._failure, self._retry_at = None, failure, now + FAILURE_BACKOFF_S
                raise
            self._token, self._failure = token, None
            self._renew_at = now + lifetime * REFRESH_WINDOW_FACTOR
            return token

    def extensions(self) -> dict[str, str]:
        return dict(self.oauth.extensions)

    def _fetch(self) -> tuple[str, float]:
        oauth = self.oauth
        where = f"OAuth token endpoint {oauth.token_endpoint_url} (client {oauth.client_id!r})"
        session = OAuth2Session(client=BackendApplicationClient(client_id=oauth.client_id))
        status: list[int] = []

        def record_status(response: requests.Response) -> requests.Response:
            status.append(response.status_code)
            return response

        session.register_compliance_hook("access_token_response", record_status)
        self.requests_made += 1
        try:
            answer: dict[str, Any] = session.fetch_token(
                oauth.token_endpoint_url,
                client_secret=oauth.client_secret.reveal(),
                scope=oauth.scope.split() if oauth.scope else None,
                timeout=REQUEST_TIMEOUT_S,
                verify=oauth.ca_file or True,
            )
        except Warning as changed:
            # oauthlib raises a Warning when the granted scope differs from the requested one
            # (Entra ID and others do that); the token is still the answer.
            answer = dict(getattr(changed, "token", {}) or {})
            if "access_token" not in answer:
                raise self._failed(f"{where} answered without a token") from None
        except OAuth2Error as error:
            code = f"HTTP {status[-1]}: " if status else ""
            raise self._failed(f"{where} refused the request: {code}{error}") from None
        except requests.RequestException as error:
            raise self._failed(f"could not reach the {where}: {type(error).__name__}: {error}") from None
        except ValueError as error:  # an answer that is not a token response
            raise self._failed(f"{where} gave an unreadable answer: {error}") from None
        finally:
            session.close()
        try:
            lifetime = float(answer.get("expires_in") or DEFAULT_LIFETIME_S)
        except (TypeError, ValueError):
            lifetime = DEFAULT_LIFETIME_S
        return str(answer["access_token"]), max(lifetime, 1.0)

    def _failed(self, text: str) -> TokenRequestFailed:
        return TokenRequestFailed(redact(text, (self.oauth.client_secret.reveal(),)))


def explain_refused_token(settings: ConnectionSettings, reason: str) -> str:
    """`reason` of a failed SASL authentication, with what to check when the broker refused an
    OAuth token (it answers only `invalid_token`; which check failed is in the broker's log)."""
    if settings.oauth is None or "invalid_token" not in reason:
        return reason
    return reason + (
        " (the broker refused the OAuth token: check that the identity provider issues it for the "
        "audience and issuer the broker expects, signed with a key of the broker's JWKS, and that "
        "it has not expired)"
    )


@functools.lru_cache(maxsize=64)
def token_provider(oauth: OAuthSettings) -> ClientCredentialsTokenProvider:
    """The one provider of these credentials: every client built from equal settings (each run's
    admin session, restore's consumer) shares its cached token and its failure backoff."""
    return ClientCredentialsTokenProvider(oauth)

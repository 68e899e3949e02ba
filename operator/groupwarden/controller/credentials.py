"""spec.kafka (+ the optional authSecretRef Secret) -> validated `ConnectionSettings`.

The Secret's keys are Kafka client properties, the same keys as the CLI's `--command-config`.
Certificates and keys in a Secret are PEM *contents*, while the properties name *files*, so the
PEM-content spellings of both client families are accepted and written to private files:
librdkafka's `ssl.ca.pem` / `ssl.certificate.pem` / `ssl.key.pem` and the Java client's (KIP-651)
`ssl.truststore.certificates` / `ssl.keystore.certificate.chain` / `ssl.keystore.key`, and
`https.ca.pem` (the CA of an OAuth token endpoint, librdkafka's spelling).

No message built here contains a value from the Secret: errors name the Secret and the key only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from groupwarden.connectivity.settings import ConnectionSettings, settings_from_properties
from groupwarden.core.policy import ConsumerGroupPolicy

# PEM content key -> the file property it stands for.
PEM_CONTENT_KEYS: Final = {
    "ssl.ca.pem": "ssl.ca.location",
    "ssl.truststore.certificates": "ssl.ca.location",
    "ssl.certificate.pem": "ssl.certificate.location",
    "ssl.keystore.certificate.chain": "ssl.certificate.location",
    "ssl.key.pem": "ssl.key.location",
    "ssl.keystore.key": "ssl.key.location",
    # librdkafka's CA of the OAuth token endpoint (OAUTHBEARER with OIDC)
    "https.ca.pem": "https.ca.location",
}

# Reads a Secret: its decoded data, or None when it does not exist (blocking; run in a thread).
SecretReader = Callable[[str, str], Mapping[str, str] | None]


class CredentialsError(Exception):
    """The Secret (or a key it must hold) is missing or unusable. Never carries a secret value."""


def resolve_settings(
    policy: ConsumerGroupPolicy,
    read_secret: SecretReader,
    pem_dir: Path,
    default_properties: Mapping[str, str] | None = None,
) -> ConnectionSettings:
    """The connection settings of a policy. Blocking (reads the Secret, writes PEM files).

    Without an authSecretRef, the operator's default client properties apply (the caller has
    checked that the policy's namespace may use them)."""
    kafka = policy.spec.kafka
    properties: dict[str, str] = dict(default_properties or {})
    where = "the operator's default credentials" if default_properties else ""
    if kafka.auth_secret_ref is not None:
        name = kafka.auth_secret_ref.name
        where = f"Secret {policy.metadata.namespace}/{name}"
        try:
            data = read_secret(policy.metadata.namespace, name)
        except Exception as error:  # e.g. Forbidden: the adapter's message names the Secret only
            raise CredentialsError(f"{where} could not be read: {error}") from None
        if data is None:
            raise CredentialsError(f"{where} not found (spec.kafka.authSecretRef)")
        properties = _materialize_pem(dict(data), pem_dir, where)
    # The spec's bootstrapServers wins over a bootstrap.servers key in the Secret.
    try:
        return settings_from_properties(properties, bootstrap_servers=kafka.bootstrap_servers)
    except ValueError as error:
        # settings_from_properties names keys, never values (see kafka_config.py).
        raise CredentialsError(f"{where or 'spec.kafka'}: {error}") from None


def _materialize_pem(data: dict[str, str], pem_dir: Path, where: str) -> dict[str, str]:
    properties = {k: v for k, v in data.items() if k not in PEM_CONTENT_KEYS}
    for key, target in PEM_CONTENT_KEYS.items():
        content = data.get(key)
        if content is None:
            continue
        if "-----BEGIN" not in content:
            raise CredentialsError(f"{where}: key {key} does not hold PEM data")
        properties[target] = str(_write_private(pem_dir, content))
    return properties


def _write_private(directory: Path, content: str) -> Path:
    """Content-addressed, owner-only file: the same PEM maps to the same path, so the
    connection settings (and thus the pooled client) stay equal across runs."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / (hashlib.sha256(content.encode()).hexdigest()[:32] + ".pem")
    if not path.exists():
        temporary = path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(content)
        temporary.replace(path)
    return path

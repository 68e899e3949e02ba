"""Reads the Secret named by spec.kafka.authSecretRef (its keys are Kafka client properties).

Values are decoded and handed over, never logged; errors mention namespace/name only.
"""

from __future__ import annotations

import base64
import binascii

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from groupwarden.adapters.kubernetes_client import REQUEST_TIMEOUT


class SecretAccessError(Exception):
    """The Secret could not be read (other than "not found")."""


class KubernetesSecretSource:
    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    def read(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            secret = self._core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            # Only the status code: the response body is the API server's, but stay terse anyway.
            message = f"reading Secret {namespace}/{name} failed: HTTP {error.status}"
            raise SecretAccessError(message) from None
        data: dict[str, str] = {}
        for key, encoded in (secret.data or {}).items():
            try:
                data[key] = base64.b64decode(encoded).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise SecretAccessError(f"Secret {namespace}/{name}: key {key} is not UTF-8 text") from None
        data.update(secret.string_data or {})
        return data

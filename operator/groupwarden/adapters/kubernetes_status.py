"""Writes a policy's status subresource (merge patch: our fields only, nulls remove)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from groupwarden.adapters.kubernetes_client import FIELD_MANAGER, REQUEST_TIMEOUT
from groupwarden.core.crd import GROUP, PLURAL, VERSION
from groupwarden.core.policy import PolicyRef


class KubernetesStatusWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)

    def patch_status(self, ref: PolicyRef, status: Mapping[str, Any]) -> bool:
        try:
            self._objects.patch_namespaced_custom_object_status(
                GROUP, VERSION, ref.namespace, PLURAL, ref.name,
                {"status": dict(status)},
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def exists(self, ref: PolicyRef, uid: str) -> bool:
        try:
            current = self._objects.get_namespaced_custom_object(
                GROUP,
                VERSION,
                ref.namespace,
                PLURAL,
                ref.name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        metadata = current.get("metadata") or {} if isinstance(current, dict) else {}
        return bool(metadata.get("uid") == uid and not metadata.get("deletionTimestamp"))

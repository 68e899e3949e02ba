"""Rewrites every stored ConsumerGroupPolicy at the storage version, then trims the CRD's
`status.storedVersions` to it: what lets a later release stop serving an old version.

The API server keeps an object in etcd in the version it was written in until something writes it
again; `storedVersions` lists every version that may still be in etcd, and a version may leave the
CRD only once it is no longer listed. So each object is read and written back unchanged (a PUT with
its resourceVersion): the API server encodes it at the storage version, spec, metadata and status
as they were (the same no-op write as Kubernetes' kube-storage-version-migrator). Nothing is
trimmed unless every object listed was rewritten (or is gone).

Needs, cluster-wide: get/list/update on consumergrouppolicies and get/update on
customresourcedefinitions/status: a cluster admin's step of an upgrade (docs/deploy.md,
"Upgrading"), never the operator's own ServiceAccount.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from groupwarden.adapters.kubernetes_client import FIELD_MANAGER, REQUEST_TIMEOUT
from groupwarden.core.crd import CRD_NAME, GROUP, PLURAL, VERSION

# A policy being written meanwhile (the operator's status patches) answers 409: read it again.
MAX_ATTEMPTS = 5
PAGE_SIZE = 500


@dataclass
class StorageMigration:
    rewritten: list[str] = field(default_factory=list)  # namespace/name
    gone: list[str] = field(default_factory=list)  # deleted while we worked: nothing left to rewrite
    failed: dict[str, str] = field(default_factory=dict)  # namespace/name -> why
    stored_versions_before: list[str] = field(default_factory=list)
    stored_versions_after: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.failed and self.stored_versions_after == [VERSION]


def migrate_policies(api: client.ApiClient, dry_run: bool = False) -> StorageMigration:
    objects = client.CustomObjectsApi(api)
    definitions = client.ApiextensionsV1Api(api)
    result = StorageMigration()
    crd = definitions.read_custom_resource_definition(CRD_NAME, _request_timeout=REQUEST_TIMEOUT)
    result.stored_versions_before = _stored_versions(crd)
    for item in _all_policies(objects):
        metadata = item["metadata"]
        label = f"{metadata['namespace']}/{metadata['name']}"
        if dry_run:
            result.rewritten.append(label)
            continue
        outcome = _rewrite(objects, item)
        if outcome is None:
            result.rewritten.append(label)
        elif outcome == "gone":
            result.gone.append(label)
        else:
            result.failed[label] = outcome
    result.stored_versions_after = result.stored_versions_before
    if not result.failed and not dry_run and result.stored_versions_before != [VERSION]:
        # The resourceVersion just read as a precondition: a CRD changed meanwhile (a version
        # added by a newer install) answers 409 and nothing is trimmed.
        patch = {
            "metadata": {"resourceVersion": crd.metadata.resource_version if crd.metadata else None},
            "status": {"storedVersions": [VERSION]},
        }
        updated = definitions.patch_custom_resource_definition_status(
            CRD_NAME,
            patch,
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
            _request_timeout=REQUEST_TIMEOUT,
        )
        result.stored_versions_after = _stored_versions(updated)
    return result


def _stored_versions(crd: client.V1CustomResourceDefinition) -> list[str]:
    return list(crd.status.stored_versions or []) if crd.status else []


def _all_policies(objects: client.CustomObjectsApi) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        page: dict[str, Any] = objects.list_cluster_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, PLURAL, limit=PAGE_SIZE, _continue=token, _request_timeout=REQUEST_TIMEOUT
        )
        yield from page.get("items", [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _rewrite(objects: client.CustomObjectsApi, item: dict[str, Any]) -> str | None:
    """None when written back, "gone" when deleted meanwhile, else why it could not be."""
    namespace, name = item["metadata"]["namespace"], item["metadata"]["name"]
    current = item
    for _ in range(MAX_ATTEMPTS):
        try:
            objects.replace_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, current,
                field_manager=FIELD_MANAGER, _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
            return None
        except ApiException as error:
            if error.status == 404:
                return "gone"
            if error.status != 409:
                return f"HTTP {error.status} {error.reason}"
        try:
            current = objects.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return "gone"
            return f"HTTP {error.status} {error.reason}"
    return f"changed {MAX_ATTEMPTS} times while being rewritten (409 Conflict each time): run it again"

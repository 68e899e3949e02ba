"""Real Kubernetes API access for tests (the devstack's API server or any cluster in KUBECONFIG)."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from gwtest.wait import wait_for


def api_client(kubeconfig: str) -> ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


def apply_crd(api: ApiClient, crd: dict[str, Any], timeout: float = 60) -> None:
    """Creates or replaces a CRD and waits until the API server reports it Established. Workers of
    a parallel run apply the same CRD at the same moment: a 409 (created, or replaced, by another
    since we read it) means read again and apply again."""
    ext = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]

    def applied() -> bool:
        try:
            current = ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            current = None
        try:
            if current is None:
                ext.create_custom_resource_definition(crd)
            else:
                version = current.metadata.resource_version
                ext.replace_custom_resource_definition(
                    name, {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}}
                )
        except ApiException as exc:
            if exc.status != 409:
                raise
            return False
        return True

    wait_for(applied, timeout=timeout, interval=0.1, what=f"CRD {name} applied")

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, timeout=timeout, what=f"CRD {name} Established")


def create_namespace(api: ApiClient, name: str) -> None:
    client.CoreV1Api(api).create_namespace(
        {"metadata": {"name": name, "labels": {"groupwarden.io/test": "true"}}}
    )


def delete_namespace(api: ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def lease_holder(api: ApiClient, namespace: str, lease: str = "groupwarden-leader") -> str | None:
    try:
        found = client.CoordinationV1Api(api).read_namespaced_lease(lease, namespace)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    holder: str | None = found.spec.holder_identity
    return holder

"""The test bed's API server is real: CRDs establish, custom resources and their status work, Events list."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.env import REPO, tool_path
from gwtest.k8s import apply_crd

SMOKE_GROUP = "smoke.groupwarden.io"
SMOKE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{SMOKE_GROUP}"},
    "spec": {
        "group": SMOKE_GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def smoke_crd(k8s: ApiClient) -> Iterator[None]:
    apply_crd(k8s, SMOKE_CRD)
    yield
    client.ApiextensionsV1Api(k8s).delete_custom_resource_definition(SMOKE_CRD["metadata"]["name"])


def test_custom_resource_round_trip_with_status_subresource(
    k8s: ApiClient, smoke_crd: None, namespace: str
) -> None:
    objects = client.CustomObjectsApi(k8s)
    body = {
        "apiVersion": f"{SMOKE_GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
    }
    objects.create_namespaced_custom_object(SMOKE_GROUP, "v1", namespace, "widgets", body)

    read = objects.get_namespaced_custom_object(SMOKE_GROUP, "v1", namespace, "widgets", "w1")
    assert read["spec"] == {"size": 3}

    objects.patch_namespaced_custom_object_status(
        SMOKE_GROUP, "v1", namespace, "widgets", "w1", {"status": {"phase": "Ready"}}
    )
    read = objects.get_namespaced_custom_object(SMOKE_GROUP, "v1", namespace, "widgets", "w1")
    assert read["status"] == {"phase": "Ready"}
    # The status subresource is separate: writing status through the main resource is ignored.
    objects.patch_namespaced_custom_object(
        SMOKE_GROUP, "v1", namespace, "widgets", "w1", {"status": {"phase": "Ignored"}, "spec": {"size": 4}}
    )
    read = objects.get_namespaced_custom_object(SMOKE_GROUP, "v1", namespace, "widgets", "w1")
    assert read["spec"] == {"size": 4} and read["status"] == {"phase": "Ready"}


def test_event_is_created_and_listed(k8s: ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(k8s)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "subject"}})
    event = {
        "metadata": {"name": "smoke-event", "namespace": namespace},
        "involvedObject": {
            "kind": "ConfigMap",
            "name": "subject",
            "namespace": namespace,
            "apiVersion": "v1",
        },
        "reason": "SmokeTest",
        "message": "the test bed records events",
        "type": "Normal",
        "source": {"component": "groupwarden-tests"},
    }
    core.create_namespaced_event(namespace, event)
    listed = core.list_namespaced_event(namespace, field_selector="reason=SmokeTest").items
    assert [e.message for e in listed] == ["the test bed records events"]


def test_rbac_is_enforced(k8s: ApiClient, namespace: str) -> None:
    """RBAC is on: an unprivileged ServiceAccount is denied (impersonation works for chart RBAC tests)."""
    review = client.AuthorizationV1Api(k8s).create_subject_access_review(
        {
            "spec": {
                "user": f"system:serviceaccount:{namespace}:nobody",
                "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "secrets"},
            }
        }
    )
    assert review.status.allowed is False


def test_helm_lints_and_renders_the_chart() -> None:
    chart = REPO / "deploy" / "helm" / "groupwarden"
    lint = subprocess.run(
        [tool_path("helm"), "lint", str(chart)], capture_output=True, text=True, check=False
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = subprocess.run(
        [tool_path("helm"), "template", "groupwarden", str(chart), "--namespace", "groupwarden"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "kind: Deployment" in rendered.stdout

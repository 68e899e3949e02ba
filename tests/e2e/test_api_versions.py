"""The two API versions on real API servers: v1beta1 stored and watched, v1alpha1 served and
deprecated, the same schema (conversion None: lossless both ways), and the storage migration of
objects that 0.1.0 stored as v1alpha1 (`groupwarden migrate-storage`).

The migration changes the CRD every other test shares, so it runs on a private etcd +
kube-apiserver (gwtest/control_plane.py), where etcd shows in which version each object is stored.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from groupwarden.core.crd import CRD_FILENAME, CRD_NAME, GROUP, PLURAL
from groupwarden.core.policy import SELECTOR_EMPTY_MESSAGE
from gwtest.control_plane import ControlPlane, private_control_plane
from gwtest.env import REPO
from gwtest.k8s import api_client, apply_crd, create_namespace
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.node import kubectl as node_kubectl
from gwtest.operator import OperatorProcess, events_of, groupwarden_executable, wait_for_status

DEPRECATION = "Warning: groupwarden.io/v1alpha1 ConsumerGroupPolicy is deprecated; use groupwarden.io/v1beta1"


def previous_release_crd() -> dict[str, Any]:
    """The CRD of the last release (deploy/releases.txt), as its commit has it: v1alpha1 only."""
    commit = subprocess.run(
        [str(REPO / "scripts" / "release.sh"), "commit", "0.1.0"], capture_output=True, text=True, check=True
    ).stdout.strip()
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:crds/{CRD_FILENAME}"], capture_output=True, text=True
    )
    assert shown.returncode == 0, f"this clone lacks 0.1.0's commit {commit}: {shown.stderr}"
    crd: dict[str, Any] = yaml.safe_load(shown.stdout)
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    return crd


def current_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((REPO / "crds" / CRD_FILENAME).read_text())
    return crd


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return node_kubectl(kubeconfig, *args, stdin=stdin, check=False, timeout=60)


def manifest(version: str, namespace: str, name: str, include: list[str], **spec: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": f"{GROUP}/{version}",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "kafka": {"bootstrapServers": "127.0.0.1:9092"},
                "selector": {"include": include},
                "rules": {"emptyGroupRetention": "1d"},
                **spec,
            },
        }
    )


def read(api: ApiClient, version: str, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, version, namespace, PLURAL, name
    )
    return found


def stored_versions(api: ApiClient) -> list[str]:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD_NAME)
    return list(crd.status.stored_versions or [])


def stored_as(plane: ControlPlane, namespace: str, name: str) -> str:
    value = plane.etcd_value(f"/registry/{GROUP}/{PLURAL}/{namespace}/{name}")
    assert value is not None, f"{namespace}/{name} is not in etcd"
    stored: dict[str, Any] = yaml.safe_load(value)  # custom resources are stored as JSON
    return str(stored["apiVersion"])


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with private_control_plane(tmp_path_factory.mktemp("control-plane")) as started:
        yield started


def test_objects_0_1_0_stored_are_served_at_both_versions_and_migrated_to_v1beta1(
    plane: ControlPlane, tmp_path: Path
) -> None:
    api = api_client(plane.kubeconfig)
    namespace = "teams"
    create_namespace(api, namespace)
    # 0.1.0 installed: its CRD, policies written as v1alpha1, one with the status the operator wrote.
    apply_crd(api, previous_release_crd())
    for name in ("ci", "services"):
        applied = kubectl(
            plane.kubeconfig, "apply", "-f", "-", stdin=manifest("v1alpha1", namespace, name, [f"{name}-*"])
        )
        assert applied.returncode == 0, applied.stderr
    status = {"observedGeneration": 1, "totals": {"groupsDeleted": 7, "offsetsDeleted": 3}, "eligible": "2/0"}
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, "v1alpha1", namespace, PLURAL, "ci", {"status": status},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert stored_as(plane, namespace, "ci") == "groupwarden.io/v1alpha1"
    before = read(api, "v1alpha1", namespace, "ci")

    # The upgrade's first step: the new CRD (v1beta1 stored, v1alpha1 still served).
    apply_crd(api, current_crd())
    assert stored_versions(api) == ["v1alpha1", "v1beta1"]
    for version in ("v1alpha1", "v1beta1"):
        seen = read(api, version, namespace, "ci")
        assert seen["apiVersion"] == f"{GROUP}/{version}"
        assert (seen["spec"], seen["status"]) == (before["spec"], before["status"])
    # Written at v1beta1, read at v1alpha1: the same status, nothing lost either way.
    written = {"observedGeneration": 1, "deleted": "1/4"}
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, "v1beta1", namespace, PLURAL, "services", {"status": written},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    as_alpha = read(api, "v1alpha1", namespace, "services")["status"]
    assert as_alpha == read(api, "v1beta1", namespace, "services")["status"]
    assert as_alpha.items() >= written.items(), as_alpha  # plus the schema's defaults (eligible: "")

    # v1alpha1 still applies, with the API server's deprecation warning; v1beta1 without one.
    alpha = kubectl(
        plane.kubeconfig, "apply", "-f", "-", stdin=manifest("v1alpha1", namespace, "late", ["late-*"])
    )
    assert alpha.returncode == 0 and DEPRECATION in alpha.stderr, alpha.stderr
    beta = kubectl(
        plane.kubeconfig, "apply", "-f", "-", stdin=manifest("v1beta1", namespace, "new", ["new-*"])
    )
    assert beta.returncode == 0 and "Warning" not in beta.stderr, beta.stderr
    assert stored_as(plane, namespace, "new") == "groupwarden.io/v1beta1"
    assert stored_as(plane, namespace, "late") == "groupwarden.io/v1beta1"  # written now: stored as v1beta1
    # The CEL rules hold at both versions.
    for version in ("v1alpha1", "v1beta1"):
        refused = kubectl(plane.kubeconfig, "apply", "-f", "-", stdin=manifest(version, namespace, "bad", []))
        assert refused.returncode != 0 and SELECTOR_EMPTY_MESSAGE in refused.stderr, refused.stderr
    assert stored_as(plane, namespace, "ci") == "groupwarden.io/v1alpha1"  # until something writes it

    # The upgrade's last step, as docs/deploy.md "Upgrading" says.
    generation = read(api, "v1beta1", namespace, "ci")["metadata"]["generation"]
    dry = migrate(plane, "--dry-run")
    assert "would rewrite 4 policies" in dry.stdout and stored_versions(api) == ["v1alpha1", "v1beta1"], dry
    done = migrate(plane)
    assert done.returncode == 0, done.stderr
    assert "rewrote 4 policies as groupwarden.io/v1beta1" in done.stdout, done.stdout
    assert "storedVersions: v1alpha1, v1beta1 -> v1beta1" in done.stdout, done.stdout
    assert stored_versions(api) == ["v1beta1"]
    for name in ("ci", "services", "late", "new"):
        assert stored_as(plane, namespace, name) == "groupwarden.io/v1beta1", name
    after = read(api, "v1beta1", namespace, "ci")
    assert (after["spec"], after["status"]) == (before["spec"], before["status"])
    assert after["metadata"]["generation"] == generation  # no spec change: no new run is due
    again = migrate(plane)
    assert again.returncode == 0 and "storedVersions: v1beta1" in again.stdout, again.stdout
    # Still served after the trim: manifests of either version keep applying.
    alpha = kubectl(
        plane.kubeconfig, "apply", "-f", "-", stdin=manifest("v1alpha1", namespace, "ci", ["ci-*"])
    )
    assert alpha.returncode == 0 and DEPRECATION in alpha.stderr, alpha.stderr


def migrate(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [groupwarden_executable(), "migrate-storage", "--kubeconfig", plane.kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.usefixtures("policy_crd")
def test_a_v1alpha1_manifest_behaves_as_its_v1beta1_twin_under_the_operator(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    operator: OperatorProcess,
    unique_name: Callable[[str], str],
) -> None:
    """The operator watches v1beta1; a policy applied as v1alpha1 is the same object to it."""
    prefix = unique_name("versions")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    for version in ("v1alpha1", "v1beta1"):
        # Each its own group: two policies selecting one group would overlap.
        empty_group(kafka_bootstrap, f"{prefix}-{version}-g", [topic])
        fast = {"rules": {"emptyGroupRetention": "1s"}, "interval": "5s", "limits": {"maxDeletionRatio": 1}}
        text = manifest(version, namespace, f"p-{version}", [f"{prefix}-{version}-*"], **fast)
        document = yaml.safe_load(text)
        document["spec"]["kafka"]["bootstrapServers"] = kafka_bootstrap
        applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(document))
        assert applied.returncode == 0, applied.stderr
        assert (DEPRECATION in applied.stderr) == (version == "v1alpha1"), applied.stderr
    statuses = {}
    for version in ("v1alpha1", "v1beta1"):
        policy = wait_for_status(
            k8s, namespace, f"p-{version}", reason="DryRun", timeout=90,
            extra=lambda p: (p.get("status") or {}).get("eligible") == "1/0",
        )  # fmt: skip
        statuses[version] = policy["status"]["summary"]
        assert read(k8s, "v1alpha1", namespace, f"p-{version}")["status"] == policy["status"]
        events = events_of(k8s, namespace, f"p-{version}")
        assert "Planned" in [e["reason"] for e in events], events
    assert statuses["v1alpha1"] == statuses["v1beta1"]
    event = next(
        e
        for e in client.CoreV1Api(k8s).list_namespaced_event(namespace).items
        if e.involved_object.name == "p-v1alpha1"
    )
    assert event.involved_object.api_version == f"{GROUP}/v1beta1"

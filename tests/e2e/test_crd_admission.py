"""The generated CRD on a real API server: it establishes, and bad specs are refused by kubectl apply."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from groupwarden.core.crd import CRD_FILENAME
from gwtest.env import REPO, tool_path
from gwtest.k8s import apply_crd


@pytest.fixture(scope="module")
def policy_crd(k8s: ApiClient) -> Iterator[None]:
    apply_crd(k8s, yaml.safe_load((REPO / "crds" / CRD_FILENAME).read_text()))
    yield


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool_path("kubectl"), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def policy(namespace: str, **spec_overrides: Any) -> str:
    document = yaml.safe_load((REPO / "examples" / "ci-groups.yaml").read_text())
    document["metadata"]["namespace"] = namespace
    for dotted, value in spec_overrides.items():
        node = document["spec"]
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return yaml.safe_dump(document)


def test_valid_policy_is_accepted_with_defaults(kubeconfig: str, policy_crd: None, namespace: str) -> None:
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=policy(namespace))
    assert applied.returncode == 0, applied.stderr
    got = kubectl(kubeconfig, "get", "cgp", "ci-groups", "-n", namespace, "-o", "yaml")
    assert got.returncode == 0, got.stderr
    stored = yaml.safe_load(got.stdout)
    assert stored["spec"]["rules"] == {"emptyGroupRetention": "1d", "simpleGroupOffsetRetention": "14d"}
    table = kubectl(kubeconfig, "get", "kafka", "-n", namespace)  # the `kafka` category lists it
    assert "ci-groups" in table.stdout and "DryRun" in table.stdout, table.stdout + table.stderr


@pytest.mark.parametrize(
    ("override", "value", "message"),
    [
        ("rules__emptyGroupRetention", "0s", "duration must be positive"),
        ("rules__emptyGroupRetention", "7 days", "spec.rules.emptyGroupRetention"),
        ("mode", "Delete", "spec.mode"),
        ("limits__maxDeletionRatio", 0, "spec.limits.maxDeletionRatio"),
        ("selector__groupTypes", ["queue"], "spec.selector.groupTypes"),  # share, streams: valid
        ("interval", "10x", "spec.interval"),
    ],
)
def test_invalid_policy_is_rejected_at_admission(
    kubeconfig: str, policy_crd: None, namespace: str, override: str, value: Any, message: str
) -> None:
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=policy(namespace, **{override: value}))
    assert applied.returncode != 0
    assert message in applied.stderr, applied.stderr


def without_selector(namespace: str, selector: dict[str, Any] | None) -> str:
    """The example policy in Enforce with its selector removed (None) or replaced."""
    document = yaml.safe_load(policy(namespace, mode="Enforce"))
    if selector is None:
        del document["spec"]["selector"]
    else:
        document["spec"]["selector"] = selector
    return yaml.safe_dump(document)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (None, "spec.selector.include: Required value: a policy must name the groups it may delete"),
        ({}, "spec.selector.include: Required value: a policy must name the groups it may delete"),
        ({"exclude": ["ci-keep-*"]}, "spec.selector.include: Required value"),
        (
            {"include": []},
            "empty list: it would select no group at all, so the policy would silently do nothing",
        ),
    ],
)
def test_a_policy_that_does_not_name_its_groups_is_rejected_at_admission(
    kubeconfig: str, policy_crd: None, namespace: str, selector: dict[str, Any] | None, message: str
) -> None:
    """A regression: without spec.selector a policy was stored with include ['*'] (every group)."""
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=without_selector(namespace, selector))
    assert applied.returncode != 0, applied.stdout
    assert message in applied.stderr, applied.stderr
    assert "spec.selector.include" in applied.stderr, applied.stderr
    listed = kubectl(kubeconfig, "get", "cgp", "-n", namespace, "-o", "name")
    assert listed.stdout.strip() == "", listed.stdout


def test_an_explicit_star_selects_every_group_on_purpose(
    kubeconfig: str, policy_crd: None, namespace: str
) -> None:
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=without_selector(namespace, {"include": ["*"]}))
    assert applied.returncode == 0, applied.stderr
    got = kubectl(kubeconfig, "get", "cgp", "ci-groups", "-n", namespace, "-o", "jsonpath={.spec.selector}")
    assert yaml.safe_load(got.stdout) == {
        "include": ["*"],
        "exclude": [],
        "groupTypes": ["classic", "consumer", "simple"],
    }, got.stdout + got.stderr


def test_unknown_fields_are_rejected(kubeconfig: str, policy_crd: None, namespace: str) -> None:
    applied = kubectl(
        kubeconfig, "apply", "-f", "-", stdin=policy(namespace, rules__emptyGroupRetension="1d")
    )
    assert applied.returncode != 0
    assert "emptyGroupRetension" in applied.stderr, applied.stderr


def test_kubectl_explain_shows_field_descriptions(kubeconfig: str, policy_crd: None) -> None:
    explained = kubectl(kubeconfig, "explain", "cgp.spec.rules")
    assert explained.returncode == 0, explained.stderr
    assert "emptyGroupRetention" in explained.stdout and "Empty this long" in explained.stdout

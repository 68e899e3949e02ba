"""The two API versions: v1beta1 stored, v1alpha1 served and deprecated, one schema for both; the
CLI reads both and warns about v1alpha1 as the API server does."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from groupwarden.commands.inputs import load_policies
from groupwarden.core.crd import SERVED_API_VERSIONS, build_crd, render_crd_yaml
from groupwarden.core.policy import ConsumerGroupPolicy

MANIFEST = """apiVersion: {api_version}
kind: ConsumerGroupPolicy
metadata:
  name: {name}
spec:
  kafka: {{bootstrapServers: "localhost:9092"}}
  selector: {{include: ["ci-*"]}}
  rules: {{emptyGroupRetention: 7d}}
"""


def test_v1beta1_is_stored_and_v1alpha1_served_deprecated_with_the_same_schema() -> None:
    """One pydantic source for both versions: identical schemas, printer columns and CEL rules make
    the API server's "None" conversion lossless both ways (docs/api.md, "API versions")."""
    spec = build_crd()["spec"]
    assert "conversion" not in spec  # None: the API server only rewrites apiVersion
    beta, alpha = spec["versions"]
    assert (beta["name"], beta["served"], beta["storage"]) == ("v1beta1", True, True)
    assert (alpha["name"], alpha["served"], alpha["storage"]) == ("v1alpha1", True, False)
    assert alpha["deprecated"] is True and "deprecated" not in beta
    assert "use groupwarden.io/v1beta1" in alpha["deprecationWarning"]
    same = ("schema", "subresources", "additionalPrinterColumns")
    assert {k: alpha[k] for k in same} == {k: beta[k] for k in same}
    # Written out without YAML anchors (each version its own copy): kubectl and Helm read it as is.
    assert "&id" not in render_crd_yaml() and "*id" not in render_crd_yaml()


def test_the_policy_model_accepts_exactly_the_served_versions() -> None:
    annotation = ConsumerGroupPolicy.model_fields["api_version"].annotation
    assert set(get_args(annotation)) == set(SERVED_API_VERSIONS)


def test_the_cli_reads_both_versions_as_the_same_policy_and_warns_about_v1alpha1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beta = tmp_path / "beta.yaml"
    beta.write_text(MANIFEST.format(api_version="groupwarden.io/v1beta1", name="p"))
    alpha = tmp_path / "alpha.yaml"
    alpha.write_text(MANIFEST.format(api_version="groupwarden.io/v1alpha1", name="p"))
    (from_beta,) = load_policies([beta])
    assert capsys.readouterr().err == ""
    (from_alpha,) = load_policies([alpha])
    warning = capsys.readouterr().err
    assert warning.startswith(
        f"Warning: {alpha}: default/p: groupwarden.io/v1alpha1 ConsumerGroupPolicy is deprecated"
    )
    assert "use groupwarden.io/v1beta1" in warning
    assert from_alpha.spec == from_beta.spec and from_alpha.ref == from_beta.ref

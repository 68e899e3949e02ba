"""The CRD is generated from the models: the committed copies never drift, and the schema is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from groupwarden.core.crd import CRD_FILENAME, build_crd, render_crd_yaml

REPO = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models() -> None:
    expected = render_crd_yaml()
    for directory in (REPO / "crds", REPO / "deploy" / "helm" / "groupwarden" / "crds"):
        assert (directory / CRD_FILENAME).read_text() == expected, f"{directory} drifted: run `make crds`"


def _walk(node: Any, path: str) -> list[str]:
    problems: list[str] = []
    if isinstance(node, dict):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "const", "title", "$defs"):
            if forbidden in node:
                problems.append(f"{path}: {forbidden}")
        if "properties" in node:
            if node.get("type") != "object":
                problems.append(f"{path}: properties without type object")
            for name, child in node["properties"].items():
                if "type" not in child and "x-kubernetes-preserve-unknown-fields" not in child:
                    problems.append(f"{path}.{name}: no type")
                problems += _walk(child, f"{path}.{name}")
        if "items" in node:
            problems += _walk(node["items"], f"{path}[]")
    return problems


def test_schema_is_structural_and_described() -> None:
    version = build_crd()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    assert _walk(schema, "") == []
    spec = schema["properties"]["spec"]
    # every spec field carries a description (kubectl explain is useful)
    undocumented: list[str] = []

    def check(node: dict[str, Any], path: str) -> None:
        for name, child in node.get("properties", {}).items():
            if not child.get("description"):
                undocumented.append(f"{path}.{name}")
            check(child, f"{path}.{name}")

    check(spec, "spec")
    assert undocumented == []
    assert "x-kubernetes-preserve-unknown-fields" not in yaml.safe_dump(schema["properties"]["status"])


def test_the_crd_requires_a_selector_include_with_a_reason() -> None:
    """No `default: {}` selector (it meant every group); CEL rules name the field and why."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    selector = spec["properties"]["selector"]
    assert "default" not in selector and "default" not in selector["properties"]["include"]
    rules = {r["rule"]: r for r in spec["x-kubernetes-validations"] + selector["x-kubernetes-validations"]}
    assert rules["has(self.selector)"]["fieldPath"] == ".selector.include"
    assert rules["has(self.include)"]["fieldPath"] == ".include"
    assert all("must name the groups it may delete" in r["message"] for r in rules.values())
    include = selector["properties"]["include"]
    assert include["minItems"] == 1
    assert include["x-kubernetes-validations"][0]["rule"] == "size(self) > 0"

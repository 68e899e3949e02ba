"""The ConsumerGroupPolicy CRD, generated from the pydantic models (the single source of truth).

`crds/` and the Helm chart's copy are written from `build_crd()`; a unit test fails when they
drift. pydantic emits JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema: no `$ref`,
no `anyOf` with null, a `type` on every node, OpenAPI 3.0 `exclusiveMinimum`, no `const`.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from groupwarden.core.policy import PolicySpec
from groupwarden.core.status import PolicyStatus

# The policy's identity on the API server (the one definition: the adapters and kopf use these).
GROUP = "groupwarden.io"
# The storage version, and the one the operator watches and writes status through. Both versions
# have the same schema (docs/api.md, "API versions"), so the API server converts between them by
# rewriting `apiVersion` (conversion strategy None): lossless both ways, no webhook.
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
# Still served, deprecated: the API server warns on every request that names it.
DEPRECATED_VERSION = "v1alpha1"
DEPRECATED_API_VERSION = f"{GROUP}/{DEPRECATED_VERSION}"
SERVED_API_VERSIONS = (API_VERSION, DEPRECATED_API_VERSION)
DEPRECATION_WARNING = (
    f"{DEPRECATED_API_VERSION} {{kind}} is deprecated; use {API_VERSION} (the same fields: change "
    "only apiVersion)"
)
KIND = "ConsumerGroupPolicy"
PLURAL = "consumergrouppolicies"
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILENAME = f"{GROUP}_{PLURAL}.yaml"

_DROPPED_KEYS = {"title", "additionalProperties", "$defs"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {
        "name": "Eligible",
        "type": "string",
        "jsonPath": ".status.eligible",
        "description": "groups/offsets eligible in the last run",
    },
    # Users read "Deleted" as "how much has this policy deleted": the cumulative totals. The last
    # run's counts stay in status.summary / status.deleted (and `-o wide` shows them).
    {
        "name": "Deleted",
        "type": "integer",
        "jsonPath": ".status.totals.groupsDeleted",
        "description": "groups deleted since the policy was created (status.totals)",
    },
    {
        "name": "Offsets Deleted",
        "type": "integer",
        "jsonPath": ".status.totals.offsetsDeleted",
        "description": "partition offsets deleted since the policy was created (status.totals)",
    },
    {
        "name": "Last Run Deleted",
        "type": "string",
        "jsonPath": ".status.deleted",
        "description": "groups/offsets deleted by the last run",
        "priority": 1,
    },
    {"name": "Last Run", "type": "date", "jsonPath": ".status.lastRun.finishTime"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if rest.get("default", 0) is None:
                del rest["default"]
            return _resolve({**options[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out[key] = {name: _resolve(prop, defs) for name, prop in value.items()}
        elif key == "const":
            out["enum"] = [value]
            out.setdefault("type", "string")
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        else:
            out[key] = _resolve(value, defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def openapi_schema(model: type[Any], mode: str) -> dict[str, Any]:
    """A structural OpenAPI v3 schema of a pydantic model (by alias)."""
    schema = model.model_json_schema(by_alias=True, mode=mode)
    resolved: dict[str, Any] = _resolve(schema, schema.get("$defs", {}))
    return resolved


def build_crd() -> dict[str, Any]:
    spec_schema = openapi_schema(PolicySpec, "validation")
    status_schema = openapi_schema(PolicyStatus, "serialization")
    status_schema.pop("required", None)  # the operator fills status over time
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/name": "groupwarden"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": "consumergrouppolicy",
                "shortNames": ["cgp"],
                "categories": ["kafka"],
            },
            # The storage version first; every version has the same schema, printer columns and
            # CEL rules (one pydantic source), so "None" conversion is lossless.
            "versions": [
                _version(VERSION, spec_schema, status_schema, storage=True),
                {
                    **_version(DEPRECATED_VERSION, spec_schema, status_schema, storage=False),
                    "deprecated": True,
                    "deprecationWarning": DEPRECATION_WARNING.format(kind=KIND),
                },
            ],
        },
    }


def _version(
    name: str, spec_schema: dict[str, Any], status_schema: dict[str, Any], storage: bool
) -> dict[str, Any]:
    # Each version gets its own copy: YAML would write shared objects as anchors and aliases.
    return copy.deepcopy(
        {
            "name": name,
            "served": True,
            "storage": storage,
            "subresources": {"status": {}},
            "additionalPrinterColumns": PRINTER_COLUMNS,
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "description": "Declares which Kafka consumer groups (or their committed "
                    "offsets) are dead weight and how groupwarden cleans them up.",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema,
                        "status": status_schema,
                    },
                }
            },
        }
    )


def render_crd_yaml() -> str:
    header = "# Generated from groupwarden.core.policy / core.status by `make crds`. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)

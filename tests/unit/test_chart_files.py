"""Static checks of what ships beside the operator: the chart's CRD copy, the Grafana dashboard,
the Argo CD health check, and every example policy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from groupwarden.core.crd import CRD_FILENAME
from groupwarden.core.policy import load_policy_file, parse_policy_yaml
from groupwarden.metrics import OperatorMetrics

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "groupwarden"


def test_the_charts_crd_is_byte_identical_to_crds() -> None:
    assert (CHART / "crds" / CRD_FILENAME).read_bytes() == (REPO / "crds" / CRD_FILENAME).read_bytes(), (
        "run `make crds`"
    )
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [CRD_FILENAME]


def _schema_allows(schema: dict[str, Any], values: Any, path: str = "") -> list[str]:
    """Every key of values.yaml is declared in values.schema.json (strict objects)."""
    problems: list[str] = []
    if isinstance(values, dict) and schema.get("additionalProperties") is False:
        for key, value in values.items():
            child = schema.get("properties", {}).get(key)
            if child is None:
                problems.append(f"{path}.{key}")
            else:
                problems += _schema_allows(child, value, f"{path}.{key}")
    return problems


def test_values_schema_declares_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False
    assert _schema_allows(schema, values) == []


def _exposed_metric_names() -> set[str]:
    """Sample names OperatorMetrics exposes (counters as *_total, histograms as _bucket/_sum/_count)."""
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


def _dashboard_metrics(dashboard: dict[str, Any]) -> set[str]:
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    # Metric names: ours and the process collector's (PromQL functions and labels are not prefixed so).
    return {m for expr in exprs for m in re.findall(r"\b((?:groupwarden|process)_[a-z_]+)\b", expr)}


def test_the_grafana_dashboard_parses_and_queries_only_metrics_the_operator_exposes() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana" / "groupwarden.json").read_text())
    used = _dashboard_metrics(dashboard)
    exposed = _exposed_metric_names()
    assert used - exposed == set()
    # Every metric of ours is on the dashboard.
    ours = {name for name in exposed if name.startswith("groupwarden_") and not name.endswith("_created")}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in ours}
    assert families <= {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_argocd_health_check_in_argocd_cm_is_the_lua_file() -> None:
    lua = (REPO / "deploy" / "argocd" / "health-lua.lua").read_text()
    cm = yaml.safe_load((REPO / "deploy" / "argocd" / "argocd-cm-patch.yaml").read_text())
    embedded = cm["data"]["resource.customizations.health.groupwarden.io_ConsumerGroupPolicy"]
    assert embedded.strip() == lua.strip()
    for status in ("Healthy", "Progressing", "Degraded", "Suspended"):
        assert f'"{status}"' in lua
    for document in (REPO / "deploy" / "argocd" / "application.yaml", REPO / "deploy" / "flux"):
        files = [document] if document.is_file() else sorted(document.glob("*.yaml"))
        for path in files:
            assert all(doc["kind"] for doc in yaml.safe_load_all(path.read_text()) if doc)


def _policy_files() -> list[Path]:
    files = []
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        kinds = {doc.get("kind") for doc in yaml.safe_load_all(path.read_text()) if doc}
        if "ConsumerGroupPolicy" in kinds:
            files.append(path)
    return files


@pytest.mark.parametrize("path", _policy_files(), ids=lambda p: str(p.relative_to(REPO / "examples")))
def test_every_example_policy_loads(path: Path) -> None:
    text = path.read_text()
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    if "__MODE__" in text:  # examples/demo: scripts/demo.sh fills the placeholders
        for mode in ("DryRun", "Enforce"):
            filled = text.replace("__MODE__", mode).replace("__NAMESPACE__", "demo")
            assert parse_policy_yaml(filled.replace("__BOOTSTRAP__", "127.0.0.1:9092"), str(path))
    elif all(doc.get("kind") == "ConsumerGroupPolicy" for doc in documents):
        assert load_policy_file(path)
    else:  # a policy beside the Secret it references: the policies of the file
        policies = [doc for doc in documents if doc.get("kind") == "ConsumerGroupPolicy"]
        assert parse_policy_yaml(yaml.safe_dump_all(policies), str(path))


def test_the_examples_cover_the_documented_setups() -> None:
    names = {str(p.relative_to(REPO / "examples")) for p in _policy_files()}
    assert {
        "ci-groups.yaml",
        "services-dropped-topics.yaml",
        "standalone-consumers.yaml",
        "strimzi/policy.yaml",
    } <= names
    strimzi = load_policy_file(REPO / "examples" / "strimzi" / "policy.yaml")[0]
    assert strimzi.spec.kafka.bootstrap_servers == "my-cluster-kafka-bootstrap.kafka.svc:9093"

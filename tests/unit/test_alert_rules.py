"""The alert rules' one source (groupwarden/alerts.py) and the two files it writes: no drift, every
alert documented and unit-tested, every series and reason they name real. promtool itself checks
and tests the rules in `make lint`; tests/e2e/test_alerting.py evaluates them in a real Prometheus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from groupwarden import alerts
from groupwarden.core.status import Reason
from groupwarden.metrics import OperatorMetrics

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PER_POLICY = re.compile(r"groupwarden_(policy_|actions_failed)")


def test_the_rules_files_are_what_the_source_generates() -> None:
    for relative, text in alerts.outputs().items():
        assert (REPO / relative).read_text() == text, f"{relative} is out of date: run `make alerts`"
    assert alerts.main(["--root", str(REPO), "--check"]) == 0


def test_the_charts_dashboard_is_the_dashboard() -> None:
    chart_copy = REPO / "deploy" / "helm" / "groupwarden" / "dashboards" / "groupwarden.json"
    assert chart_copy.read_bytes() == (REPO / "deploy" / "grafana" / "groupwarden.json").read_bytes(), (
        "run `make alerts`"
    )


def plain_rules() -> list[dict[str, object]]:
    document = yaml.safe_load((REPO / alerts.RULES_FILE).read_text())
    [group] = document["groups"]
    rules: list[dict[str, object]] = group["rules"]
    return rules


def test_every_alert_says_what_where_and_links_its_runbook() -> None:
    runbooks = (REPO / "docs" / "runbooks.md").read_text()
    operator_doc = (REPO / "docs" / "operator.md").read_text()
    for rule in plain_rules():
        name = str(rule["alert"])
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations["summary"] and annotations["description"]
        assert annotations["runbook_url"] == f"{alerts.DEFAULT_RUNBOOK_BASE}#{name.lower()}"
        assert f"\n## {name}\n" in runbooks, f"docs/runbooks.md has no section for {name}"
        assert f"`{name}`" in operator_doc, f"docs/operator.md does not list {name}"
        assert rule["labels"] == {"severity": rule["labels"]["severity"]}  # type: ignore[index]
        if PER_POLICY.search(str(rule["expr"])):
            for label in ("$labels.namespace", "$labels.name", "$labels.kafka_cluster"):
                assert label in annotations["description"], (name, label)


def test_the_rules_name_only_exposed_series_and_real_reasons() -> None:
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    exposed = {family.name for family in registry.collect()}
    exposed |= {f"{family.name}_total" for family in registry.collect() if family.type == "counter"}
    for rule in plain_rules():
        expr = str(rule["expr"])
        for metric in re.findall(r"\b(groupwarden_[a-z_]+)\b", expr):
            assert metric in exposed, (rule["alert"], metric)
        for reasons in re.findall(r'reason!?=~?"([^"]+)"', expr):
            for reason in reasons.split("|"):
                assert reason in {r.value for r in Reason}, (rule["alert"], reason)


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    """deploy/prometheus/groupwarden-alerts.test.yaml: each alert is expected to fire at some
    evaluation and expected to be quiet at another (before it fires, or after it resolved)."""
    document = yaml.safe_load((REPO / "deploy" / "prometheus" / "groupwarden-alerts.test.yaml").read_text())
    assert document["rule_files"] == [alerts.RULES_FILE.name]
    fires: set[str] = set()
    quiet: set[str] = set()
    for test in document["tests"]:
        for case in test["alert_rule_test"]:
            (fires if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {alert.name for alert in alerts.ALERTS}
    assert fires == names and quiet == names


def test_the_chart_template_keeps_prometheus_templates_away_from_helm() -> None:
    template = (REPO / alerts.CHART_TEMPLATE).read_text()
    assert "{{`{{ $labels.namespace }}`}}" in template
    # Every Prometheus template is inside a Helm raw string, and the placeholders are gone.
    assert not re.search(r"(?<!`)\{\{ \$labels", template)
    assert "__GROUPWARDEN_" not in template

"""The alert rules and the Grafana dashboard evaluated by a real Prometheus scraping the operator.

One scenario for the whole module (one operator, one Prometheus, one namespace), three policies at
once on the shared broker:
- `cut` reaches Kafka through a Toxiproxy proxy that is disabled: every run is KafkaUnavailable
  until the proxy is enabled again (the shared broker itself is never touched);
- `breaker` would delete every group it selects with maxDeletionRatio 0.4: BlastRadiusExceeded;
- `clean` deletes two abandoned groups (the deletions the dashboard shows).

Stated rules of the test (docs/runbooks.md, "How the rules are tested"):
- Prometheus scrapes and evaluates every 1 s; the shipped rules are loaded unchanged except that
  every `for:` longer than 3 s becomes 3 s (pending for three evaluations instead of minutes).
  Expressions stay as shipped: with the policies' 2 s interval, "3 intervals" is 6 s.
- The dashboard's variables take what Grafana gives them with "All" selected: `$namespace` and
  `$policy` their allValue `.*`, `$job` (no allValue) the alternation of its values;
  `$__rate_interval` is 4 x the scrape interval (Grafana's floor for it): `4s`.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.env import REPO
from gwtest.k8s import create_namespace, delete_namespace
from gwtest.kafka import commit_offsets, topic_with_messages
from gwtest.operator import (
    OperatorProcess,
    create_policy,
    existing_groups,
    fast_enforce_manifest,
    policy_manifest,
    wait_for_status,
)
from gwtest.prometheus import PrometheusServer, prometheus_server, promtool, shortened_rules
from gwtest.toxiproxy import Proxy, ToxiproxyServer
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

RULES = REPO / "deploy" / "prometheus" / "groupwarden-alerts.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "groupwarden.json"
JOB = "groupwarden"  # the job the plain rules file is written for
TEST_FOR = "3s"


@dataclass
class Scenario:
    namespace: str
    prefix: str
    kafka: str
    operator: OperatorProcess
    standby: OperatorProcess
    prometheus: PrometheusServer
    proxy: Proxy
    started: float


@pytest.fixture(scope="module")
def scenario(
    k8s: ApiClient,
    kubeconfig: str,
    kafka_bootstrap: str,
    toxiproxy: ToxiproxyServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scenario]:
    token = uuid.uuid4().hex[:8]
    namespace, prefix = f"gw-alerts-{token}", f"alerts-{token}"
    workdir = tmp_path_factory.mktemp("alerting")
    create_namespace(k8s, namespace)
    operator = OperatorProcess(kubeconfig, [namespace], workdir / "operator.log").start()
    # A second replica on the same Lease, started once the first one leads (which replica wins a
    # race between two starting replicas is left open by the product).
    standby = OperatorProcess(kubeconfig, [namespace], workdir / "standby.log")
    proxy = toxiproxy.proxy(f"kafka-{token}", kafka_bootstrap)
    proxy.enabled(False)  # the cut: `cut`'s runs cannot reach Kafka until it is enabled again
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    for group in (f"{prefix}-brk-1", f"{prefix}-brk-2"):
        commit_offsets(kafka_bootstrap, group, {(topic, 0): 1, (topic, 1): 1})
    # Its own client properties: give up bootstrapping after 3 s, not the default 15 s.
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace, {"metadata": {"name": "cut-kafka"}, "stringData": {"default.api.timeout.ms": "3000"}}
    )
    rules = workdir / "rules.yaml"
    rules.write_text(shortened_rules(RULES, TEST_FOR))
    try:
        with prometheus_server(
            workdir / "prometheus", {JOB: f"127.0.0.1:{operator.metrics_port}"}, [rules]
        ) as prometheus:
            started = time.time()
            create_policy(
                k8s,
                policy_manifest(
                    "cut",
                    namespace,
                    proxy.address,
                    kafka={"bootstrapServers": proxy.address, "authSecretRef": {"name": "cut-kafka"}},
                    mode="DryRun",
                    interval="2s",
                    rules={"emptyGroupRetention": "1h"},
                    limits={"maxDeletionRatio": 1},
                    selector={"include": [f"{prefix}-none-*"]},
                ),
            )
            create_policy(
                k8s,
                fast_enforce_manifest(
                    "breaker",
                    namespace,
                    kafka_bootstrap,
                    [f"{prefix}-brk-*"],
                    # 0.4, not 0.5: the two groups pass their 2 s retention a commit apart, and a
                    # run between the two sees 1 of 2 eligible; 1/2 is not more than 0.5, so that
                    # run deleted brk-1. Any eligible subset of the two must trip the breaker.
                    limits={"maxDeletionRatio": 0.4},
                ),
            )
            create_policy(
                k8s, fast_enforce_manifest("clean", namespace, kafka_bootstrap, [f"{prefix}-del-*"])
            )
            # Its groups appear only once Prometheus has its deletion counter at 0 (from the leader):
            # increase() cannot count the deletions of a series it first sees at its final value.
            wait_for(
                lambda: prometheus.query(
                    f'groupwarden_groups_deleted_total{{namespace="{namespace}",name="clean"}} == 0'
                ),
                timeout=90,
                what="Prometheus to scrape clean's deletion counter at 0",
            )
            for group in (f"{prefix}-del-1", f"{prefix}-del-2"):
                commit_offsets(kafka_bootstrap, group, {(topic, 0): 1, (topic, 1): 1})
            assert "groupwarden_leader 1.0" in operator.metrics()
            standby.start()
            yield Scenario(namespace, prefix, kafka_bootstrap, operator, standby, prometheus, proxy, started)
            print("---- prometheus log (tail) ----\n" + "\n".join(prometheus.log().splitlines()[-30:]))
    finally:
        if standby.running and standby.process is not None:
            standby.process.terminate()  # both replicas stop at once (each releases what it holds)
        operator.stop()
        if standby.process is not None:
            standby.stop()
        print("---- operator log (tail) ----\n" + "\n".join(operator.logs().splitlines()[-60:]))
        delete_namespace(k8s, namespace)


def watch_alert(
    prometheus: PrometheusServer,
    alertname: str,
    until: Callable[[list[str]], bool],
    /,
    timeout: float,
    **labels: str,
) -> list[str]:
    """Polls the alert's state (pending, firing, or "" when inactive) and returns the distinct
    states seen in order, once `until(states)` holds."""
    states: list[str] = []

    def check() -> bool:
        found = prometheus.alerts(alertname, **labels)
        state = found[0]["state"] if found else ""
        if not states or states[-1] != state:
            states.append(state)
        return until(states)

    try:
        wait_for(check, timeout=timeout, interval=0.1, what=f"{alertname} {labels}: states {states}")
    except AssertionError as error:
        raise AssertionError(f"{error}; alerts now: {prometheus.api('alerts')['alerts']}") from None
    return states


def test_every_shipped_rule_evaluates_in_prometheus(scenario: Scenario) -> None:
    wait_for(
        lambda: all(rule.get("lastEvaluation", "").startswith("2") for rule in scenario.prometheus.rules()),
        timeout=30,
        what="every rule to be evaluated",
    )
    rules = scenario.prometheus.rules()
    assert {rule["name"] for rule in rules} == {
        "GroupwardenPolicyNotReady",
        "GroupwardenPolicyNoRecentSuccess",
        "GroupwardenBreakerTripped",
        "GroupwardenDeletionsFailed",
        "GroupwardenAuditBlocked",
        "GroupwardenClocksNotPersisted",
        "GroupwardenNoLeader",
        "GroupwardenMetricsAbsent",
        "GroupwardenTargetDown",
    }
    assert [(rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"] == []


def test_a_broker_cut_makes_not_ready_pending_then_firing_and_healing_resolves_it(
    scenario: Scenario, k8s: ApiClient
) -> None:
    prometheus, namespace = scenario.prometheus, scenario.namespace
    wait_for_status(k8s, namespace, "cut", reason="KafkaUnavailable", timeout=60)
    states = watch_alert(
        prometheus,
        "GroupwardenPolicyNotReady",
        lambda seen: "firing" in seen,
        timeout=60,
        namespace=namespace,
        name="cut",
    )
    assert "pending" in states and states.index("pending") < states.index("firing"), states
    [alert] = prometheus.alerts("GroupwardenPolicyNotReady", namespace=namespace, name="cut")
    assert alert["labels"]["reason"] == "KafkaUnavailable"
    assert alert["labels"]["kafka_cluster"] == scenario.proxy.address
    assert f"{namespace}/cut" in alert["annotations"]["description"]
    assert scenario.proxy.address in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("runbooks.md#groupwardenpolicynotready")

    scenario.proxy.enabled(True)  # healed
    wait_for_status(k8s, namespace, "cut", reason="DryRun", timeout=60)
    watch_alert(
        prometheus,
        "GroupwardenPolicyNotReady",
        lambda seen: seen[-1] == "",
        timeout=30,
        namespace=namespace,
        name="cut",
    )


def test_a_tripped_breaker_fires_its_alert(scenario: Scenario, k8s: ApiClient) -> None:
    prometheus, namespace = scenario.prometheus, scenario.namespace
    wait_for_status(k8s, namespace, "breaker", reason="BlastRadiusExceeded", timeout=60)
    watch_alert(
        prometheus,
        "GroupwardenBreakerTripped",
        lambda seen: "firing" in seen,
        timeout=30,
        namespace=namespace,
    )
    [alert] = prometheus.alerts("GroupwardenBreakerTripped", namespace=namespace)
    assert alert["labels"]["name"] == "breaker" and alert["labels"]["severity"] == "warning"
    kept = {f"{scenario.prefix}-brk-1", f"{scenario.prefix}-brk-2"}
    assert existing_groups(scenario.kafka, kept) == kept
    # The breaker is its own alert: not also "not Ready".
    assert prometheus.alerts("GroupwardenPolicyNotReady", namespace=namespace, name="breaker") == []


def test_the_operator_level_alerts_stay_quiet_while_a_leader_is_scraped(scenario: Scenario) -> None:
    prometheus = scenario.prometheus
    assert prometheus.query(f'up{{job="{JOB}"}} == 1')
    assert prometheus.query(f'groupwarden_leader{{job="{JOB}"}} == 1')
    for name in ("GroupwardenNoLeader", "GroupwardenMetricsAbsent", "GroupwardenTargetDown"):
        assert prometheus.alerts(name) == [], name


# -- the dashboard --------------------------------------------------------------------------------


def grafana_expr(expr: str, variables: dict[str, str]) -> str:
    """The stated substitution rule (module docstring)."""
    text = expr.replace("$__rate_interval", "4s")
    for name, value in variables.items():
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    assert "$" not in text, f"an unsubstituted variable in {text}"
    return text


def dashboard_variables(prometheus: PrometheusServer, dashboard: dict[str, Any]) -> dict[str, str]:
    values: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        if "allValue" in variable:
            values[variable["name"]] = variable["allValue"]
            continue
        match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"])
        assert match, variable["query"]
        found = prometheus.api(f"label/{match[2]}/values", **{"match[]": match[1]})
        assert found, f"the variable {variable['name']} has no values"
        values[variable["name"]] = "(" + "|".join(re.escape(v) for v in found) + ")"
    return values


# Targets (panel title -> refIds) that show a value above 0 after this scenario, and stay at 0
# only when something is wrong; every other target must return series (it may show 0: no offsets
# are deleted here, no consumer comes back).
TARGETS_WITH_VALUES = {
    "Leader replicas": "A",
    "Policies watched": "A",
    "Groups deleted (24h)": "A",
    "Runs not healthy (1h)": "A",
    "Deletions": "A",  # groups; B (offsets) stays 0
    "Groups deleted by type": "A",
    "Policy conditions": "A",
    "Since the last success, in intervals": "A",
    "Not Ready for": "A",
}


def test_every_dashboard_query_parses_and_returns_series_after_the_scenario(
    scenario: Scenario, k8s: ApiClient
) -> None:
    prometheus, namespace = scenario.prometheus, scenario.namespace
    wait_for_status(
        k8s,
        namespace,
        "clean",
        reason="Succeeded",
        timeout=60,
        extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 2,
    )
    wait_for(
        lambda: prometheus.query(
            f'groupwarden_groups_deleted_total{{namespace="{namespace}",name="clean"}} == 2'
        ),
        timeout=20,
        what="the deletions to be scraped",
    )
    time.sleep(2)  # two more scrapes after the deletions: an increase() over them is non-zero
    dashboard = json.loads(DASHBOARD.read_text())
    variables = dashboard_variables(prometheus, dashboard)
    end = time.time()
    empty, without_values = [], []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = grafana_expr(target["expr"], variables)
            if target.get("instant"):
                series = prometheus.query(expr)
                values = [float(s["value"][1]) for s in series]
            else:
                series = prometheus.query_range(expr, scenario.started, end, step=1)
                values = [float(v) for s in series for _, v in s["values"]]
            if not series:
                empty.append(f"{panel['title']} [{target['refId']}]: {expr}")
            elif target["refId"] in TARGETS_WITH_VALUES.get(panel["title"], "") and not any(
                v > 0 for v in values
            ):
                without_values.append(f"{panel['title']} [{target['refId']}]: {expr}")
    assert empty == [] and without_values == []


def test_a_real_scrape_of_the_operator_passes_promtool_check_metrics(scenario: Scenario) -> None:
    scrape = scenario.operator.metrics()
    cut = f'kafka_cluster="{scenario.proxy.address}",name="cut",namespace="{scenario.namespace}"'
    assert any(
        line.startswith("groupwarden_policy_condition{") and cut in line for line in scrape.splitlines()
    )
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=scrape, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_standby_replica_exports_no_policy_series(scenario: Scenario) -> None:
    """A second replica on the same Lease: the alerts would see a standby's stale copy of every
    policy otherwise."""
    standby = scenario.standby
    wait_for(lambda: "groupwarden_policies 3.0" in standby.metrics(), timeout=30, what="the standby to watch")
    scrape = standby.metrics()
    assert "groupwarden_leader 0.0" in scrape
    assert [line for line in scrape.splitlines() if 'name="' in line] == []
    assert "groupwarden_policy_condition{" in scenario.operator.metrics()

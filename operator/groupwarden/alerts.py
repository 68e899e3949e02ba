"""The Prometheus alert rules of the operator: one source, written twice (`make alerts`).

- `deploy/prometheus/groupwarden-alerts.yaml`: a plain rules file (Prometheus without the
  Prometheus Operator), for a scrape job named `groupwarden`; `make lint` runs `promtool check
  rules` and `promtool test rules` (deploy/prometheus/groupwarden-alerts.test.yaml) on it.
- `deploy/helm/groupwarden/templates/prometheusrule.yaml`: the same rules as a PrometheusRule
  (`prometheusRule.enabled`), whose scrape job, runbook base URL, labels and extra rules are values.

A test regenerates both and fails on any difference (tests/unit/test_alert_rules.py), and the
chart's rendering is compared with the plain file (tests/e2e/test_helm_chart.py). The series the
rules read are documented in docs/operator.md ("Metrics"); the reasons come from `core.status`.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from groupwarden.core.status import Reason

DEFAULT_JOB = "groupwarden"
DEFAULT_RUNBOOK_BASE = "https://github.com/groupwarden/groupwarden/blob/main/docs/runbooks.md"
RULES_FILE = Path("deploy/prometheus/groupwarden-alerts.yaml")
CHART_TEMPLATE = Path("deploy/helm/groupwarden/templates/prometheusrule.yaml")
GROUP_NAME = "groupwarden"

# Placeholders the two outputs fill in: the plain file with the defaults, the chart with values.
_JOB = "__GROUPWARDEN_JOB__"
_RUNBOOK = "__GROUPWARDEN_RUNBOOK_BASE__"

# Reasons that have an alert of their own, so "not Ready" does not page twice for them.
_OWN_ALERT_REASONS = (Reason.BLAST_RADIUS_EXCEEDED, Reason.AUDIT_UNAVAILABLE, Reason.PARTIAL_FAILURE)
_POLICY = "{{ $labels.namespace }}/{{ $labels.name }}"
_CLUSTER = "{{ $labels.kafka_cluster }}"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    duration: str  # the rule's `for:`
    severity: str
    summary: str
    description: str

    @property
    def anchor(self) -> str:
        """The runbook section's anchor (GitHub's for a `## <name>` heading)."""
        return self.name.lower()


def _condition(condition: str, status: str | None = None, reason: str | None = None) -> str:
    """A selector of `groupwarden_policy_condition` (reason: `=X` or `!~X|Y`, operator included)."""
    matchers = [f'condition="{condition}"']
    if status is not None:
        matchers.append(f'status="{status}"')
    if reason is not None:
        operator, value = (reason[:2], reason[2:]) if reason.startswith("!~") else ("=", reason)
        matchers.append(f'reason{operator}"{value}"')
    return "groupwarden_policy_condition{" + ", ".join(matchers) + "}"


_NOT_OWN_ALERT = "!~" + "|".join(r.value for r in _OWN_ALERT_REASONS)
_TRANSITION = 'groupwarden_policy_condition_last_transition_timestamp_seconds{condition="Ready"}'


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GroupwardenPolicyNotReady",
        # Ready=False for longer than 3 of the policy's own intervals (so one rule fits 30 s and
        # 1 h policies); a policy whose spec cannot be parsed has no interval: from the transition.
        expr=f"""{_condition("Ready", "False", _NOT_OWN_ALERT)} == 1
and on (namespace, name)
  (time() - {_TRANSITION})
  > on (namespace, name)
  (
    3 * groupwarden_policy_interval_seconds
    or on (namespace, name)
    0 * {_TRANSITION}
  )""",
        duration="5m",
        severity="warning",
        summary=f"groupwarden policy {_POLICY} is not Ready: {{{{ $labels.reason }}}}",
        description=(
            f"The ConsumerGroupPolicy {_POLICY} (Kafka cluster {_CLUSTER}) has been Ready=False with "
            "reason {{ $labels.reason }} for more than three of its intervals: it is not cleaning "
            "up. `kubectl -n {{ $labels.namespace }} describe cgp {{ $labels.name }}` shows the "
            "condition's message."
        ),
    ),
    Alert(
        name="GroupwardenPolicyNoRecentSuccess",
        # (group_left keeps every label of the left side: `on` alone would keep only those two.)
        # Catches what the conditions cannot show: a status that still says Ready while no run
        # finishes (a pass that hangs, a worker that stopped). Not Ready and Suspended have their
        # own story.
        expr=f"""(time() - groupwarden_policy_last_success_timestamp_seconds)
  > on (namespace, name) group_left () (5 * groupwarden_policy_interval_seconds)
unless on (namespace, name) ({_condition("Ready", "False")} == 1)
unless on (namespace, name) ({_condition("Ready", reason=Reason.SUSPENDED.value)} == 1)""",
        duration="10m",
        severity="warning",
        summary=f"groupwarden policy {_POLICY} has not completed a run for five intervals",
        description=(
            f"The ConsumerGroupPolicy {_POLICY} (Kafka cluster {_CLUSTER}) last completed a "
            "successful run {{ $value | humanizeDuration }} ago, more than five of its intervals, "
            "while its status does not say why: runs are stuck or not scheduled."
        ),
    ),
    Alert(
        name="GroupwardenBreakerTripped",
        expr=f"{_condition('Stalled', 'True', Reason.BLAST_RADIUS_EXCEEDED.value)} == 1",
        duration="1m",
        severity="warning",
        summary=f"groupwarden refused to run policy {_POLICY}: the blast-radius breaker tripped",
        description=(
            f"The ConsumerGroupPolicy {_POLICY} (Kafka cluster {_CLUSTER}) would delete more than "
            "spec.limits.maxDeletionRatio of the groups it selects, so nothing was deleted. A "
            "person has to decide whether that many deletions are right."
        ),
    ),
    Alert(
        name="GroupwardenDeletionsFailed",
        expr="sum by (namespace, name, kafka_cluster, outcome) "
        "(increase(groupwarden_actions_failed_total[30m])) > 0",
        duration="0m",
        severity="warning",
        summary=f"groupwarden deletions of policy {_POLICY} ended {{{{ $labels.outcome }}}}",
        description=(
            f"Deletions of the ConsumerGroupPolicy {_POLICY} (Kafka cluster {_CLUSTER}) ended "
            "with outcome {{ $labels.outcome }} in the last 30 minutes. Failed: the broker "
            "refused them for another reason than a consumer coming "
            "back. Unknown: the request was sent and its answer lost, so the broker may have "
            "executed it (the audit trail has the intent)."
        ),
    ),
    Alert(
        name="GroupwardenAuditBlocked",
        expr=f"{_condition('Ready', 'False', Reason.AUDIT_UNAVAILABLE.value)} == 1",
        duration="1m",
        severity="critical",
        summary=f"groupwarden cannot write its audit trail for policy {_POLICY}",
        description=(
            f"The write-ahead audit record of a deletion of the ConsumerGroupPolicy {_POLICY} "
            f"(Kafka cluster {_CLUSTER}) could not be stored, so the operator stopped deleting "
            "for it. Deletions resume by themselves once the audit sink takes records again."
        ),
    ),
    Alert(
        name="GroupwardenClocksNotPersisted",
        expr=f"{_condition('ClocksPersisted', 'False')} == 1",
        duration="15m",
        severity="warning",
        summary=f"groupwarden cannot keep the first-observed clocks of policy {_POLICY}",
        description=(
            f"The ConsumerGroupPolicy {_POLICY} (Kafka cluster {_CLUSTER}) decides with "
            "first-observed times, and the operator cannot store them in the cluster's observation "
            "store (the ClocksPersisted condition says what is missing). It still works, but after a "
            "restart or failover every clock starts again and its deletions come a full retention late."
        ),
    ),
    Alert(
        name="GroupwardenNoLeader",
        expr=f"""max by (job, namespace) (groupwarden_leader{{job="{_JOB}"}}) == 0""",
        duration="2m",
        severity="critical",
        summary="no groupwarden replica holds the leader Lease",
        description=(
            "{{ $labels.job }} replicas are running, but none of them holds the leader Lease, so "
            "no policy runs. The replicas' logs say why they cannot take or renew the Lease."
        ),
    ),
    Alert(
        name="GroupwardenMetricsAbsent",
        expr=f"""absent(up{{job="{_JOB}"}} == 1)""",
        duration="5m",
        severity="critical",
        summary="groupwarden's metrics are absent",
        description=(
            "No target of the scrape job " + _JOB + " is up: the operator is not running, or "
            "Prometheus cannot scrape it. Without its metrics none of the other groupwarden alerts "
            "can fire."
        ),
    ),
    Alert(
        name="GroupwardenTargetDown",
        expr=f"""up{{job="{_JOB}"}} == 0""",
        duration="5m",
        severity="warning",
        summary="a groupwarden replica cannot be scraped",
        description=(
            "Prometheus cannot scrape {{ $labels.instance }} of the job {{ $labels.job }}: that "
            "replica is down or its metrics endpoint does not answer."
        ),
    ),
)


def rules(job: str = _JOB, runbook_base: str = _RUNBOOK) -> list[dict[str, Any]]:
    """The rules of the one group, with the job and the runbook base filled in."""
    result = []
    for alert in ALERTS:
        result.append(
            {
                "alert": alert.name,
                "expr": alert.expr.replace(_JOB, job),
                "for": alert.duration,
                "labels": {"severity": alert.severity},
                "annotations": {
                    "summary": alert.summary,
                    "description": alert.description.replace(_JOB, job),
                    "runbook_url": f"{runbook_base}#{alert.anchor}",
                },
            }
        )
    return result


class _Dumper(yaml.SafeDumper):
    """Block scalars for multi-line expressions: the files stay readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(document: object) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100000, allow_unicode=True)


_GENERATED = "# Generated by `make alerts` from operator/groupwarden/alerts.py: do not edit.\n"


def plain_rules_file() -> str:
    document = {"groups": [{"name": GROUP_NAME, "rules": rules(DEFAULT_JOB, DEFAULT_RUNBOOK_BASE)}]}
    return (
        _GENERATED
        + "# For Prometheus scraping the operator as the job `groupwarden`; runbooks: docs/runbooks.md.\n"
        f"{_dump(document)}"
    )


def _helm_escape(text: str) -> str:
    """Prometheus's own templates ({{ $labels.x }}) reach the output verbatim through Helm."""
    return re.sub(r"\{\{(.*?)\}\}", lambda m: "{{`{{" + m.group(1) + "}}`}}", text)


def chart_template() -> str:
    body = _helm_escape(_dump(rules()))
    body = body.replace(_JOB, "{{ $job }}").replace(_RUNBOOK, "{{ $runbook }}")
    indented = "".join(f"        {line}\n" if line else "\n" for line in body.splitlines())
    return (
        "{{- /* " + _GENERATED.strip("# \n") + " */}}\n"
        "{{- if .Values.prometheusRule.enabled }}\n"
        "{{- $job := .Values.prometheusRule.job"
        ' | default (printf "%s-metrics" (include "groupwarden.fullname" .)) }}\n'
        "{{- $runbook := .Values.prometheusRule.runbookBaseUrl }}\n"
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: PrometheusRule\n"
        "metadata:\n"
        '  name: {{ include "groupwarden.fullname" . }}\n'
        "  labels:\n"
        '    {{- include "groupwarden.labels" . | nindent 4 }}\n'
        "    {{- with .Values.prometheusRule.labels }}\n"
        "    {{- toYaml . | nindent 4 }}\n"
        "    {{- end }}\n"
        "spec:\n"
        "  groups:\n"
        f"    - name: {GROUP_NAME}\n"
        "      rules:\n"
        f"{indented}"
        "        {{- with .Values.prometheusRule.extraRules }}\n"
        "        {{- toYaml . | nindent 8 }}\n"
        "        {{- end }}\n"
        "{{- end }}\n"
    )


def outputs() -> dict[Path, str]:
    return {RULES_FILE: plain_rules_file(), CHART_TEMPLATE: chart_template()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or check) the alert rules files.")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for relative, text in outputs().items():
        path = args.root / relative
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(relative))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"out of date (run `make alerts`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

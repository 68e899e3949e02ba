"""Operator-level guards: default credentials per namespace, the tenant allowlist, minimum retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from groupwarden.core.policy import PolicyError, parse_policy
from groupwarden.core.status import Reason
from groupwarden.core.tenancy import TenancyRules, parse_allowlist, parse_namespace_list

pytestmark = pytest.mark.unit

ALLOWLIST = """
namespaces:
  team-a:
    bootstrapServers: ["Kafka-1:9092", "kafka-2:9092"]
    groups: ["orders-a-*", "ci-a-*"]
  team-b:
    bootstrapServers: ["kafka-1:9092"]
    groups: ["orders-b-*"]
"""


def policy(namespace: str = "team-a", *, secret: bool = True, **spec: Any) -> Any:
    kafka: dict[str, Any] = {"bootstrapServers": spec.pop("bootstrap", "kafka-1:9092")}
    if secret:
        kafka["authSecretRef"] = {"name": "creds"}
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": namespace},
            "spec": {"kafka": kafka, "selector": {"include": spec.pop("include", ["orders-*"])}, **spec},
        }
    )


def test_default_credentials_only_for_the_named_namespaces() -> None:
    rules = TenancyRules(parse_namespace_list(["team-a,team-c", " team-d "]))
    assert rules.refusal(policy("team-a", secret=False)) is None
    assert rules.refusal(policy("team-d", secret=False)) is None
    refused = rules.refusal(policy("team-b", secret=False))
    assert refused is not None and refused.reason is Reason.FORBIDDEN
    assert "team-b" in refused.message and "authSecretRef" in refused.message
    # A policy with its own Secret acts with its own principal: not a question of default credentials.
    assert rules.refusal(policy("team-b", secret=True)) is None


def test_no_namespace_may_use_default_credentials_unless_named_and_star_means_all() -> None:
    assert TenancyRules().refusal(policy("team-a", secret=False)) is not None
    assert TenancyRules(frozenset({"*"})).refusal(policy("anything", secret=False)) is None


def test_allowlist_confines_namespaces_and_bootstrap_servers() -> None:
    rules = TenancyRules(allowlist=parse_allowlist(ALLOWLIST))
    assert rules.refusal(policy("team-a", bootstrap="kafka-1:9092,KAFKA-2:9092")) is None
    unknown = rules.refusal(policy("team-z"))
    assert unknown is not None and unknown.reason is Reason.FORBIDDEN and "team-z" in unknown.message
    other_cluster = rules.refusal(policy("team-b", bootstrap="kafka-1:9092,kafka-2:9092"))
    assert other_cluster is not None and other_cluster.reason is Reason.FORBIDDEN
    assert "kafka-2:9092 not allowed for namespace team-b" in other_cluster.message


def test_overlapping_globs_are_judged_on_the_real_group_ids() -> None:
    rules = TenancyRules(allowlist=parse_allowlist(ALLOWLIST))
    groups = ["orders-a-1", "orders-a-2", "orders-b-1", "payments-x"]
    wide = policy("team-a", include=["orders-*"])
    assert rules.groups_outside(wide, groups) == ["orders-b-1"]
    refused = rules.group_refusal(wide, groups)
    assert refused is not None and refused.reason is Reason.FORBIDDEN and "orders-b-1" in refused.message
    # The same wide glob is fine while the cluster holds only the namespace's own groups, and an
    # exclude that carves out the foreign prefix makes it fine for good.
    assert rules.group_refusal(wide, ["orders-a-1"]) is None
    carved = policy("team-a", include=["orders-*"])
    carved = carved.model_copy(
        update={
            "spec": carved.spec.model_copy(
                update={"selector": carved.spec.selector.model_copy(update={"exclude": ["orders-b-*"]})}
            )
        }
    )
    assert rules.group_refusal(carved, groups) is None
    assert rules.group_refusal(policy("team-b", include=["orders-b-*"]), groups) is None


def test_a_forbidden_message_names_a_few_groups_and_counts_the_rest() -> None:
    rules = TenancyRules(allowlist=parse_allowlist(ALLOWLIST))
    groups = [f"orders-x-{i}" for i in range(12)]
    refused = rules.group_refusal(policy("team-a"), groups)
    assert refused is not None
    assert "12 groups" in refused.message and "and 7 more" in refused.message


def test_without_an_allowlist_any_group_may_be_selected() -> None:
    assert TenancyRules(frozenset({"*"})).groups_outside(policy(), ["a", "orders-z"]) == []


def test_min_retention_refuses_short_enforce_rules_and_allows_dry_run() -> None:
    rules = TenancyRules(min_retention=timedelta(minutes=10))
    short = {"emptyGroupRetention": "1s", "simpleGroupOffsetRetention": "1d"}
    refused = rules.refusal(policy(mode="Enforce", rules=short))
    assert refused is not None and refused.reason is Reason.RETENTION_BELOW_MINIMUM
    assert "spec.rules.emptyGroupRetention 1s" in refused.message and "10m" in refused.message
    assert "simpleGroupOffsetRetention" not in refused.message
    assert rules.refusal(policy(mode="DryRun", rules=short)) is None
    assert rules.refusal(policy(mode="Enforce", rules={"emptyGroupRetention": "10m"})) is None
    assert TenancyRules().retention_refusal(policy(mode="Enforce", rules=short)) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("namespaces: {a: {bootstrapServers: [], groups: ['x*']}}", "namespaces.a.bootstrapServers"),
        ("namespaces: {a: {bootstrapServers: ['k:1'], groups: ['[x']}}", "unclosed '['"),
        ("namespaces: {a: {bootstrapServers: ['k:1'], groups: ['x'], extra: 1}}", "extra"),
        ("namespaces: [", "not valid YAML"),
    ],
)
def test_a_bad_allowlist_is_reported_with_the_field(text: str, problem: str) -> None:
    with pytest.raises(PolicyError, match="allowlist") as raised:
        parse_allowlist(text)
    assert problem in str(raised.value)


def test_an_empty_allowlist_file_allows_nothing() -> None:
    rules = TenancyRules(frozenset({"*"}), parse_allowlist(""))
    assert rules.refusal(policy("team-a")) is not None

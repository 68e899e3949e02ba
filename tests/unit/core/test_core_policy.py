from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from groupwarden.core.policy import (
    ConsumerGroupPolicy,
    GroupType,
    Mode,
    PolicyError,
    PolicyRef,
    RuleName,
    load_policy_file,
    parse_policy,
    parse_policy_yaml,
    validate_glob,
)

pytestmark = pytest.mark.unit

ISSUE_EXAMPLE = """\
apiVersion: groupwarden.io/v1beta1
kind: ConsumerGroupPolicy
metadata: {name: ci-groups, namespace: kafka}
spec:
  kafka:
    bootstrapServers: "broker-1:9092,broker-2:9092"
  selector:
    include: ["ci-*", "tmp-*"]        # glob patterns on group ids; required (["*"]: every group)
    exclude: ["ci-keep-*"]            # exclude always wins
    groupTypes: [classic, consumer, simple]   # default: all three
  rules:                               # each rule optional; absent = off
    emptyGroupRetention: 7d
    unsubscribedOffsetRetention: 1d
    simpleGroupOffsetRetention: 14d
  mode: DryRun                         # DryRun (default) | Enforce
  interval: 10m                        # used by the operator
  suspend: false
  limits:
    maxGroupDeletionsPerRun: 100
    maxOffsetDeletionsPerRun: 10000    # counted in partitions
    maxDeletionRatio: 0.5              # blast-radius breaker, see below
"""

MINIMAL: dict[str, Any] = {
    "apiVersion": "groupwarden.io/v1beta1",
    "kind": "ConsumerGroupPolicy",
    "metadata": {"name": "minimal"},
    "spec": {"kafka": {"bootstrapServers": "localhost:9092"}, "selector": {"include": ["*"]}},
}


def with_spec(path: str, value: Any) -> dict[str, Any]:
    """MINIMAL with one dotted path under the document set (or removed when value is ...)."""
    document = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return document


def test_the_issue_example_parses() -> None:
    [policy] = parse_policy_yaml(ISSUE_EXAMPLE)
    spec = policy.spec
    assert policy.ref == PolicyRef("kafka", "ci-groups")
    assert spec.kafka.bootstrap_server_list == ["broker-1:9092", "broker-2:9092"]
    assert spec.selector.include == ["ci-*", "tmp-*"]
    assert spec.selector.exclude == ["ci-keep-*"]
    assert spec.rules.enabled() == {
        RuleName.EMPTY_GROUP_RETENTION: timedelta(days=7),
        RuleName.UNSUBSCRIBED_OFFSET_RETENTION: timedelta(days=1),
        RuleName.SIMPLE_GROUP_OFFSET_RETENTION: timedelta(days=14),
    }
    assert spec.mode is Mode.DRY_RUN
    assert spec.interval == timedelta(minutes=10)
    assert policy.warnings() == []


def test_defaults() -> None:
    policy = parse_policy(MINIMAL)
    spec = policy.spec
    assert policy.metadata.namespace == "default"
    assert spec.selector.exclude == []
    assert spec.selector.group_types == [GroupType.CLASSIC, GroupType.CONSUMER, GroupType.SIMPLE]
    assert spec.rules.enabled() == {}
    assert spec.mode is Mode.DRY_RUN
    assert spec.interval == timedelta(minutes=10)
    assert spec.suspend is False
    assert spec.kafka.auth_secret_ref is None
    limits = spec.limits
    assert (limits.max_group_deletions_per_run, limits.max_offset_deletions_per_run) == (100, 10000)
    assert limits.max_deletion_ratio == 0.5


@pytest.mark.parametrize("selector", [..., {}, {"exclude": ["ci-keep-*"]}, {"groupTypes": ["simple"]}])
def test_a_policy_must_name_the_groups_it_governs(selector: Any) -> None:
    """No selector (or no include) used to select every group of the cluster (a regression)."""
    document = with_spec("spec.selector", selector)
    document["spec"]["rules"] = {"emptyGroupRetention": "1d"}
    document["spec"]["mode"] = "Enforce"
    with pytest.raises(PolicyError) as caught:
        parse_policy(document)
    [problem] = caught.value.problems
    assert problem.startswith("spec.selector.include: required field is missing: a policy must name")
    assert "include: ['*'] selects every group" in problem


def test_an_empty_include_list_is_rejected_not_silently_selecting_nothing() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(with_spec("spec.selector", {"include": []}))
    assert caught.value.problems == (
        "spec.selector.include: empty list: it would select no group at all, so the policy would silently "
        "do nothing; name the groups it may delete (e.g. ['ci-*']), or ['*'] for every group",
    )


def test_an_explicit_star_selects_every_group_on_purpose() -> None:
    assert parse_policy(with_spec("spec.selector", {"include": ["*"]})).spec.selector.include == ["*"]


def test_a_policy_without_rules_is_valid_but_warns() -> None:
    assert parse_policy(MINIMAL).warnings() == ["no retention rule is set: this policy never plans anything"]


def test_warns_about_rules_that_the_selected_group_types_can_never_use() -> None:
    document = with_spec("spec.rules", {"simpleGroupOffsetRetention": "1d", "emptyGroupRetention": "1d"})
    document["spec"]["selector"] = {"include": ["*"], "groupTypes": ["simple"]}
    assert parse_policy(document).warnings() == [
        "emptyGroupRetention only applies to classic/consumer/share/streams groups, "
        "which selector.groupTypes excludes"
    ]
    document["spec"]["selector"] = {"include": ["*"], "groupTypes": ["classic"]}
    assert parse_policy(document).warnings() == [
        "simpleGroupOffsetRetention is set but selector.groupTypes excludes simple groups"
    ]


def test_kubernetes_object_metadata_and_status_are_accepted() -> None:
    document = copy.deepcopy(MINIMAL)
    document["metadata"].update(
        namespace="kafka", labels={"team": "a"}, annotations={"x": "y"}, uid="123", generation=4
    )
    document["status"] = {"observedGeneration": 3}
    policy = parse_policy(document)
    assert policy.ref == PolicyRef("kafka", "minimal")
    assert policy.metadata.model_extra == {
        "labels": {"team": "a"},
        "annotations": {"x": "y"},
        "uid": "123",
        "generation": 4,
    }


def test_read_only_mapping_bodies_are_accepted() -> None:
    """kopf hands handlers read-only Mapping views, not dicts."""
    from types import MappingProxyType

    document = with_spec("spec.selector", MappingProxyType({"include": ("ci-*",)}))
    body = MappingProxyType({**document, "metadata": MappingProxyType(document["metadata"])})
    assert parse_policy(body).spec.selector.include == ["ci-*"]


def test_auth_secret_ref_and_round_trip_to_the_manifest() -> None:
    document = with_spec("spec.kafka.authSecretRef", {"name": "kafka-creds"})
    document["spec"]["rules"] = {"emptyGroupRetention": "1w"}
    policy = parse_policy(document)
    assert policy.spec.kafka.auth_secret_ref is not None
    assert policy.spec.kafka.auth_secret_ref.name == "kafka-creds"
    dumped = policy.model_dump(mode="json", exclude_none=True)
    assert dumped["spec"]["kafka"] == {
        "bootstrapServers": "localhost:9092",
        "authSecretRef": {"name": "kafka-creds"},
    }
    assert dumped["spec"]["rules"] == {"emptyGroupRetention": "7d"}
    assert dumped["spec"]["interval"] == "10m"
    assert parse_policy(dumped) == policy


def test_snake_case_names_work_from_python_too() -> None:
    policy = ConsumerGroupPolicy.model_validate(
        {
            "api_version": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "x"},
            "spec": {
                "kafka": {"bootstrap_servers": "b:9092"},
                "selector": {"include": ["b-*"]},
                "rules": {"empty_group_retention": "1d"},
            },
        }
    )
    assert policy.spec.rules.empty_group_retention == timedelta(days=1)


def test_with_bootstrap_servers_overrides_and_validates() -> None:
    policy = parse_policy(MINIMAL)
    assert policy.with_bootstrap_servers("a:1,b:2").spec.kafka.bootstrap_server_list == ["a:1", "b:2"]
    assert policy.spec.kafka.bootstrap_servers == "localhost:9092"
    with pytest.raises(
        PolicyError, match=r"spec.kafka.bootstrapServers: invalid bootstrap servers 'a:1,,b:2'"
    ):
        policy.with_bootstrap_servers("a:1,,b:2")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "apiVersion",
            "groupwarden.io/v1",
            "apiVersion: input should be 'groupwarden.io/v1beta1' or 'groupwarden.io/v1alpha1', "
            "got 'groupwarden.io/v1'",
        ),
        ("kind", "Policy", "kind: input should be 'ConsumerGroupPolicy', got 'Policy'"),
        ("metadata.name", "", "metadata.name: string should have at least 1 character, got ''"),
        ("metadata.name", ..., "metadata.name: required field is missing"),
        ("spec.kafka", ..., "spec.kafka: required field is missing"),
        ("spec.kafka.bootstrapServers", "", "spec.kafka.bootstrapServers: invalid bootstrap servers ''"),
        (
            "spec.kafka.bootstrapServers",
            "a:1, ,b:2",
            "spec.kafka.bootstrapServers: invalid bootstrap servers 'a:1, ,b:2'",
        ),
        (
            "spec.kafka.bootstrapServers",
            9092,
            "spec.kafka.bootstrapServers: input should be a valid string, got 9092",
        ),
        ("spec.kafka.authSecretRef", "creds", "spec.kafka.authSecretRef: expected a mapping, got 'creds'"),
        (
            "spec.kafka.authSecretRef",
            {"name": ""},
            "spec.kafka.authSecretRef.name: string should have at least 1 character",
        ),
        (
            "spec.rules.emptyGroupRetention",
            "0s",
            "spec.rules.emptyGroupRetention: invalid duration '0s': must be positive",
        ),
        (
            "spec.rules.emptyGroupRetention",
            "-1d",
            "spec.rules.emptyGroupRetention: invalid duration '-1d': must be positive",
        ),
        (
            "spec.rules.unsubscribedOffsetRetention",
            "7x",
            "spec.rules.unsubscribedOffsetRetention: invalid duration '7x': unknown unit 'x'",
        ),
        (
            "spec.rules.simpleGroupOffsetRetention",
            7,
            "spec.rules.simpleGroupOffsetRetention: invalid duration 7: expected a string",
        ),
        (
            "spec.rules.emptyGroupRetentoin",
            "7d",
            "spec.rules.emptyGroupRetentoin: unknown field (value '7d'); did you mean 'emptyGroupRetention'?",
        ),
        ("spec.interval", "10 m", "spec.interval: invalid duration '10 m': must not contain whitespace"),
        ("spec.mode", "dryrun", "spec.mode: input should be 'DryRun' or 'Enforce', got 'dryrun'"),
        ("spec.suspend", "yes", "spec.suspend: input should be a valid boolean, got 'yes'"),
        (
            "spec.selector.include",
            [],
            "spec.selector.include: empty list: it would select no group at all, so the policy would "
            "silently do nothing",
        ),
        ("spec.selector.include", ..., "spec.selector.include: required field is missing"),
        ("spec.selector.include", None, "spec.selector.include: input should be a valid list, got None"),
        ("spec.selector.include", "*", "spec.selector.include: input should be a valid list, got '*'"),
        ("spec.selector", ..., "spec.selector.include: required field is missing"),
        ("spec.selector", None, "spec.selector: expected a mapping, got None"),
        ("spec.selector.include", ["ci-*", ""], "spec.selector.include[1]: invalid glob '': empty pattern"),
        (
            "spec.selector.include",
            ["ci-["],
            "spec.selector.include[0]: invalid glob 'ci-[': unclosed '[' at position 3",
        ),
        (
            "spec.selector.exclude",
            ["x[z-a]"],
            "spec.selector.exclude[0]: invalid glob 'x[z-a]': empty range 'z-a'",
        ),
        (
            "spec.selector.exclude",
            [" ci-*"],
            "spec.selector.exclude[0]: invalid glob ' ci-*': leading or trailing whitespace",
        ),
        ("spec.selector.exclude", "ci-*", "spec.selector.exclude: input should be a valid list, got 'ci-*'"),
        (
            "spec.selector.groupTypes",
            ["connect"],
            "spec.selector.groupTypes[0]: input should be 'classic', 'consumer', 'simple', 'share' or "
            "'streams', got 'connect'",
        ),
        (
            "spec.selector.groupTypes",
            ["simple", "simple"],
            "spec.selector.groupTypes: duplicate group types ['simple']",
        ),
        ("spec.selector.groupTypes", [], "spec.selector.groupTypes: list should have at least 1 item"),
        (
            "spec.limits.maxGroupDeletionsPerRun",
            "100",
            "spec.limits.maxGroupDeletionsPerRun: input should be a valid integer, got '100'",
        ),
        (
            "spec.limits.maxGroupDeletionsPerRun",
            -1,
            "spec.limits.maxGroupDeletionsPerRun: input should be greater than or equal to 0, got -1",
        ),
        (
            "spec.limits.maxOffsetDeletionsPerRun",
            1.5,
            "spec.limits.maxOffsetDeletionsPerRun: input should be a valid integer, got 1.5",
        ),
        (
            "spec.limits.maxDeletionRatio",
            0,
            "spec.limits.maxDeletionRatio: input should be greater than 0, got 0",
        ),
        (
            "spec.limits.maxDeletionRatio",
            1.5,
            "spec.limits.maxDeletionRatio: input should be less than or equal to 1, got 1.5",
        ),
        (
            "spec.limits.maxDeletionRatio",
            "0.5",
            "spec.limits.maxDeletionRatio: input should be a valid number, got '0.5'",
        ),
        ("spec.limits.maxDeletions", 5, "spec.limits.maxDeletions: unknown field (value 5)"),
        ("spec.extra", {"a": 1}, "spec.extra: unknown field (value {a: 1})"),
        ("spec", "nope", "spec: expected a mapping, got 'nope'"),
    ],
)
def test_errors_name_the_field_path_and_the_value(path: str, value: Any, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(with_spec(path, value))
    assert any(problem.startswith(message) for problem in caught.value.problems), caught.value.problems


def test_every_problem_is_reported_at_once() -> None:
    document = with_spec("spec.rules", {"emptyGroupRetention": "0s", "simpleGroupOffsetRetention": "1y"})
    document["spec"]["mode"] = "Delete"
    with pytest.raises(PolicyError) as caught:
        parse_policy(document)
    assert len(caught.value.problems) == 3
    assert "; " in str(caught.value)


def test_optional_fields_accept_explicit_null_as_absent() -> None:
    document = with_spec("spec.rules", {"emptyGroupRetention": None})
    document["spec"]["kafka"]["authSecretRef"] = None
    policy = parse_policy(document)
    assert policy.spec.rules.enabled() == {}
    assert policy.spec.kafka.auth_secret_ref is None


@pytest.mark.parametrize("document", [None, "text", ["a"], 3])
def test_a_document_must_be_a_mapping(document: object) -> None:
    with pytest.raises(PolicyError, match=r"expected a mapping"):
        parse_policy(document)


@pytest.mark.parametrize("pattern", ["*", "ci-*", "tmp-??", "[[]x]", "a[!b]c", "[]]", "[a-z]*", "x]", "a-b"])
def test_valid_globs(pattern: str) -> None:
    assert validate_glob(pattern) == pattern


def test_yaml_file_with_several_documents(tmp_path: Path) -> None:
    second = ISSUE_EXAMPLE.replace("name: ci-groups", "name: other")
    path = tmp_path / "policies.yaml"
    path.write_text(f"---\n{ISSUE_EXAMPLE}---\n{second}---\n")
    policies = load_policy_file(path)
    assert [p.metadata.name for p in policies] == ["ci-groups", "other"]


def test_yaml_errors_name_the_file_and_the_document(tmp_path: Path) -> None:
    bad = ISSUE_EXAMPLE.replace("name: ci-groups", "name: other").replace("7d", "0d")
    path = tmp_path / "policies.yaml"
    path.write_text(f"{ISSUE_EXAMPLE}---\n{bad}")
    with pytest.raises(PolicyError) as caught:
        load_policy_file(path)
    assert str(caught.value) == (
        f"{path}: document 2: spec.rules.emptyGroupRetention: invalid duration '0d': must be positive"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no policy found"),
        ("---\n---\n", "no policy found"),
        ("spec: [unclosed", "invalid YAML"),
        ("a: 1\na: 2\n", "duplicate key 'a' on line 2"),
        (ISSUE_EXAMPLE + "---\n" + ISSUE_EXAMPLE, "policy kafka/ci-groups is defined more than once"),
    ],
)
def test_yaml_stream_problems(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy_yaml(text)


def test_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy_file(tmp_path / "missing.yaml")


def _walk(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        found.append((path, schema))
        for key, value in schema.items():
            found.extend(_walk(value, f"{path}/{key}"))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            found.extend(_walk(value, f"{path}/{index}"))
    return found


def test_json_schema_is_crd_friendly() -> None:
    """The CRD is generated from this schema: descriptions everywhere, no nullable unions."""
    schema = ConsumerGroupPolicy.model_json_schema()
    spec_defs = {name: definition for name, definition in schema["$defs"].items() if name != "PolicyMetadata"}
    for name, definition in spec_defs.items():
        for field, field_schema in definition.get("properties", {}).items():
            assert field_schema.get("description"), f"{name}.{field} has no description"
    for path, node in _walk(schema):
        assert "anyOf" not in node and "oneOf" not in node, path
        assert node.get("type") != "null", path
        assert not ("default" in node and node["default"] is None), path
    rules = schema["$defs"]["RetentionRules"]["properties"]
    assert set(rules) == {"emptyGroupRetention", "unsubscribedOffsetRetention", "simpleGroupOffsetRetention"}
    assert schema["$defs"]["PolicySpec"]["properties"]["interval"]["default"] == "10m"
    # selector and selector.include are required by CEL rules (the API server then says why),
    # and have no default: a policy names the groups it may delete.
    spec = schema["$defs"]["PolicySpec"]
    assert spec["required"] == ["kafka"] and "default" not in spec["properties"]["selector"]
    assert [r["rule"] for r in spec["x-kubernetes-validations"]] == ["has(self.selector)"]
    selector = schema["$defs"]["GroupSelector"]
    assert "required" not in selector and "default" not in selector["properties"]["include"]
    assert [r["rule"] for r in selector["x-kubernetes-validations"]] == ["has(self.include)"]
    assert selector["properties"]["include"]["minItems"] == 1

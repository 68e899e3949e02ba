"""The CLI is a stable contract: JSON shape, table output, exit codes and refusals."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gwtest.cli import run_cli, write_policy
from gwtest.kafka import commit_offsets, create_topics
from gwtest.ports import free_port


def test_plan_json_matches_the_documented_contract(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("t"), unique_name("contract")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 1})
    time.sleep(1.1)
    policy = write_policy(
        tmp_path / "p.yaml", "contract", "unused:9092", [group], rules={"simpleGroupOffsetRetention": "1s"}
    )
    # --bootstrap-servers overrides spec.kafka.bootstrapServers
    result = run_cli("plan", "-f", str(policy), "--bootstrap-servers", kafka_bootstrap, "-o", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert set(plan) >= {"actions", "skipped", "summary"}
    [action] = plan["actions"]
    assert set(action) >= {"action", "group", "reason", "eligibleSince", "timestampSource"}
    assert action["action"] == "DeleteGroup" and action["group"] == group
    assert action["eligibleSince"].endswith("Z") and action["timestampSource"] == "offsetsLog"
    assert set(plan["summary"]) >= {"groupsMatched", "groupsEligible", "offsetsEligible"}
    assert plan["summary"]["groupsMatched"] == 1 and plan["summary"]["groupsEligible"] == 1

    table = run_cli("plan", "-f", str(policy), "--bootstrap-servers", kafka_bootstrap)
    assert table.returncode == 0 and group in table.stdout and "DeleteGroup" in table.stdout


def test_dry_run_policy_is_not_executed_by_apply(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("t"), unique_name("dryrun")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 1})
    time.sleep(1.1)
    policy = write_policy(
        tmp_path / "p.yaml", "dry", kafka_bootstrap, [group], rules={"simpleGroupOffsetRetention": "1s"}
    )
    result = run_cli("apply", "-f", str(policy), "--yes", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["outcomes"] == []
    assert "DryRun" in result.stderr
    still = run_cli("plan", "-f", str(policy), "-o", "json")
    assert [a["group"] for a in json.loads(still.stdout)["actions"]] == [group]


def test_apply_refuses_without_yes(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", "x", "127.0.0.1:1", ["*"], rules={"emptyGroupRetention": "1d"})
    result = run_cli("apply", "-f", str(policy))
    assert result.returncode == 2
    assert "--yes" in result.stderr


def test_bad_policy_exits_2_naming_field_and_value(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", "x", "127.0.0.1:1", ["*"], rules={"emptyGroupRetention": "0s"})
    result = run_cli("plan", "-f", str(policy))
    assert result.returncode == 2
    assert "spec.rules.emptyGroupRetention" in result.stderr and "'0s'" in result.stderr
    assert "Traceback" not in result.stderr


def _policy_without_selector(path: Path, selector: dict[str, object] | None) -> Path:
    """A valid Enforce policy whose selector is missing (None) or the given mapping."""
    write_policy(path, "x", "127.0.0.1:1", ["*"], rules={"emptyGroupRetention": "1d"}, mode="Enforce")
    document = yaml.safe_load(path.read_text())
    if selector is None:
        del document["spec"]["selector"]
    else:
        document["spec"]["selector"] = selector
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize("command", [["plan"], ["apply", "--yes"]])
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, "spec.selector.include: required field is missing: a policy must name the groups"),
        ({"exclude": ["keep-*"]}, "spec.selector.include: required field is missing"),
        ({"include": []}, "spec.selector.include: empty list: it would select no group at all"),
    ],
)
def test_a_policy_that_does_not_name_its_groups_exits_2_naming_spec_selector_include(
    tmp_path: Path, command: list[str], selector: dict[str, object] | None, expected: str
) -> None:
    """A regression: without spec.selector a policy used to select every group of the cluster."""
    policy = _policy_without_selector(tmp_path / "p.yaml", selector)
    result = run_cli(*command, "-f", str(policy))
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_unreachable_cluster_exits_1_quickly(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.yaml", "x", f"127.0.0.1:{free_port()}", ["*"], rules={"emptyGroupRetention": "1d"}
    )
    started = time.monotonic()
    result = run_cli("plan", "-f", str(policy), timeout=180)
    assert result.returncode == 1, result.stderr
    assert "Kafka unavailable" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 40


def test_command_config_secrets_never_leak(tmp_path: Path) -> None:
    secret = "s3cr3t-" + "x" * 12
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username=someone\nsasl.password={secret}\n"
    )
    policy = write_policy(
        tmp_path / "p.yaml", "x", f"127.0.0.1:{free_port()}", ["*"], rules={"emptyGroupRetention": "1d"}
    )
    result = run_cli("plan", "-f", str(policy), "--command-config", str(props), timeout=180)
    assert result.returncode in (1, 2)
    assert secret not in result.stdout + result.stderr


def test_operator_refuses_to_start_on_bad_guard_flags_with_a_clear_message(tmp_path: Path) -> None:
    bad_allowlist = tmp_path / "allowlist.yaml"
    bad_allowlist.write_text("namespaces:\n  team-a: {bootstrapServers: [], groups: ['a-*']}\n")
    secret_props = tmp_path / "client.properties"
    secret_props.write_text(  # SASL without a username
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.password=hunter2-very-secret\n"
    )
    cases = {
        "allowlist": (["--tenant-allowlist", str(bad_allowlist)], "namespaces.team-a.bootstrapServers"),
        "missing allowlist": (["--tenant-allowlist", str(tmp_path / "none.yaml")], "--tenant-allowlist"),
        "min retention": (["--min-retention", "10 minutes"], "--min-retention"),
        "default credentials": (["--default-command-config", str(secret_props)], "sasl.username"),
        "audit retention": (["--audit-topic", "t", "--audit-topic-retention", "forever"], "duration"),
        "observations gap": (["--observations-max-gap", "forever"], "--observations-max-gap"),
    }
    for what, (flags, expected) in cases.items():
        done = run_cli("run", "--metrics-port", "0", *flags)
        assert done.returncode == 2, (what, done.stderr)
        assert expected in done.stderr and "Traceback" not in done.stderr, (what, done.stderr)
        assert "hunter2" not in done.stdout + done.stderr

"""`groupwarden plan` / `apply` as a managed service's tenant, on the real broker's authorizer
(gwtest/tenant.py): `__consumer_offsets` is not readable, so Empty groups are dated by when runs
first observed them (kept by the ledger checkpoint between runs); ListGroups shows the tenant only
its own groups; a group it may see but not delete fails alone while the run's other deletions go on.
The client properties file is the one a user writes (SASL PLAIN or SCRAM, the CA as a path)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from groupwarden.testing.audit_keys import trusted_records
from gwtest.cli import plan_json, run_cli, write_policy
from gwtest.kafka import create_topics, empty_group, produce
from gwtest.operator import existing_groups
from gwtest.tenant import Tenant, tenant_principal

RETENTION_S = 1.0


@pytest.fixture(scope="module")
def tenant() -> Tenant:
    return tenant_principal()


def make_empty_groups(bootstrap: str, topic: str, groups: list[str]) -> None:
    """Real groups that consumed and left (made as a super user on the PLAINTEXT listener)."""
    create_topics(bootstrap, [topic], partitions=1)
    produce(bootstrap, topic, 2, partitions=1)
    for group in groups:
        empty_group(bootstrap, group, [topic], messages=2)


def offsets_warnings(plan: dict) -> list[str]:
    return [w for w in plan["warnings"] if "offsets log" in w or "__consumer_offsets" in w]


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_plan_as_tenant_warns_twice_and_plans_empty_groups_from_observed_times_on_the_second_run(
    kafka_bootstrap: str, tenant: Tenant, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    token = unique_name("cli")
    mine, readonly, foreign = f"{tenant.prefix}{token}", f"{tenant.readonly_prefix}{token}", f"other-{token}"
    make_empty_groups(kafka_bootstrap, f"{tenant.prefix}{token}", [mine, readonly, foreign])
    props = tmp_path / "client.properties"
    props.write_text(tenant.client_properties("PLAIN"))
    policy = write_policy(
        tmp_path / "p.yaml",
        "tenant",
        tenant.bootstrap,
        [f"*{token}*"],
        rules={"emptyGroupRetention": f"{RETENTION_S:g}s"},
        mode="Enforce",
    )

    first = plan_json(policy, "--command-config", str(props))
    # One warning that the log was not read, one that says why (the ACL), both naming the fallback.
    warnings = offsets_warnings(first)
    assert len(warnings) == 2, first["warnings"]
    assert any("not authorized to read __consumer_offsets" in w for w in warnings), warnings
    assert all("first-observed" in w for w in warnings), warnings
    # Only the groups the tenant may Describe are listed: `foreign` matches the selector but is not seen.
    assert first["summary"]["groupsTotal"] == first["summary"]["groupsMatched"] == 2, first["summary"]
    assert first["actions"] == [], "a group first observed now is not Empty for the retention yet"

    time.sleep(RETENTION_S + 0.2)  # the retention passing, not a synchronisation
    second = plan_json(policy, "--command-config", str(props))
    assert len(offsets_warnings(second)) == 2, second["warnings"]
    planned = {a["group"]: a for a in second["actions"]}
    assert sorted(planned) == sorted([mine, readonly]), second["actions"]
    for action in planned.values():
        assert action["action"] == "DeleteGroup" and action["timestampSource"] == "observed", action
        # Dated by the first run's observation, which the checkpoint kept.
        assert abs(parse_time(action["eligibleSince"]) - parse_time(first["generatedAt"])) < 1, action


def test_apply_as_tenant_fails_the_group_it_may_not_delete_and_deletes_the_others(
    kafka_bootstrap: str, tenant: Tenant, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    token = unique_name("cli")
    # Named so that one deletable group runs before the denied one and one after it.
    before, after = f"{tenant.prefix}{token}", f"{tenant.prefix}x-{token}"
    readonly, foreign = f"{tenant.readonly_prefix}{token}", f"other-{token}"
    make_empty_groups(kafka_bootstrap, f"{tenant.prefix}{token}", [before, readonly, after, foreign])
    props = tmp_path / "client.properties"
    props.write_text(tenant.client_properties("SCRAM-SHA-512"))
    policy = write_policy(
        tmp_path / "p.yaml",
        "tenant",
        tenant.bootstrap,
        [f"*{token}*"],
        rules={"emptyGroupRetention": f"{RETENTION_S:g}s"},
        mode="Enforce",
    )
    first = plan_json(policy, "--command-config", str(props))  # starts the observed clocks
    assert first["summary"]["groupsMatched"] == 3, first["summary"]

    time.sleep(RETENTION_S + 0.2)  # the retention passing
    audit = tmp_path / "audit.jsonl"
    done = run_cli(
        "apply", "-f", str(policy), "--command-config", str(props), "-o", "json", "--yes",
        "--audit-file", str(audit),
    )  # fmt: skip
    # Exit code 1: some items failed (README "Exit codes"); the JSON still has every outcome.
    assert done.returncode == 1, done.stderr
    outcomes = {o["group"]: o for o in json.loads(done.stdout)["outcomes"]}
    assert {g: o["result"] for g, o in outcomes.items()} == {
        before: "Deleted",
        readonly: "Failed",
        after: "Deleted",
    }, outcomes
    assert outcomes[readonly]["error"] == "GROUP_AUTHORIZATION_FAILED", outcomes[readonly]
    assert outcomes[readonly]["retriable"] is False, outcomes[readonly]
    assert tenant.password not in done.stdout + done.stderr + audit.read_text()
    recorded = trusted_records(audit.read_text().splitlines())
    assert [r["error"] for r in recorded if r["type"] == "outcome" and r["group"] == readonly] == [
        "GROUP_AUTHORIZATION_FAILED"
    ]
    assert existing_groups(kafka_bootstrap, [before, readonly, after, foreign]) == {readonly, foreign}

"""Plans made in a test the way the operator and the CLI make them, for groups of one type (the
share and streams integration tests share this setup): a policy of one group type, one group's
snapshot and plan; `apply` with the default and with a typed policy, `restore`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.testing.audit_keys import trusted_records
from gwtest.cli import apply_until_deleted, plan_json, run_cli, write_policy


def enforce_policy(
    bootstrap: str, group_type: str, include: Sequence[str], **rules: str
) -> ConsumerGroupPolicy:
    """An Enforce policy for groups of one type (`share`, `streams`, ...), no deletion-ratio limit."""
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": group_type, "namespace": "tests"},
            "spec": {
                "kafka": {"bootstrapServers": bootstrap},
                "selector": {"include": list(include), "groupTypes": [group_type]},
                "rules": rules,
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def snapshot_of(
    gateway: KafkaGateway, group: str, memory: ClusterKnowledge | None = None, now: datetime | None = None
) -> ClusterSnapshot:
    """The snapshot of one group (a fresh memory unless the caller keeps one across passes)."""
    return gather_snapshot(
        gateway, memory or ClusterKnowledge(ObservedTimes()), now or datetime.now(UTC), lambda g: g == group
    )


def plan_past_retention(gateway: KafkaGateway, policy: ConsumerGroupPolicy, group: str) -> Plan:
    """The plan for `group` a 1 s retention after the operator first saw it: the first pass starts
    the clock of its state, the second, 1.2 s later, decides."""
    memory = ClusterKnowledge(ObservedTimes())
    snapshot_of(gateway, group, memory)
    time.sleep(1.2)
    now = datetime.now(UTC)
    return decide(policy, snapshot_of(gateway, group, memory, now), now)


# -- the same through the CLI (`groupwarden apply` and `restore`) -------------------------------


def default_policy_only_reports(
    tmp_path: Path, bootstrap: str, prefix: str, kinds: Mapping[str, str]
) -> None:
    """`apply` with a policy written without groupTypes (the default) over `prefix-*`: the groups
    of `kinds` (group -> share/streams) are reported as UnsupportedGroupType, nothing is deleted."""
    default = write_policy(
        tmp_path / "default.yaml",
        "default",
        bootstrap,
        [f"{prefix}-*"],
        rules={"emptyGroupRetention": "1s"},
        mode="Enforce",
    )
    time.sleep(1.2)
    plan = plan_json(default, "--yes", "--audit-file", str(tmp_path / "none.jsonl"), command="apply")
    assert plan.get("outcomes", []) == []
    assert {s["group"]: (s["reason"], s["groupKind"]) for s in plan["skipped"]} == {
        group: ("UnsupportedGroupType", kind) for group, kind in kinds.items()
    }


def typed_policy_deletes(
    tmp_path: Path, bootstrap: str, prefix: str, group_type: str, group: str, timeout: float
) -> list[dict[str, Any]]:
    """`apply` with a policy naming `group_type` over `prefix-*` until it deletes `group` (Empty
    past a 1 s retention) and nothing else; returns the audit trail's records of `group`
    (`tmp_path/audit.jsonl`)."""
    policy = write_policy(
        tmp_path / f"{group_type}.yaml",
        group_type,
        bootstrap,
        [f"{prefix}-*"],
        selector={"include": [f"{prefix}-*"], "groupTypes": [group_type]},
        rules={"emptyGroupRetention": "1s"},
        mode="Enforce",
    )
    audit = tmp_path / "audit.jsonl"
    outcomes = apply_until_deleted(policy, audit, timeout, f"apply to delete {group}")
    assert [(o["group"], o["action"], o["result"]) for o in outcomes] == [(group, "DeleteGroup", "Deleted")]
    records = trusted_records(line for line in audit.read_text().splitlines() if line.strip())
    return [r for r in records if r["group"] == group]


def restore_with_cli(tmp_path: Path, bootstrap: str, group: str) -> None:
    """`groupwarden restore` of `group` from `tmp_path/audit.jsonl`: every partition restored."""
    done = run_cli(
        "restore",
        "--audit-file",
        str(tmp_path / "audit.jsonl"),
        "--bootstrap-servers",
        bootstrap,
        "--group",
        group,
        "--yes",
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stderr
    assert {p["status"] for p in json.loads(done.stdout)["partitions"]} == {"restored"}

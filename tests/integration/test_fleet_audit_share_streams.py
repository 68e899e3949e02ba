"""The Spark fleet audit on share and streams groups made by real clients (confluent-kafka's share
consumer; Kafka's WordCountDemo with `group.protocol=streams`): the audit's plan.json is exactly
`groupwarden plan`'s for a policy naming those types (live and from an export; share groups dated
by `__share_group_state`, streams internal topics named), and the summary, what-if and report
cover them. Audit processes of their own (local[*] sessions), as a user runs them."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from groupwarden.core.timestamps import to_rfc3339
from gwtest.cli import plan_json, run_cli, write_policy
from gwtest.kafka import create_topics
from gwtest.share import share_consumer_in_group, share_group_state, wait_initialised
from gwtest.streams import latest_count, produce_lines, unique_word, wordcount_app
from gwtest.wait import wait_for


def test_audit_plans_share_and_streams_groups_like_groupwarden_plan(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"fleetmodern-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}-jobs"
    create_topics(kafka_bootstrap, [topic])
    share_group, app_id = f"{prefix}-share", f"{prefix}-app"
    with share_consumer_in_group(kafka_bootstrap, share_group, [topic]) as running:
        wait_initialised(running, kafka_bootstrap, [topic])
    wait_for(
        lambda: share_group_state(kafka_bootstrap, share_group) == ("Empty", 0), timeout=60, what="Empty"
    )
    word = unique_word()
    with wordcount_app(kafka_bootstrap, app_id, tmp_path):
        produce_lines(kafka_bootstrap, [word])
        wait_for(lambda: latest_count(kafka_bootstrap, word) == 1, timeout=60, what=f"{app_id} counted")

    policy = write_policy(
        tmp_path / "policy.yaml",
        "modern",
        kafka_bootstrap,
        [f"{prefix}-*"],
        selector={"include": [f"{prefix}-*"], "groupTypes": ["share", "streams"]},
        rules={"emptyGroupRetention": "1s"},
    )
    now = to_rfc3339(datetime.now(UTC) + timedelta(hours=1))
    out = tmp_path / "audit"
    result = run_cli(
        "audit", "-f", str(policy), "--bootstrap-servers", kafka_bootstrap, "--out", str(out),
        "--now", now, "--what-if", "1s,2h", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    expected = plan_json(policy, "--now", now)
    assert json.loads((out / "plan.json").read_text()) == expected
    # Both delete the stopped app and the share group: the share group's start offsets are dated
    # by `__share_group_state` (read by `plan` and by the audit), so no first-observed wait.
    actions = {a["group"]: a for a in expected["actions"]}
    assert {(a["action"], g, a["groupKind"]) for g, a in actions.items()} == {
        ("DeleteGroup", app_id, "streams"),
        ("DeleteGroup", share_group, "share"),
    }
    assert actions[share_group]["timestampSource"] == "offsetsLog"
    # The app's internal topics (decoded from the logged topology by both) are named, never deleted.
    assert actions[app_id]["internalTopics"] == [
        f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog",
        f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition",
    ]

    summary = json.loads((out / "summary.json").read_text())
    [cluster] = summary["clusters"]
    assert cluster["groupsByKind"]["share"] >= 1 and cluster["groupsByKind"]["streams"] >= 1
    assert cluster["shareGroupStateRead"] is True
    what_if = {w["retention"]: w for w in cluster["whatIf"]}
    assert what_if["1s"]["groupsByKind"] == {"share": 1, "streams": 1}
    assert what_if["2h"]["groupsByKind"] == {}
    report = (out / "report.html").read_text()
    assert "__share_group_state" in report and app_id in report

    # Offline: the export carries `__share_group_state` too, and plans the same.
    export = tmp_path / "export"
    exported = run_cli("export-offsets-log", "--bootstrap-servers", kafka_bootstrap, "--out", str(export))
    assert exported.returncode == 0, exported.stderr[-3000:]
    offline = tmp_path / "offline"
    result = run_cli("audit", "-f", str(policy), "--input", str(export), "--out", str(offline), "--now", now,
                     timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((offline / "plan.json").read_text()) == expected

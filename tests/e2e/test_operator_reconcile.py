"""The operator as a process against the real API server and the real broker: DryRun, Enforce,
races, spec changes, suspend, deletion, invalid specs, overlap.

Groups are made by real confluent-kafka consumers; what was deleted is checked with the broker
through confluent-kafka's admin client (not groupwarden's own gateway).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from gwtest.kafka import (
    commit_offsets,
    consumer_in_group,
    empty_group,
    topic_with_messages,
)
from gwtest.operator import (
    FAST_RULES,
    NO_BREAKER,
    Failpoint,
    OperatorProcess,
    committed_offsets,
    condition,
    create_policy,
    delete_policy,
    events_of,
    existing_groups,
    fast_enforce_manifest,
    get_policy,
    patch_spec,
    policy_manifest,
    reasons,
    wait_for_status,
)
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")


@pytest.fixture
def failpoint(tmp_path: Path) -> Failpoint:
    return Failpoint(tmp_path / "failpoint")


@pytest.fixture
def operator_env(failpoint: Failpoint) -> dict[str, str]:
    return failpoint.env


def status_of(policy: dict[str, Any]) -> dict[str, Any]:
    return dict(policy.get("status") or {})


def test_dry_run_shows_the_plan_and_deletes_nothing(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("dry")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    empty, simple, active = f"{prefix}-empty", f"{prefix}-simple", f"{prefix}-active"
    empty_group(kafka_bootstrap, empty, [topic])
    commit_offsets(kafka_bootstrap, simple, {(topic, 0): 3})
    with consumer_in_group(kafka_bootstrap, active, [topic], expected_messages=10):
        create_policy(
            k8s,
            policy_manifest(
                "dry",
                namespace,
                kafka_bootstrap,
                selector={"include": [f"{prefix}-*"]},
                rules=FAST_RULES,
                limits=NO_BREAKER,
                interval="2s",
            ),
        )

        def planned(policy: dict[str, Any]) -> bool:
            return {a["group"] for a in status_of(policy).get("plan", [])} == {empty, simple}

        policy = wait_for_status(k8s, namespace, "dry", reason="DryRun", ready="True", extra=planned)
        first = status_of(policy)["lastRun"]["startTime"]
        # Two more runs with the same plan: still nothing deleted, and no second Planned event.
        wait_for_status(
            k8s,
            namespace,
            "dry",
            reason="DryRun",
            timeout=30,
            extra=lambda p: status_of(p)["lastRun"]["startTime"] > first and planned(p),
        )
        assert existing_groups(kafka_bootstrap, [empty, simple, active]) == {empty, simple, active}
        assert committed_offsets(kafka_bootstrap, simple) == {(topic, 0): 3}
    status = status_of(get_policy(k8s, namespace, "dry"))
    assert status["summary"]["groupsEligible"] == 2 and status["summary"]["groupsMatched"] == 3
    assert status["eligible"] == "2/0" and status["deleted"] == "0/0"
    assert status["lastRun"]["mode"] == "DryRun" and status["lastRun"]["timestampSource"] == "offsetsLog"
    by_group = {a["group"]: a for a in status["plan"]}
    assert by_group[empty]["action"] == "DeleteGroup" and by_group[empty]["timestampSource"] == "offsetsLog"
    # One Planned event per distinct plan (the first run may have come before the retention passed).
    planned_events = [e for e in events_of(k8s, namespace, "dry") if "would delete 2 groups" in e["message"]]
    assert len(planned_events) == 1 and planned_events[0]["reason"] == "Planned", planned_events
    # kopf left nothing on the object: no finalizers, no annotations of its own.
    metadata = get_policy(k8s, namespace, "dry")["metadata"]
    assert not metadata.get("finalizers")
    assert not [k for k in (metadata.get("annotations") or {}) if "kopf" in k]


def test_enforce_deletes_exactly_the_eligible_groups_and_offsets(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("enf")
    kept, moved_away = topic_with_messages(kafka_bootstrap, f"{prefix}-kept"), f"{prefix}-old"
    topic_with_messages(kafka_bootstrap, moved_away)
    empty, simple, active, moved, excluded = (
        f"{prefix}-{n}" for n in ("empty", "simple", "active", "moved", "keep")
    )
    empty_group(kafka_bootstrap, empty, [kept])
    empty_group(kafka_bootstrap, excluded, [kept])
    commit_offsets(kafka_bootstrap, simple, {(kept, 0): 3, (kept, 1): 4})
    empty_group(kafka_bootstrap, moved, [kept, moved_away], messages=20)  # committed on both topics
    with (
        consumer_in_group(kafka_bootstrap, active, [kept], expected_messages=10),
        consumer_in_group(kafka_bootstrap, moved, [kept]),  # came back subscribed to `kept` only
    ):
        active_offsets = committed_offsets(kafka_bootstrap, active)
        create_policy(
            k8s,
            fast_enforce_manifest(
                "enforce",
                namespace,
                kafka_bootstrap,
                [f"{prefix}-*"],
                selector={"include": [f"{prefix}-*"], "exclude": [f"{prefix}-keep"]},
            ),
        )
        wait_for_status(
            k8s,
            namespace,
            "enforce",
            reason="Succeeded",
            ready="True",
            timeout=90,
            extra=lambda p: status_of(p).get("totals") == {"groupsDeleted": 2, "offsetsDeleted": 2},
        )
        assert existing_groups(kafka_bootstrap, [empty, simple, active, moved, excluded]) == {
            active,
            moved,
            excluded,
        }
        assert set(committed_offsets(kafka_bootstrap, moved)) == {(kept, 0), (kept, 1)}
        assert committed_offsets(kafka_bootstrap, active) == active_offsets
    events = events_of(k8s, namespace, "enforce")
    deleted = sorted(e["message"].split()[3].rstrip(":") for e in events if e["reason"] == "GroupDeleted")
    assert deleted == sorted([empty, simple]), events
    offsets = [e for e in events if e["reason"] == "OffsetsDeleted"]
    assert (
        len(offsets) == 1 and moved in offsets[0]["message"] and f"{moved_away}[0,1]" in offsets[0]["message"]
    )
    assert (
        operator.metrics().count(
            f'groupwarden_groups_deleted_total{{name="enforce",namespace="{namespace}"}} 2.0'
        )
        == 1
    )


def test_a_consumer_returning_before_the_delete_is_skipped_and_nothing_is_lost(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
    failpoint: Failpoint,
) -> None:
    prefix = unique_name("race")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    before = committed_offsets(kafka_bootstrap, group)
    failpoint.hold()
    create_policy(
        k8s,
        fast_enforce_manifest(
            "race",
            namespace,
            kafka_bootstrap,
            [group],
        ),
    )
    assert failpoint.wait_held() == f"DeleteGroup {group}"  # planned, about to delete
    with consumer_in_group(kafka_bootstrap, group, [topic]):  # ... and the consumer comes back
        failpoint.release()
        wait_for(
            lambda: "ActionSkipped" in reasons(events_of(k8s, namespace, "race")),
            timeout=60,
            what="an ActionSkipped event",
        )
        assert existing_groups(kafka_bootstrap, [group]) == {group}
        assert committed_offsets(kafka_bootstrap, group) == before
    skipped = next(e for e in events_of(k8s, namespace, "race") if e["reason"] == "ActionSkipped")
    assert skipped["type"] == "Warning" and "NON_EMPTY_GROUP" in skipped["message"]


def test_a_spec_change_starts_a_new_cycle_at_once(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("upd")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    emptied = time.monotonic()
    # interval 1h: every run after the first one below is caused by a spec change.
    create_policy(
        k8s,
        policy_manifest(
            "upd",
            namespace,
            kafka_bootstrap,
            rules={"emptyGroupRetention": "1h"},
            interval="1h",
            selector={"include": [f"{prefix}-*"]},
            limits=NO_BREAKER,
        ),
    )
    policy = wait_for_status(k8s, namespace, "upd", reason="DryRun", generation=1)
    assert status_of(policy)["plan"] == []
    # The new retention must have passed when the spec changes (retention is elapsed time).
    wait_for(lambda: time.monotonic() - emptied > 3, what="the group to be Empty for 3s")
    patch_spec(k8s, namespace, "upd", {"rules": {"emptyGroupRetention": "2s"}})
    policy = wait_for_status(
        k8s,
        namespace,
        "upd",
        reason="DryRun",
        generation=2,
        extra=lambda p: [a["group"] for a in status_of(p)["plan"]] == [group],
    )
    patch_spec(k8s, namespace, "upd", {"mode": "Enforce"})
    policy = wait_for_status(k8s, namespace, "upd", reason="Succeeded", generation=3)
    assert status_of(policy)["totals"]["groupsDeleted"] == 1 and status_of(policy)["plan"] == []
    assert existing_groups(kafka_bootstrap, [group]) == set()


def test_suspend_stops_acting_and_resume_continues(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("sus")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    create_policy(
        k8s,
        fast_enforce_manifest(
            "sus",
            namespace,
            kafka_bootstrap,
            [f"{prefix}-*"],
            suspend=True,
        ),
    )
    # A clock: a second policy that keeps running every 2s next to the suspended one.
    create_policy(
        k8s,
        policy_manifest(
            "clock", namespace, kafka_bootstrap, interval="2s", selector={"include": ["no-such-group"]}
        ),
    )
    policy = wait_for_status(k8s, namespace, "sus", reason="Suspended", ready="True")
    assert status_of(policy).get("nextRunTime") is None
    started = status_of(wait_for_status(k8s, namespace, "clock", reason="DryRun"))["lastRun"]["startTime"]
    wait_for_status(
        k8s,
        namespace,
        "clock",
        reason="DryRun",
        extra=lambda p: status_of(p)["lastRun"]["startTime"] > started,
    )
    assert existing_groups(kafka_bootstrap, [group]) == {group}  # several intervals later: untouched
    patch_spec(k8s, namespace, "sus", {"suspend": False})
    wait_for_status(
        k8s,
        namespace,
        "sus",
        reason="Succeeded",
        extra=lambda p: status_of(p)["totals"]["groupsDeleted"] == 1,
    )
    assert existing_groups(kafka_bootstrap, [group]) == set()


def test_deleting_a_policy_stops_its_work_even_mid_run(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
    failpoint: Failpoint,
) -> None:
    prefix = unique_name("del")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    failpoint.hold()
    create_policy(
        k8s,
        fast_enforce_manifest(
            "doomed",
            namespace,
            kafka_bootstrap,
            [group],
        ),
    )
    failpoint.wait_held()  # the run is about to delete the group ...
    delete_policy(k8s, namespace, "doomed")  # ... when the policy is deleted
    series = f'groupwarden_groups_matched{{name="doomed",namespace="{namespace}"}}'
    wait_for(lambda: series not in operator.metrics(), timeout=30, what="the operator to forget the policy")
    failpoint.release()
    wait_for(
        lambda: "run interrupted (the policy was deleted)" in operator.logs(),
        timeout=30,
        what="the held run to stop",
    )
    assert existing_groups(kafka_bootstrap, [group]) == {group}
    assert "GroupDeleted" not in reasons(events_of(k8s, namespace, "doomed"))


def test_invalid_spec_stalls_with_a_warning_and_other_policies_keep_working(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("bad")
    # An unclosed '[' passes the CRD schema but is surely a typo: the operator refuses it.
    create_policy(
        k8s,
        policy_manifest(
            "bad", namespace, kafka_bootstrap, interval="2s", selector={"include": [f"{prefix}-[x"]}
        ),
    )
    create_policy(
        k8s,
        policy_manifest(
            "good", namespace, kafka_bootstrap, interval="2s", selector={"include": [f"{prefix}-*"]}
        ),
    )
    bad = wait_for_status(k8s, namespace, "bad", reason="InvalidSpec", ready="False")
    stalled = condition(bad, "Stalled")
    assert stalled is not None and stalled["status"] == "True" and "unclosed '['" in stalled["message"]
    good = wait_for_status(k8s, namespace, "good", reason="DryRun", ready="True")
    started = status_of(good)["lastRun"]["startTime"]
    wait_for_status(
        k8s,
        namespace,
        "good",
        reason="DryRun",
        extra=lambda p: status_of(p)["lastRun"]["startTime"] > started,
    )
    warnings = [e for e in events_of(k8s, namespace, "bad") if e["reason"] == "InvalidSpec"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings  # no retry storm
    # Fixing the spec recovers without a restart.
    patch_spec(k8s, namespace, "bad", {"selector": {"include": [f"{prefix}-[x]"]}})
    wait_for_status(k8s, namespace, "bad", reason="DryRun", ready="True", generation=2)


def test_overlapping_policies_merge_conservatively(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("ovl")
    topic = topic_with_messages(kafka_bootstrap, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(kafka_bootstrap, group, [topic])
    common = {"selector": {"include": [f"{prefix}-*"]}, "limits": NO_BREAKER, "interval": "2s"}
    create_policy(k8s, policy_manifest("watcher", namespace, kafka_bootstrap, rules=FAST_RULES, **common))
    create_policy(
        k8s,
        policy_manifest("cleaner", namespace, kafka_bootstrap, rules=FAST_RULES, mode="Enforce", **common),
    )
    cleaner = wait_for_status(
        k8s,
        namespace,
        "cleaner",
        reason="Succeeded",
        extra=lambda p: (
            status_of(p).get("overlappingPolicies") == [f"{namespace}/watcher"]
            and status_of(p)["summary"]["groupsEligible"] == 1
        ),
    )
    assert status_of(cleaner)["summary"]["groupsDeleted"] == 0  # the DryRun watcher blocks it
    assert existing_groups(kafka_bootstrap, [group]) == {group}
    # The watcher's own DryRun plan shows the group: the Enforce cleaner does not block it.
    wait_for_status(
        k8s,
        namespace,
        "watcher",
        reason="DryRun",
        extra=lambda p: (
            status_of(p).get("overlappingPolicies") == [f"{namespace}/cleaner"]
            and [a["group"] for a in status_of(p)["plan"]] == [group]
        ),
    )
    # Once the watcher allows it too (longest retention wins: both 2s), the group goes.
    patch_spec(k8s, namespace, "watcher", {"mode": "Enforce"})
    wait_for(
        lambda: existing_groups(kafka_bootstrap, [group]) == set(), timeout=60, what="the group to be deleted"
    )

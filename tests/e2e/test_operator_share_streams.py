"""The operator (a process, real API server, real broker) cleans the Kafka 4.2+ group types when a
policy names them: a forgotten share group and an abandoned Kafka Streams app's group go, an active
share consumer's group stays; events, status and metrics say which type each group was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from gwtest.kafka import create_topics
from gwtest.operator import (
    OperatorProcess,
    create_policy,
    events_of,
    fast_enforce_manifest,
    wait_for_status,
)
from gwtest.share import share_consumer_in_group, share_group_states_with_tool, wait_initialised
from gwtest.streams import streams_group_states_with_tool, wordcount_app

pytestmark = pytest.mark.usefixtures("policy_crd")


def test_a_policy_naming_share_and_streams_cleans_them_and_spares_the_active_one(
    k8s: ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("modern")
    topic = f"{prefix}-jobs"
    forgotten, active, app = f"{prefix}-queue-old", f"{prefix}-queue-live", f"{prefix}-app"
    create_topics(kafka_bootstrap, [topic])
    with share_consumer_in_group(kafka_bootstrap, forgotten, [topic]) as consumer:
        wait_initialised(consumer, kafka_bootstrap, [topic])
    with wordcount_app(kafka_bootstrap, app, tmp_path):
        pass
    with share_consumer_in_group(kafka_bootstrap, active, [topic]) as live:
        create_policy(
            k8s,
            fast_enforce_manifest(
                "modern",
                namespace,
                kafka_bootstrap,
                [f"{prefix}-*"],
                selector={"include": [f"{prefix}-*"], "groupTypes": ["share", "streams"]},
            ),
        )

        def deleted_two(policy: dict[str, Any]) -> bool:
            live.poll_some(0.1)  # a share consumer must keep polling to stay a member
            return (policy.get("status") or {}).get("totals", {}).get("groupsDeleted") == 2

        wait_for_status(
            k8s, namespace, "modern", reason="Succeeded", ready="True", timeout=120, extra=deleted_two
        )
        shares = share_group_states_with_tool(kafka_bootstrap, forgotten, active)
        assert forgotten not in shares and shares[active] == "Stable"
        assert app not in streams_group_states_with_tool(kafka_bootstrap, app)
    messages = sorted(
        e["message"].split(":")[0]
        for e in events_of(k8s, namespace, "modern")
        if e["reason"] == "GroupDeleted"
    )
    assert messages == sorted([f"Deleted share group {forgotten}", f"Deleted streams group {app}"])
    metrics = operator.metrics()
    for group_type in ("share", "streams"):
        labels = f'group_type="{group_type}",name="modern",namespace="{namespace}"'
        line = f"groupwarden_groups_deleted_by_type_total{{{labels}}} 1.0"
        assert line in metrics, metrics

"""The operator rides through broker failovers on a real 3-node KRaft cluster (the failover
modules' own: `kafka_cluster3`, serial group `cluster3`), with groups made by real clients:

- the node coordinating the policy's groups is SIGKILLed right before the operator's pass: the
  pass waits (the dead node stays in metadata until the controller fences it, ~9 s; then its
  groups load on their new coordinators), the status says `Reconciling` / `WaitingForKafka` with
  what Kafka answered while it waits, then the run's own result (`Succeeded`): the dead groups
  deleted, the active ones untouched, no Warning and never `KafkaUnavailable`;
- a rolling restart of all three nodes (controlled shutdowns, each node back in sync before the
  next) under passes every 2 s, with classic, KIP-848, share and streams groups, some of them
  dying during the restart: every pass ends `Succeeded`, nothing active is deleted, every dead
  group is, and no Warning is posted.

The race oracle's rule judges both: nothing active deleted, the run converges, no Warning for a
failover that was ridden through.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from gwtest.cli import run_cli, write_policy
from gwtest.kafka import consumer_in_group, kafka_tool
from gwtest.kafka_cluster import (
    MEMBER_SESSION_MS,
    KafkaCluster,
    dead_groups,
    group_ids_coordinated_by,
    replicated_topic,
)
from gwtest.operator import (
    ConditionWatch,
    OperatorProcess,
    committed_offsets,
    create_policy,
    events_of,
    fast_enforce_manifest,
    patch_spec,
    wait_for_status,
)
from gwtest.share import share_consumer_in_group, wait_initialised
from gwtest.streams import wordcount_app
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

ALL_TYPES = ["classic", "consumer", "share", "streams"]


@pytest.fixture(scope="module")
def cluster(kafka_cluster3: KafkaCluster) -> KafkaCluster:
    return kafka_cluster3.restored()


def warnings_of(k8s: ApiClient, namespace: str, name: str) -> list[dict[str, str]]:
    return [e for e in events_of(k8s, namespace, name) if e["type"] == "Warning"]


def groups_on(cluster: KafkaCluster, prefix: str) -> set[str]:
    """This test's groups of every type, as Kafka's own `kafka-groups --list` sees them (the
    oracle: the Java admin client waits out a coordinator still loading its groups)."""
    out = kafka_tool("kafka-groups", "--bootstrap-server", ",".join(cluster.alive().values()), "--list")
    return {line.split()[0] for line in out.splitlines()[1:] if line.strip().startswith(prefix)}


def test_a_pass_rides_through_the_coordinator_killed_and_says_it_is_waiting(
    k8s: ApiClient,
    namespace: str,
    cluster: KafkaCluster,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
) -> None:
    prefix = unique_name("okill")
    victim = cluster.coordinator_of(f"{prefix}-probe")
    topic = replicated_topic(cluster, f"{prefix}-t")
    ids = group_ids_coordinated_by(victim, cluster, f"{prefix}-g", 4)
    dead = [(ids[0], "classic"), (ids[1], "consumer")]
    active = [(ids[2], "classic"), (ids[3], "consumer")]
    dead_groups(cluster.bootstrap, topic, dead)
    watch = ConditionWatch(k8s, namespace, "failover")
    with ExitStack() as stack:
        for group, protocol in active:
            stack.enter_context(
                consumer_in_group(
                    cluster.bootstrap, group, [topic], protocol=protocol, session_timeout_ms=MEMBER_SESSION_MS
                )
            )
        stack.enter_context(watch.running())
        # Every node in the policy, the dead one included: as a user configures it. DryRun first:
        # the operator is up and passes every 2 s when the node dies, so a pass meets the dead
        # node before the controller fences it (~9 s), however long the operator took to start.
        create_policy(
            k8s,
            fast_enforce_manifest("failover", namespace, cluster.bootstrap, [f"{prefix}-*"], mode="DryRun"),
        )
        wait_for_status(k8s, namespace, "failover", reason="DryRun", ready="True", timeout=120)
        cluster.kill(victim)
        wait_for(lambda: watch.waiting_messages, timeout=60, what="a WaitingForKafka status")
        patch_spec(k8s, namespace, "failover", {"mode": "Enforce"})

        def both_deleted(policy: dict[str, Any]) -> bool:
            return bool((policy.get("status") or {}).get("totals", {}).get("groupsDeleted") == 2)

        wait_for_status(
            k8s, namespace, "failover", reason="Succeeded", ready="True", timeout=120, extra=both_deleted
        )
        states = groups_on(cluster, prefix)
    assert watch.waiting_messages, f"the status never said it was waiting: {watch.seen}"
    assert any("retried for" in m and "default.api.timeout.ms" in m for m in watch.waiting_messages)
    assert "KafkaUnavailable" not in watch.ready_reasons(), watch.seen
    assert not {g for g, _ in dead} & states
    assert {g for g, _ in active} <= states, states  # nothing active deleted
    assert warnings_of(k8s, namespace, "failover") == []
    # The retries are logged, once per kind of failure (adapters/client_logs.py), not once per try.
    retries = [line for line in operator.logs().splitlines() if "retrying for up to" in line]
    assert retries and len(retries) <= 10, retries


def test_passes_during_a_rolling_restart_delete_only_the_dead_groups_of_every_type(
    k8s: ApiClient,
    namespace: str,
    cluster: KafkaCluster,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    cluster.restored()
    prefix = unique_name("roll")
    topic = replicated_topic(cluster, f"{prefix}-t")
    bootstrap = cluster.bootstrap
    doomed = {"classic": f"{prefix}-classic-dies", "consumer": f"{prefix}-consumer-dies"}
    active = {"classic": f"{prefix}-classic-live", "consumer": f"{prefix}-consumer-live"}
    share_dead, share_live = f"{prefix}-share-old", f"{prefix}-share-live"
    streams_dead = f"{prefix}-app-old"
    # Dead before the restart: a share group and a streams app nobody runs any more.
    with share_consumer_in_group(bootstrap, share_dead, [topic]) as old:
        wait_initialised(old, bootstrap, [topic])
    with wordcount_app(bootstrap, streams_dead, tmp_path):
        pass
    watch = ConditionWatch(k8s, namespace, "rolling")
    stop_polling = threading.Event()
    with ExitStack() as stack:
        # expected_messages=1: each live member has read and committed before the policy exists.
        live = {
            kind: stack.enter_context(
                consumer_in_group(
                    bootstrap,
                    g,
                    [topic],
                    protocol=kind,
                    expected_messages=1,
                    session_timeout_ms=MEMBER_SESSION_MS,
                )
            )
            for kind, g in active.items()
        }
        dying = {
            kind: stack.enter_context(consumer_in_group(bootstrap, g, [topic], protocol=kind))
            for kind, g in doomed.items()
        }
        share = stack.enter_context(share_consumer_in_group(bootstrap, share_live, [topic]))
        committed = {g: committed_offsets(bootstrap, g) for g in active.values()}
        assert all(committed.values()), committed

        def keep_members_alive() -> None:
            # A share consumer stays a member only while it polls; classic members heartbeat in
            # librdkafka's thread but are polled too, as a real service does.
            while not stop_polling.wait(0.2):
                share.poll_some(0.1)
                for consumer in live.values():
                    consumer.poll_some(0.05)

        poller = threading.Thread(target=keep_members_alive, daemon=True)
        poller.start()
        stack.callback(poller.join, 10)
        stack.callback(stop_polling.set)
        stack.enter_context(watch.running())
        create_policy(
            k8s,
            fast_enforce_manifest(
                "rolling",
                namespace,
                bootstrap,
                [f"{prefix}-*"],
                mode="DryRun",
                selector={"include": [f"{prefix}-*"], "groupTypes": ALL_TYPES},
            ),
        )
        wait_for_status(k8s, namespace, "rolling", reason="DryRun", ready="True", timeout=60)
        cli_policy = write_policy(
            tmp_path / "rolling.yaml",
            "rolling-cli",
            bootstrap,
            [f"{prefix}-*"],
            rules={"emptyGroupRetention": "2s"},
            selector={"include": [f"{prefix}-*"], "groupTypes": ALL_TYPES},
        )
        for step, node in enumerate(sorted(cluster.nodes)):
            cluster.stop(node)
            # The CLI rides through it too: a plan while the node is down answers as on a healthy cluster.
            planned = run_cli("plan", "-f", str(cli_policy), "-o", "json", timeout=120)
            assert planned.returncode == 0 and "Kafka unavailable" not in planned.stderr, planned.stderr
            assert not {a["group"] for a in json.loads(planned.stdout)["actions"]} & {
                *active.values(),
                share_live,
            }
            if step == 0:  # passes now delete, while the first node is down
                patch_spec(k8s, namespace, "rolling", {"mode": "Enforce"})
            if step == 1:  # two groups die in the middle of the restart
                for consumer in dying.values():
                    consumer.close()
            cluster.up(node)
            wait_for(cluster.in_sync, timeout=120, what=f"node {node} back in sync")
        cluster.elect_preferred_leaders()

        def all_dead_deleted(policy: dict[str, Any]) -> bool:
            return bool((policy.get("status") or {}).get("totals", {}).get("groupsDeleted") == 4)

        wait_for_status(
            k8s, namespace, "rolling", reason="Succeeded", ready="True", timeout=120, extra=all_dead_deleted
        )
        states = groups_on(cluster, prefix)
        # No commit of an active group was lost (the policy also deletes unsubscribed offsets).
        assert {g: committed_offsets(bootstrap, g) for g in active.values()} == committed
    dead = {*doomed.values(), share_dead, streams_dead}
    assert not dead & states, states
    assert {*active.values(), share_live} <= states, states  # nothing active deleted
    # Waiting out a node's shutdown is not a failure: never KafkaUnavailable or PartialFailure.
    assert watch.ready_reasons() <= {"DryRun", "Succeeded", "Reconciling", "WaitingForKafka"}, watch.seen
    assert warnings_of(k8s, namespace, "rolling") == []

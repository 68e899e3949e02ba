"""First-observed clocks that survive the operator (--observations-topic), with the offsets log not
read (--no-offsets-log: what a managed Kafka that hides `__consumer_offsets` forces): an Empty group
made by a real consumer is deleted at the retention counted from its FIRST observation, across a
restart of the operator and across a failover to the standby after the leader was killed.

Both tests cost about 20-23 s each (the 15 s retention runs once per test); measured 2026-11-26 on
the devstack: deleted 16.4 s after the first observation (9.4 s after the restart) and 16.9 s
after it (8.5 s after the standby took over)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kubernetes.client import ApiClient

from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.connection_settings import settings_from_properties
from gwtest.k8s import lease_holder
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.operator import OperatorProcess, create_policy, existing_groups, fast_enforce_manifest
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

RETENTION_S = 15
INTERVAL_S = 2
# A deletion comes at the first pass after the retention: within an interval, plus the pass and
# this test's polling (0.2 s) on a loaded machine. The restart / takeover comes early enough that
# a restarted clock could not fit in this window (asserted separately).
TOLERANCE_S = INTERVAL_S + 3


@pytest.fixture
def store_topic(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("gw-observations")
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([name], operation_timeout=10)[name].exception(15)


def first_observed(bootstrap: str, topic: str, group: str) -> float | None:
    """The group's Empty-since clock as the operator stored it (epoch seconds), None before."""
    since = None
    reader = OffsetsLogReader(settings_from_properties({}, bootstrap_servers=bootstrap), topic=topic)
    for record in reader.read({}):
        value = json.loads(record.value) if record.value else {}
        if value.get("group") == group and value.get("emptySince"):
            since = value["emptySince"]
    return None if since is None else datetime.fromisoformat(since).timestamp()


def deleted_at(bootstrap: str, group: str, timeout: float) -> float:
    return wait_for(
        lambda: time.time() if not existing_groups(bootstrap, [group]) else None,
        timeout=timeout,
        what=f"{group} to be deleted",
    )


def setup(
    k8s: ApiClient, namespace: str, bootstrap: str, unique_name: Callable[[str], str], name: str
) -> tuple[str, dict[str, object]]:
    prefix = unique_name(name)
    topic = topic_with_messages(bootstrap, f"{prefix}-t")
    group = f"{prefix}-idle"
    empty_group(bootstrap, group, [topic])
    manifest = fast_enforce_manifest(
        name, namespace, bootstrap, [f"{prefix}-*"], rules={"emptyGroupRetention": f"{RETENTION_S}s"}
    )
    return group, manifest


def test_a_restart_in_the_middle_of_the_retention_keeps_the_first_observation(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    store_topic: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    group, manifest = setup(k8s, namespace, kafka_bootstrap, unique_name, "restart")
    args = ["--no-offsets-log", "--observations-topic", store_topic]
    first = OperatorProcess(kubeconfig, [namespace], tmp_path / "first.log", args).start()
    second = OperatorProcess(kubeconfig, [namespace], tmp_path / "second.log", args)
    try:
        create_policy(k8s, manifest)
        seen = wait_for(lambda: first_observed(kafka_bootstrap, store_topic, group), timeout=30)
        wait_for(lambda: time.time() > seen + 7, timeout=10, what="the middle of the retention")
        first.stop()  # a rolling upgrade: SIGTERM, the Lease released
        restarted = time.time()
        second.start()
        gone = deleted_at(kafka_bootstrap, group, timeout=RETENTION_S + 15)
    finally:
        for process in (first, second):
            if process.running:
                process.stop()
        print("---- second ----\n" + "\n".join(second.logs().splitlines()[-30:]))
    print(f"deleted {gone - seen:.1f}s after the first observation, {gone - restarted:.1f}s after restart")
    # Counted from the first observation, never earlier (and not before the new process could act,
    # on a machine slow enough to start it late); a restarted clock would have deleted it at
    # restarted + RETENTION_S at the soonest.
    assert seen + RETENTION_S <= gone <= max(seen + RETENTION_S, restarted) + TOLERANCE_S
    assert gone < restarted + RETENTION_S
    assert "restored 1 groups' clocks" in second.logs()


def test_the_standby_that_takes_over_from_a_killed_leader_keeps_the_first_observation(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    store_topic: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    group, manifest = setup(k8s, namespace, kafka_bootstrap, unique_name, "failover")
    args = ["--no-offsets-log", "--observations-topic", store_topic]
    a = OperatorProcess(kubeconfig, [namespace], tmp_path / "a.log", args, {"POD_NAME": "replica-a"}).start()
    b = OperatorProcess(kubeconfig, [namespace], tmp_path / "b.log", args, {"POD_NAME": "replica-b"})
    try:
        wait_for(lambda: lease_holder(k8s, namespace) == "replica-a", timeout=30, what="replica-a to lead")
        b.start()
        wait_for(lambda: "groupwarden_leader 0.0" in b.metrics(), timeout=30, what="replica-b as standby")
        create_policy(k8s, manifest)
        seen = wait_for(lambda: first_observed(kafka_bootstrap, store_topic, group), timeout=30)
        wait_for(lambda: time.time() > seen + 3, timeout=10, what="the middle of the retention")
        a.kill()  # a crashed pod: no Lease release, the standby waits the Lease out (5 s)
        wait_for(lambda: lease_holder(k8s, namespace) == "replica-b", timeout=30, what="replica-b to lead")
        took_over = time.time()
        gone = deleted_at(kafka_bootstrap, group, timeout=RETENTION_S + 15)
    finally:
        for process in (a, b):
            if process.running:
                process.stop()
        print("---- b ----\n" + "\n".join(b.logs().splitlines()[-30:]))
    print(f"deleted {gone - seen:.1f}s after the first observation, {gone - took_over:.1f}s after takeover")
    assert seen + RETENTION_S <= gone <= max(seen + RETENTION_S, took_over) + TOLERANCE_S
    assert gone < took_over + RETENTION_S  # not from the takeover
    assert "restored 1 groups' clocks" in b.logs()

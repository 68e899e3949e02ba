"""A Kafka cluster that goes away under a running operator, seen from the operator's output and
its shutdown (docs/operator.md, "Logging" and "High availability"); the cluster is a private
broker behind Toxiproxy (gwtest/proxied_kafka.py), the proxy disabled for "down":

- a minute of outage with an Enforce policy that has something to delete and an audit topic
  (the audit producer reconnecting all the while): at most 60 lines of output from the outage's
  start to the first run that deletes again, none written by a client library straight to
  stderr (librdkafka's own format: `%3|1796186739.753|FAIL|...`);
- SIGTERM while a pass waits for the unreachable cluster (its reads retrying), and while a
  deletion step does: the process exits within 5 s, the Lease is released, the interrupted
  step's outcome is on the trail (not sent: the operator is stopping), nothing is sent after the
  release, and the next operator deletes each group once.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from gwtest.audit_log import audit_records_of_log
from gwtest.k8s import lease_holder
from gwtest.kafka import empty_group, topic_with_messages
from gwtest.operator import (
    Failpoint,
    OperatorProcess,
    condition,
    create_policy,
    existing_groups,
    fast_enforce_manifest,
    get_policy,
    wait_for_status,
)
from gwtest.proxied_kafka import ProxiedBroker, proxied_broker
from gwtest.toxiproxy import ToxiproxyServer
from gwtest.wait import wait_for

pytestmark = pytest.mark.usefixtures("policy_crd")

OUTAGE_S = 60
MAX_LINES = 60
STOP_WITHIN_S = 5
# librdkafka's own log format, written to stderr when a client has no `logger`.
LIBRDKAFKA_DIRECT = re.compile(r"^%\d\|\d+\.\d+\|")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, toxiproxy: ToxiproxyServer) -> Iterator[ProxiedBroker]:
    with proxied_broker(tmp_path_factory.mktemp("outage-broker"), toxiproxy) as started:
        yield started


def totals(policy: dict[str, Any]) -> dict[str, int]:
    return dict((policy.get("status") or {}).get("totals") or {})


def message_of(line: str) -> str | None:
    """The message of one of the operator's JSON log lines (None: a line not written by logging)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return str(record.get("message", "")) if isinstance(record, dict) else None


def assert_quiet(lines: list[str], what: str) -> None:
    kinds = Counter(re.sub(r"\d+", "N", message_of(line) or "RAW " + line)[:100] for line in lines)
    print(f"{what}: {len(lines)} lines; by kind:\n" + "\n".join(f"{n:4} {k}" for k, n in kinds.most_common()))
    direct = [line for line in lines if LIBRDKAFKA_DIRECT.match(line)]
    assert not direct, f"{len(direct)} librdkafka lines written to stderr directly, e.g. {direct[:3]}"
    raw = [line for line in lines if message_of(line) is None and line.strip()]
    assert not raw, f"{len(raw)} lines that did not come through logging, e.g. {raw[:3]}"
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines:\n" + "\n".join(lines[:120])


def test_a_minute_of_outage_logs_a_few_lines_and_nothing_straight_to_stderr(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    broker: ProxiedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    prefix = unique_name("outage")
    topic = topic_with_messages(broker.direct, f"{prefix}-t")
    before, during = f"{prefix}-before", f"{prefix}-during"
    empty_group(broker.direct, before, [topic])
    # Short client timeouts: several runs fail during the minute (KafkaUnavailable, backoff,
    # a new client each time) instead of one run waiting it out.
    client.CoreV1Api(k8s).create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "timeouts"},
            "stringData": {"request.timeout.ms": "5000", "default.api.timeout.ms": "10000"},
        },
    )
    log = tmp_path / "operator.log"
    operator = OperatorProcess(
        kubeconfig, [namespace], log, extra_args=[f"--audit-topic={prefix}-audit"]
    ).start()
    try:
        kafka = {"bootstrapServers": broker.proxied, "authSecretRef": {"name": "timeouts"}}
        # A 5 s interval: fewer lines of the healthy runs after the heal.
        create_policy(
            k8s,
            fast_enforce_manifest(
                "p", namespace, broker.proxied, [f"{prefix}-*"], kafka=kafka, interval="5s"
            ),
        )
        wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 1,
        )
        mark = log.stat().st_size
        broker.proxy.enabled(False)
        down_at = time.monotonic()
        empty_group(broker.direct, during, [topic])  # to delete once the cluster is back (direct listener)
        wait_for_status(k8s, namespace, "p", reason="KafkaUnavailable", ready="False", timeout=OUTAGE_S)
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        broker.proxy.enabled(True)
        up_at = time.monotonic()
        wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 2,
        )
        print(f"down {up_at - down_at:.0f}s; deleting again {time.monotonic() - up_at:.1f}s after the heal")
        # The client errors end with one line once they stopped for a while (client_logs.py).
        wait_for(
            lambda: "reachable again (recovered)" in log.read_bytes()[mark:].decode(errors="replace"),
            timeout=40,
            what="the recovered line",
        )
        print(f"recovered line {time.monotonic() - up_at:.1f}s after the heal")
        assert existing_groups(broker.direct, [before, during]) == set()
        lines = log.read_bytes()[mark:].decode(errors="replace").splitlines()
        assert_quiet(lines, f"{OUTAGE_S}s outage and recovery")
        text = "\n".join(lines)
        assert "KafkaUnavailable" in text or "unavailable" in text  # the state change is said
        assert "recovered" in text  # ... and the recovery
        assert operator.running
    finally:
        operator.stop()


def stop_within(operator: OperatorProcess, seconds: float) -> float:
    """SIGTERM; how long the process took to exit (it must, within `seconds`, with code 0)."""
    assert operator.process is not None
    sent = time.monotonic()
    operator.process.send_signal(signal.SIGTERM)
    operator.process.wait(90)
    took = time.monotonic() - sent
    print(f"SIGTERM to exit: {took:.1f}s (exit code {operator.process.returncode})")
    assert took <= seconds, operator.logs()[-6000:]
    assert operator.process.returncode == 0
    return took


def waiting_for_kafka(k8s: ApiClient, namespace: str, name: str) -> bool:
    return (condition(get_policy(k8s, namespace, name), "Reconciling") or {}).get(
        "reason"
    ) == "WaitingForKafka"


def test_sigterm_while_a_pass_waits_for_the_cluster_exits_at_once_and_releases_the_lease(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    broker: ProxiedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The gather's reads retry until `default.api.timeout.ms` (60 s by default) while the cluster
    is down: the stop ends them at once."""
    prefix = unique_name("stop-read")
    topic = topic_with_messages(broker.direct, f"{prefix}-t")
    before, during = f"{prefix}-before", f"{prefix}-during"
    empty_group(broker.direct, before, [topic])
    audit = [f"--audit-topic={prefix}-audit"]
    first = OperatorProcess(kubeconfig, [namespace], tmp_path / "first.log", extra_args=audit).start()
    second: OperatorProcess | None = None
    try:
        create_policy(k8s, fast_enforce_manifest("p", namespace, broker.proxied, [f"{prefix}-*"]))
        wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 1,
        )
        broker.proxy.enabled(False)
        empty_group(broker.direct, during, [topic])
        wait_for(lambda: waiting_for_kafka(k8s, namespace, "p"), timeout=30, what="a pass to wait for Kafka")
        time.sleep(2)
        stop_within(first, STOP_WITHIN_S)
        assert not lease_holder(k8s, namespace)  # released: a standby takes it at its next attempt
        assert "released the leader Lease" in first.logs()
        assert not [line for line in first.logs().splitlines() if LIBRDKAFKA_DIRECT.match(line)]

        broker.proxy.enabled(True)
        second = OperatorProcess(kubeconfig, [namespace], tmp_path / "second.log", extra_args=audit).start()
        wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 2,
        )
        assert existing_groups(broker.direct, [before, during]) == set()
        assert audit_records_of_log(first.logs(), during) == []
        again = [(r["type"], r.get("result")) for r in audit_records_of_log(second.logs(), during)]
        assert again == [("intent", None), ("outcome", "Deleted")], again
    finally:
        broker.proxy.enabled(True)
        if first.running:
            first.stop()
        if second is not None:
            second.stop()


def test_sigterm_while_a_deletion_step_waits_for_the_cluster_records_it_and_sends_nothing_after(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    broker: ProxiedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The DeleteGroups step retries its FindCoordinator (no DeleteGroups sent yet) when SIGTERM
    comes: the stop ends the retries and the guard refuses the send, so the outcome on the trail
    is `Failed` "not sent again: the operator is stopping" (a sent request would have its answer,
    or be `Unknown`), nothing is sent once the cluster is back, and the next operator deletes the
    group once."""
    prefix = unique_name("stop-step")
    topic = topic_with_messages(broker.direct, f"{prefix}-t")
    group = f"{prefix}-g"
    empty_group(broker.direct, group, [topic])
    failpoint = Failpoint(tmp_path / "failpoint")
    failpoint.hold(at_request=True)  # the fault hits the DeleteGroups itself
    first = OperatorProcess(kubeconfig, [namespace], tmp_path / "first.log", env=failpoint.env).start()
    second: OperatorProcess | None = None
    try:
        create_policy(k8s, fast_enforce_manifest("p", namespace, broker.proxied, [f"{prefix}-*"]))
        assert "DeleteGroup" in failpoint.wait_held()
        wait_for(lambda: lease_holder(k8s, namespace), timeout=30, what="the operator to hold the Lease")
        broker.proxy.enabled(False)
        failpoint.release()
        wait_for(
            lambda: waiting_for_kafka(k8s, namespace, "p"), timeout=30, what="the step to wait for Kafka"
        )
        time.sleep(2)
        stop_within(first, STOP_WITHIN_S)
        assert not lease_holder(k8s, namespace)
        records = audit_records_of_log(first.logs(), group)
        assert [(r["type"], r.get("result")) for r in records] == [("intent", None), ("outcome", "Failed")], (
            records
        )
        assert "the operator is stopping" in records[1]["error"]

        broker.proxy.enabled(True)
        time.sleep(3)  # nothing of the stopped process is sent once the cluster is reachable again
        assert existing_groups(broker.direct, [group]) == {group}
        second = OperatorProcess(kubeconfig, [namespace], tmp_path / "second.log").start()
        wait_for_status(
            k8s,
            namespace,
            "p",
            reason="Succeeded",
            timeout=60,
            extra=lambda p: totals(p).get("groupsDeleted") == 1,
        )
        assert existing_groups(broker.direct, [group]) == set()
        again = [(r["type"], r.get("result")) for r in audit_records_of_log(second.logs(), group)]
        assert again == [("intent", None), ("outcome", "Deleted")], again
    finally:
        failpoint.release()
        broker.proxy.enabled(True)
        if first.running:
            first.stop()
        if second is not None:
            second.stop()

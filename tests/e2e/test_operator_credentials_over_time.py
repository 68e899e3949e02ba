"""Credentials over time, on the devstack's SASL_SSL/SCRAM listener: a password rotated on the
broker and in the Secret (the next run uses the new one and the old connection is closed), a
wrong password and a CA that did not sign the broker's certificate (each its own reason, retried
with backoff, not in a storm) -- and no password in logs, status, events or `kubectl describe`."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from test_operator_credentials import assert_never_shown, create_secret

from gwtest.kafka import set_scram_password
from gwtest.observe import established_local_ports, metric_value
from gwtest.operator import (
    OperatorProcess,
    condition,
    create_policy,
    events_of,
    policy_manifest,
    wait_for_status,
)
from gwtest.wait import wait_for

RUNS = "groupwarden_runs_total"


pytestmark = pytest.mark.usefixtures("policy_crd")


def sasl_port(sasl: dict[str, str]) -> int:
    return int(sasl["bootstrap"].rsplit(":", 1)[1])


def secret_properties(sasl: dict[str, str], user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": sasl["sasl.mechanism"],
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.pem": sasl["ssl.ca.pem"],
    }


def last_run_start(policy: dict[str, object]) -> datetime | None:
    status = policy.get("status") or {}
    assert isinstance(status, dict)
    started = (status.get("lastRun") or {}).get("startTime")
    return datetime.fromisoformat(started.replace("Z", "+00:00")) if started else None


def test_a_rotated_password_is_used_by_the_next_run_and_the_old_connection_is_closed(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
    sasl: dict[str, str],
) -> None:
    user = unique_name("rot-user")
    old, new = "old-" + secrets.token_hex(12), "new-" + secrets.token_hex(12)
    set_scram_password(kafka_bootstrap, user, old)
    create_secret(k8s, namespace, "creds", secret_properties(sasl, user, old))
    kafka = {"bootstrapServers": sasl["bootstrap"], "authSecretRef": {"name": "creds"}}
    manifest = policy_manifest(
        "rot", namespace, sasl["bootstrap"], kafka=kafka, interval="2s", selector={"include": [f"{user}-*"]}
    )
    create_policy(k8s, manifest)
    wait_for_status(k8s, namespace, "rot", reason="DryRun", ready="True", timeout=90)
    assert operator.process is not None
    pid, port = operator.process.pid, sasl_port(sasl)
    before = wait_for(lambda: established_local_ports(pid, port), what="the pooled client's connection")

    # Rotation as a platform team does it: the broker first, then the Secret. Until the Secret
    # changes, new connections with the old password fail; the pooled one keeps working (Kafka
    # does not re-authenticate an open connection by default: connections.max.reauth.ms = 0).
    set_scram_password(kafka_bootstrap, user, new)
    client.CoreV1Api(k8s).patch_namespaced_secret("creds", namespace, {"stringData": {"sasl.password": new}})
    rotated = datetime.now().astimezone()
    # The next run that starts after the rotation must succeed: with the new password, since
    # the broker now refuses the old one.
    wait_for_status(
        k8s,
        namespace,
        "rot",
        reason="DryRun",
        ready="True",
        timeout=90,
        extra=lambda p: (last_run_start(p) or rotated) > rotated,
    )
    after = wait_for(lambda: established_local_ports(pid, port), what="a connection with the new password")
    assert not before & after, f"a connection from before the rotation is still open: {before & after}"
    assert metric_value(operator.metrics(), "groupwarden_kafka_connections", {}) == 1
    assert_never_shown(old, operator, k8s, kubeconfig, namespace)
    assert_never_shown(new, operator, k8s, kubeconfig, namespace)


def run_times(
    operator: OperatorProcess, namespace: str, name: str, result: str, seconds: float
) -> list[float]:
    """When the runs of one policy with `result` finished from now on, by polling its runs counter."""
    labels = {"namespace": namespace, "name": name, "result": result}
    seen, deadline = metric_value(operator.metrics(), RUNS, labels), time.monotonic() + seconds
    times: list[float] = []
    while time.monotonic() < deadline:
        count = metric_value(operator.metrics(), RUNS, labels)
        if count > seen:
            times += [time.monotonic()] * int(count - seen)
            seen = count
        time.sleep(0.2)
    return times


def test_wrong_password_and_foreign_ca_are_named_stalled_and_retried_with_backoff(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    operator: OperatorProcess,
    sasl: dict[str, str],
    tmp_path: Path,
) -> None:
    user = unique_name("bad-user")
    right, wrong = "right-" + secrets.token_hex(12), "wrong-" + secrets.token_hex(12)
    set_scram_password(kafka_bootstrap, user, right)
    foreign_ca = _self_signed_ca(tmp_path)
    # A short API timeout keeps each failing attempt short (the client gives up bootstrapping
    # after it); the backoff between attempts is what the test is about.
    timeout = {"default.api.timeout.ms": "5000"}
    create_secret(k8s, namespace, "wrong-pw", {**secret_properties(sasl, user, wrong), **timeout})
    foreign = {**secret_properties(sasl, user, right), "ssl.ca.pem": foreign_ca, **timeout}
    create_secret(k8s, namespace, "wrong-ca", foreign)
    for name, secret in (("pw", "wrong-pw"), ("ca", "wrong-ca")):
        kafka = {"bootstrapServers": sasl["bootstrap"], "authSecretRef": {"name": secret}}
        create_policy(
            k8s,
            policy_manifest(
                name,
                namespace,
                sasl["bootstrap"],
                kafka=kafka,
                interval="1m",
                selector={"include": [f"{user}-*"]},
            ),
        )
    pw = wait_for_status(k8s, namespace, "pw", reason="AuthenticationFailed", ready="False", timeout=90)
    ca = wait_for_status(k8s, namespace, "ca", reason="TLSHandshakeFailed", ready="False", timeout=90)
    for policy in (pw, ca):
        assert (condition(policy, "Stalled") or {}).get("status") == "True"
    assert "SCRAM-SHA-512" in (condition(pw) or {})["message"]
    assert "not signed by the CA" in (condition(ca) or {})["message"]
    assert [e["reason"] for e in events_of(k8s, namespace, "pw")] == ["AuthenticationFailed"]
    assert [e["reason"] for e in events_of(k8s, namespace, "ca")] == ["TLSHandshakeFailed"]

    # No retry storm: retries back off (5 s, 10 s, 20 s ... capped at the interval), so in 30 s a
    # policy fails at most 3 more times, each gap at least the base delay and growing.
    for name, reason in (("pw", "AuthenticationFailed"), ("ca", "TLSHandshakeFailed")):
        assert metric_value(operator.metrics(), RUNS, {"name": name, "result": reason}) >= 1
    times = run_times(operator, namespace, "pw", "AuthenticationFailed", 30)
    assert 1 <= len(times) <= 3, f"{len(times)} failed runs in 30 s: a retry storm (or none at all)"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= 5 for gap in gaps), gaps
    assert metric_value(operator.metrics(), RUNS, {"name": "ca", "result": "TLSHandshakeFailed"}) <= 5
    assert_never_shown(right, operator, k8s, kubeconfig, namespace)
    assert_never_shown(wrong, operator, k8s, kubeconfig, namespace)
    assert operator.running


def _self_signed_ca(directory: Path) -> str:
    """A CA that did not sign the broker's certificate (what a Secret from the wrong cluster holds)."""
    import subprocess

    key, cert = directory / "ca.key", directory / "ca.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=not the devstack CA"]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert.read_text()

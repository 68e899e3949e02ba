"""The operator as a real process for e2e tests, plus ConsumerGroupPolicy / Event helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from gwtest.ports import free_port
from gwtest.wait import wait_for

GROUP, VERSION, PLURAL = "groupwarden.io", "v1beta1", "consumergrouppolicies"


def groupwarden_executable() -> str:
    """The console script of the interpreter running the tests (the repo's .venv)."""
    candidate = Path(sys.executable).parent / "groupwarden"
    return str(candidate) if candidate.exists() else "groupwarden"


class OperatorProcess:
    """`groupwarden run` in a subprocess; its combined output goes to `log_path`."""

    def __init__(
        self,
        kubeconfig: str,
        namespaces: Sequence[str],
        log_path: Path,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespaces = list(namespaces)
        self.log_path = log_path
        self.metrics_port = free_port()
        self.extra_args = list(extra_args)
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        args = [
            groupwarden_executable(),
            "run",
            "--metrics-port",
            str(self.metrics_port),
            "--log-format",
            "json",
        ]
        for namespace in self.namespaces:
            args += ["--namespace", namespace]
        if not any(a.startswith("--default-credentials-namespaces") for a in self.extra_args):
            # Policies in the tests' own namespaces act with the (unauthenticated) default credentials;
            # tests of the guard itself pass the flag explicitly.
            args += ["--default-credentials-namespaces", ",".join(self.namespaces) or "*"]
        if not any(a.startswith("--observations-topic") for a in self.extra_args):
            # Every test's operator is its own installation: the default store topic of one
            # cluster would be fenced back and forth between concurrent tests (docs/operator.md:
            # two installations on one cluster use different topics). Created only when needed.
            args += [f"--observations-topic=gwtest-observations-{uuid.uuid4().hex[:8]}"]
        args += ["--lease-duration", "5", *self.extra_args]
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, **self.env}
        # Not a pod: with POD_NAMESPACE inherited from the caller's shell every test's operator
        # would campaign for one Lease in that namespace instead of its test's own.
        if "POD_NAMESPACE" not in self.env:
            env.pop("POD_NAMESPACE", None)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (graceful: releases the Lease) and wait."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL: no cleanup at all (a crashed pod)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return str(response.read().decode())


@contextmanager
def running_operator(
    kubeconfig: str,
    namespaces: Sequence[str],
    log_path: Path,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(kubeconfig, namespaces, log_path, extra_args, env).start()
    try:
        yield operator
    finally:
        if operator.running:
            operator.stop()


# -- policies ------------------------------------------------------------------------------------


def policy_manifest(name: str, namespace: str, bootstrap: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"kafka": {"bootstrapServers": bootstrap}, **spec},
    }


# Retentions and limits that let a policy act within seconds of a group emptying.
FAST_RULES = {
    "emptyGroupRetention": "2s",
    "unsubscribedOffsetRetention": "2s",
    "simpleGroupOffsetRetention": "2s",
}
NO_BREAKER = {"maxDeletionRatio": 1}


def fast_enforce_manifest(
    name: str, namespace: str, bootstrap: str, include: list[str], **spec: Any
) -> dict[str, Any]:
    """An Enforce policy over the `include` globs that acts within seconds (2 s retentions and
    interval, no blast-radius breaker); `spec` adds or overrides fields."""
    fast = {
        "mode": "Enforce",
        "rules": FAST_RULES,
        "limits": NO_BREAKER,
        "interval": "2s",
        "selector": {"include": include},
    }
    return policy_manifest(name, namespace, bootstrap, **{**fast, **spec})


def create_policy(api: ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    namespace = manifest["metadata"]["namespace"]
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, manifest
    )
    return created


def get_policy(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    policy: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return policy


def patch_spec(api: ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    patched: dict[str, Any] = client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": spec}, _content_type="application/merge-patch+json"
    )
    return patched


def delete_policy(api: ApiClient, namespace: str, name: str) -> None:
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def condition(policy: dict[str, Any], kind: str = "Ready") -> dict[str, Any] | None:
    for item in (policy.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def wait_for_status(
    api: ApiClient,
    namespace: str,
    name: str,
    *,
    reason: str | None = None,
    ready: str | None = None,
    generation: int | None = None,
    timeout: float = 60,
    extra: Any = None,
) -> dict[str, Any]:
    """Waits until the Ready condition has `reason`/`ready` for the current (or given) generation,
    and `extra(policy)` holds; returns the policy."""

    def check() -> dict[str, Any] | None:
        policy = get_policy(api, namespace, name)
        status = policy.get("status") or {}
        want = generation if generation is not None else policy["metadata"]["generation"]
        found = condition(policy)
        if found is None or status.get("observedGeneration") != want:
            return None
        if reason is not None and found.get("reason") != reason:
            return None
        if ready is not None and found.get("status") != ready:
            return None
        if extra is not None and not extra(policy):
            return None
        return policy

    def last() -> str:
        try:
            return str((get_policy(api, namespace, name).get("status") or {}).get("conditions"))
        except ApiException as exc:
            return f"unreadable: {exc.status}"

    try:
        return wait_for(check, timeout=timeout, what=f"{namespace}/{name} Ready reason {reason}")
    except AssertionError as error:
        raise AssertionError(f"{error}; conditions: {last()}") from None


class ConditionWatch:
    """Reads the policy's conditions every 0.2 s in a thread: which (Ready reason, Reconciling
    reason) pairs the status went through, and the Reconciling messages that said why."""

    def __init__(self, k8s: ApiClient, namespace: str, name: str) -> None:
        self._k8s, self._namespace, self._name = k8s, namespace, name
        self.seen: list[tuple[str, str]] = []
        self.waiting_messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                policy = get_policy(self._k8s, self._namespace, self._name)
            except Exception:  # not created yet, or the API server busy: the next read
                continue
            ready, reconciling = condition(policy, "Ready"), condition(policy, "Reconciling")
            if ready is None or reconciling is None:
                continue
            pair = (ready["reason"], reconciling["reason"])
            if not self.seen or self.seen[-1] != pair:
                self.seen.append(pair)
            if reconciling["reason"] == "WaitingForKafka":
                self.waiting_messages.append(reconciling["message"])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    @contextmanager
    def running(self) -> Iterator[ConditionWatch]:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def ready_reasons(self) -> set[str]:
        return {ready for ready, _ in self.seen}


def events_of(api: ApiClient, namespace: str, name: str) -> list[dict[str, str]]:
    """Events recorded on the policy, oldest first: type, reason, message."""
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=ConsumerGroupPolicy"
    )
    items = sorted(listed.items, key=lambda e: (e.first_timestamp or e.event_time, e.metadata.name))
    return [{"type": e.type or "", "reason": e.reason or "", "message": e.message or ""} for e in items]


def deleted_groups(api: ApiClient, namespace: str, name: str) -> list[str]:
    """The groups of the policy's GroupDeleted events ("Deleted consumer group G: ..."), sorted:
    a group deleted twice shows twice."""
    events = events_of(api, namespace, name)
    return sorted(e["message"].split()[3].rstrip(":") for e in events if e["reason"] == "GroupDeleted")


def reasons(events: list[dict[str, str]]) -> list[str]:
    return [e["reason"] for e in events]


# -- Kafka state, as the broker reports it (confluent-kafka's admin client, not groupwarden's) ----


def existing_groups(bootstrap: str, groups: Iterable[str]) -> set[str]:
    """Which of `groups` exist (DescribeGroups; a deleted or unknown group is Dead). Describing
    known ids is deterministic, unlike ListGroups right after a client connects."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    ids = sorted(set(groups))
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference: futures die with it
    futures = admin.describe_consumer_groups(ids, request_timeout=30)
    return {group for group, future in futures.items() if future.result(60).state != ConsumerGroupState.DEAD}


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30)
    result = futures[group].result(60)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def ensure_crd(api: ApiClient) -> None:
    import yaml

    from gwtest.env import REPO
    from gwtest.k8s import apply_crd

    apply_crd(api, yaml.safe_load((REPO / "crds" / "groupwarden.io_consumergrouppolicies.yaml").read_text()))


class Failpoint:
    """Drives the operator's deletion-step failpoint (groupwarden.controller.failpoints)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.env = {"GROUPWARDEN_FAILPOINT_DIR": str(directory)}

    def hold(self, let_through: int = 0, at_request: bool = False) -> None:
        """Hold before the next deletion step (after its re-check, before its intents), or with
        `at_request` right before its request (after its intents and its last read): a fault
        placed then hits the deletion request itself."""
        name = "hold-request" if at_request else "hold"
        (self.directory / name).write_text(str(let_through) if let_through else "hold")

    def wait_held(self, timeout: float = 90) -> str:
        """The step the operator holds before. It creates `held`, then writes the step into it:
        an empty file is not yet the answer (seen: a test read it between the two)."""
        held = self.directory / "held"

        def step() -> str | None:
            return held.read_text() if held.exists() else None

        return wait_for(step, timeout=timeout, what="the operator to reach a deletion step")

    def release(self) -> None:
        for name in ("hold", "hold-request"):
            (self.directory / name).unlink(missing_ok=True)

    def raise_errors(self, on: bool = True) -> None:
        """While on, every deletion step raises (a stand-in for a bug of ours)."""
        marker = self.directory / "raise"
        if on:
            marker.write_text("raise")
        else:
            marker.unlink(missing_ok=True)

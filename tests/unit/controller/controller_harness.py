"""In-memory Kubernetes sinks and builders for the controller's unit tests (no kopf, no API server)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.controller.controller import Controller
from groupwarden.controller.leadership import AlwaysLeader, Leadership
from groupwarden.controller.registry import PolicyRegistry
from groupwarden.controller.wiring import build_controller
from groupwarden.core.policy import PolicyRef
from groupwarden.metrics import OperatorMetrics
from groupwarden.testing.audit_keys import fixed_signer
from groupwarden.testing.fake_kafka import FakeKafka

T = TypeVar("T")
DAY_MS = 86_400_000


@dataclass
class FakeStatusWriter:
    """Keeps the latest status per policy (a merge patch of our complete status = replace)."""

    statuses: dict[PolicyRef, dict[str, Any]] = field(default_factory=dict)
    writes: int = 0
    gone: set[PolicyRef] = field(default_factory=set)

    def exists(self, ref: PolicyRef, uid: str) -> bool:
        return ref not in self.gone

    def patch_status(self, ref: PolicyRef, status: Mapping[str, Any]) -> bool:
        if ref in self.gone:
            return False
        self.writes += 1
        self.statuses[ref] = copy.deepcopy(dict(status))
        return True


@dataclass
class PostedEvent:
    ref: PolicyRef
    type: str
    reason: str
    message: str


@dataclass
class FakeEventPoster:
    events: list[PostedEvent] = field(default_factory=list)

    def post(self, ref: PolicyRef, uid: str, event_type: str, reason: str, message: str) -> None:
        self.events.append(PostedEvent(ref, event_type, reason, message))

    def reasons(self, ref: PolicyRef | None = None) -> list[str]:
        return [e.reason for e in self.events if ref is None or e.ref == ref]


@dataclass
class FakeSecrets:
    secrets: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def read(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.secrets.get((namespace, name))


class GatewayFactory:
    """Hands out one FakeKafka per bootstrap string; records every client made."""

    def __init__(self, clusters: Mapping[str, FakeKafka]) -> None:
        self.clusters = dict(clusters)
        self.made: list[ConnectionSettings] = []

    def __call__(self, settings: ConnectionSettings) -> KafkaGateway:
        self.made.append(settings)
        return self.clusters[",".join(settings.bootstrap_servers)]


def policy_body(
    name: str,
    namespace: str = "team",
    *,
    bootstrap: str = "kafka:9092",
    generation: int = 1,
    status: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "groupwarden.io/v1beta1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "generation": generation,
            "resourceVersion": "1",
        },
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "interval": "10m",
            "selector": {"include": ["*"]},
            **spec,
        },
    }
    if status is not None:
        document["status"] = dict(status)
    return document


@dataclass
class Harness:
    fake: FakeKafka
    factory: GatewayFactory
    controller: Controller
    status: FakeStatusWriter
    events: FakeEventPoster
    secrets: FakeSecrets
    metrics: OperatorMetrics

    @property
    def registry(self) -> PolicyRegistry:
        return self.controller.registry

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.fake.now_ms / 1000, UTC)

    def status_of(self, name: str, namespace: str = "team") -> dict[str, Any]:
        return self.status.statuses[PolicyRef(namespace, name)]

    def condition(self, name: str, kind: str = "Ready", namespace: str = "team") -> dict[str, Any]:
        conditions = self.status_of(name, namespace)["conditions"]
        return next(c for c in conditions if c["type"] == kind)

    async def reconcile(self, name: str, namespace: str = "team") -> None:
        """One run of one policy, as its worker does it (without waiting for the schedule)."""
        worker = self.controller.workers[PolicyRef(namespace, name)]
        entry = self.registry.get(worker.ref)
        assert entry is not None
        await worker._run_and_publish(entry)


def make_harness(
    tmp_path: Path,
    fake: FakeKafka | None = None,
    leadership: Leadership | None = None,
    options: Mapping[str, Any] | None = None,
    **clusters: FakeKafka,
) -> Harness:
    """`options`: extra `build_controller` arguments (tenancy, audit_sinks, default_properties)."""
    fake = fake or FakeKafka(topics={"orders", "payments"})
    factory = GatewayFactory({"kafka:9092": fake, **{k.replace("_", ":"): v for k, v in clusters.items()}})
    status, events, secrets = FakeStatusWriter(), FakeEventPoster(), FakeSecrets()
    metrics = OperatorMetrics()

    def clock() -> datetime:
        return datetime.fromtimestamp(fake.now_ms / 1000, UTC)

    controller = build_controller(
        gateway_factory=factory,
        read_secret=secrets.read,
        status=status,
        events=events,
        leadership=leadership or AlwaysLeader(),
        metrics=metrics,
        kafka_executor=ThreadPoolExecutor(max_workers=2),
        pem_dir=tmp_path / "pem",
        clock=clock,
        # Runs that are due together still share a pass (they submit in the same loop turn).
        **{"coalesce_seconds": 0.01, "audit_signer": fixed_signer(), **(options or {})},
    )
    return Harness(fake, factory, controller, status, events, secrets, metrics)


def run_async(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(factory())


async def observe_quietly(harness: Harness, body: Mapping[str, Any]) -> None:
    """Registers a policy without letting its worker run on its own (tests drive the runs)."""
    harness.controller.observe(body)
    ref = PolicyRef(body["metadata"]["namespace"], body["metadata"]["name"])
    worker = harness.controller.workers[ref]
    assert worker.task is not None
    worker.task.cancel()
    await asyncio.gather(worker.task, return_exceptions=True)

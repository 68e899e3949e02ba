"""Builds a `Controller` from its ports: the one place the pieces are put together (the operator
command passes the Kubernetes and Kafka adapters, unit tests pass in-memory fakes)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from datetime import UTC, datetime
from pathlib import Path

from groupwarden.controller.connections import ConnectionPool, GatewayFactory
from groupwarden.controller.controller import Controller
from groupwarden.controller.credentials import SecretReader
from groupwarden.controller.cycle import COALESCE_SECONDS
from groupwarden.controller.leadership import Leadership
from groupwarden.controller.observation_keeper import PassMemory
from groupwarden.controller.ports import EventPoster, StatusWriter
from groupwarden.controller.publish import Publisher
from groupwarden.controller.reconcile import AuditSinks, Reconciler, log_sink_only
from groupwarden.controller.registry import PolicyRegistry
from groupwarden.core.tenancy import TenancyRules
from groupwarden.deletion_trail import RecordSigner
from groupwarden.metrics import OperatorMetrics


def build_controller(
    *,
    gateway_factory: GatewayFactory,
    read_secret: SecretReader,
    status: StatusWriter,
    events: EventPoster,
    leadership: Leadership,
    metrics: OperatorMetrics,
    kafka_executor: Executor,
    pem_dir: Path,
    audit_signer: RecordSigner,
    read_offsets_log: bool = True,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    before_step: Callable[[str], None] | None = None,
    tenancy: TenancyRules | None = None,
    audit_sinks: AuditSinks = log_sink_only,
    default_properties: dict[str, str] | None = None,
    coalesce_seconds: float = COALESCE_SECONDS,
    observations: PassMemory | None = None,
) -> Controller:
    registry = PolicyRegistry()
    metrics.set_leader(leadership.is_leader)  # a Lease starts unheld: no policy series until won
    pool = ConnectionPool(gateway_factory, read_offsets_log=read_offsets_log)
    publisher = Publisher(status, events, metrics)
    reconciler = Reconciler(
        registry,
        pool,
        read_secret,
        kafka_executor,
        pem_dir,
        clock=clock,
        before_step=before_step,
        step_done=publisher.post_outcomes,
        still_exists=lambda entry: status.exists(entry.ref, entry.uid),
        tenancy=tenancy,
        audit_sinks=audit_sinks,
        audit_signer=audit_signer,
        default_properties=default_properties,
        on_pass=metrics.cluster_pass_duration.observe,
        coalesce_seconds=coalesce_seconds,
        observations=observations,
    )
    controller = Controller(registry, pool, reconciler, publisher, leadership, metrics, clock=clock)
    reconciler.on_wait = controller.announce_kafka_wait
    return controller

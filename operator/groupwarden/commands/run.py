"""`groupwarden run`: the operator (kopf watch + per-policy workers + leader Lease + metrics)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from groupwarden.commands import exit_codes
from groupwarden.commands.audit_signing import add_signing_arguments, signer_from_args
from groupwarden.core.observed_clocks import DEFAULT_MAX_GAP

if TYPE_CHECKING:  # the operator's modules load only when it runs
    from groupwarden.adapters.kafka_audit_topic import KafkaTopicSink
    from groupwarden.connectivity.settings import ConnectionSettings
    from groupwarden.controller.leadership import Leadership
    from groupwarden.controller.observation_keeper import PassMemory
    from groupwarden.controller.reconcile import AuditSinks
    from groupwarden.core.tenancy import TenancyRules
    from groupwarden.deletion_trail import AuditSink, RecordSigner
    from groupwarden.metrics import OperatorMetrics

log = logging.getLogger("groupwarden.operator")

DEFAULT_LEASE_NAME = "groupwarden-leader"
# Where the first-observed clocks live on a cluster that needs them (controller/observation_keeper.py).
DEFAULT_OBSERVATIONS_TOPIC = "groupwarden-observations"


PERMISSION_RETRY_FIRST_S = 5
PERMISSION_RETRY_MAX_S = 300
# A stopping operator (SIGTERM) waits this long for the Kafka calls in flight (a sent deletion
# gets its answer; retries and reads give up at once), then stops their clients (a lost answer is
# an Unknown outcome) and waits this much more, before it releases the Lease.
IN_FLIGHT_GRACE_S = 2.0
ABORTED_GRACE_S = 1.0

P = ParamSpec("P")
T = TypeVar("T")


class KafkaThreads(ThreadPoolExecutor):
    """The Kafka thread pool (`--kafka-threads`), counting the calls that run, so a stopping
    operator can wait for them (bounded) before it releases the Lease."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix="gw-kafka")
        self._running = 0
        self._changed = threading.Condition()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        def counted() -> T:
            with self._changed:
                self._running += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._changed:
                    self._running -= 1
                    self._changed.notify_all()

        return super().submit(counted)

    @property
    def running(self) -> int:
        return self._running

    def wait_idle(self, timeout: float) -> bool:
        """True when no call runs (any more) within `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._running == 0, timeout)


def register(subparsers: Any) -> None:
    helptext = "run the operator: reconcile ConsumerGroupPolicies on a Kubernetes cluster"
    parser = subparsers.add_parser("run", help=helptext, description=helptext)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch policies in this namespace (repeatable)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="watch policies in every namespace (the default without --namespace)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        metavar="PORT",
        help="Prometheus /metrics port (0 disables; default 8080)",
    )
    parser.add_argument("--log-format", choices=("json", "text"), default="text")
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)",
    )
    parser.add_argument(
        "--no-leader-election",
        action="store_true",
        help="act without holding the leader Lease (only for a single replica)",
    )
    parser.add_argument(
        "--leader-election-namespace",
        metavar="NS",
        help="namespace of the leader Lease (default: $POD_NAMESPACE, else the first "
        "--namespace, else default)",
    )
    parser.add_argument("--lease-name", default=DEFAULT_LEASE_NAME, help="name of the leader Lease")
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how long a silent leader keeps the Lease before a standby takes over",
    )
    parser.add_argument(
        "--no-offsets-log",
        action="store_true",
        help="do not read __consumer_offsets; use first-observed times",
    )
    parser.add_argument(
        "--kafka-threads",
        type=int,
        default=8,
        metavar="N",
        help="threads for blocking Kafka calls (clusters are worked on in parallel)",
    )
    guards = parser.add_argument_group("tenant isolation and safety")
    guards.add_argument(
        "--default-credentials-namespaces",
        action="append",
        default=[],
        metavar="NS[,NS...]",
        help="namespaces whose policies without spec.kafka.authSecretRef may act with the operator's "
        "default credentials ('*': all); other namespaces must bring a Secret (default: none)",
    )
    guards.add_argument(
        "--default-command-config",
        type=Path,
        metavar="client.properties",
        help="the operator's default Kafka client properties (security.protocol, sasl.*, ssl.*)",
    )
    guards.add_argument(
        "--tenant-allowlist",
        type=Path,
        metavar="FILE",
        help="YAML: per namespace, the bootstrap servers and group-id globs its policies may touch "
        "(docs/operator.md); a policy outside it is Stalled with reason Forbidden",
    )
    guards.add_argument(
        "--min-retention",
        metavar="DURATION",
        help="refuse Enforce policies with a shorter retention (reason RetentionBelowMinimum), e.g. 10m",
    )
    audit = parser.add_argument_group("audit trail")
    audit.add_argument(
        "--audit-topic",
        metavar="TOPIC",
        help="also write the write-ahead audit trail to this topic on each cleaned cluster (keyed by "
        "group); a record that cannot be written blocks the deletion",
    )
    audit.add_argument(
        "--no-create-audit-topic",
        action="store_true",
        help="never create the audit topic (it must exist)",
    )
    audit.add_argument(
        "--audit-topic-retention",
        default="90d",
        metavar="DURATION",
        help="retention.ms of an audit topic the operator creates (default 90d)",
    )
    add_signing_arguments(audit)
    observations = parser.add_argument_group("first-observed times (clusters without a readable offsets log)")
    observations.add_argument(
        "--observations-topic",
        metavar="TOPIC",
        default=DEFAULT_OBSERVATIONS_TOPIC,
        help="keep the first-observed clocks in this compacted topic on each cleaned cluster that "
        "needs them (its offsets log unreadable), so a restart or a failover to the standby "
        f"continues them (docs/operator.md; default {DEFAULT_OBSERVATIONS_TOPIC}; '' keeps them "
        "in memory only); clusters whose offsets log dates everything get no topic",
    )
    observations.add_argument(
        "--no-create-observations-topic",
        action="store_true",
        help="never create the observations topic (it must exist, compacted)",
    )
    observations.add_argument(
        "--observations-max-gap",
        default="30m",
        metavar="DURATION",
        help="a stored clock not confirmed for longer than this when the operator resumes restarts "
        "(default 30m)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.set_defaults(run=run)  # fmt: skip


@dataclass(frozen=True)
class OperatorOptions:
    """What `groupwarden run` was asked for, read and checked once from the command line."""

    namespaces: tuple[str, ...]  # empty: every namespace
    metrics_port: int  # 0: no endpoint
    log_format: Literal["json", "text"]
    kubeconfig: str | None
    leader_election: bool
    leader_election_namespace: str | None
    lease_name: str
    lease_duration: float
    read_offsets_log: bool
    kafka_threads: int
    tenancy: TenancyRules
    default_properties: Mapping[str, str]
    audit_sinks: AuditSinks
    audit_signer: RecordSigner
    min_retention: str | None  # as given (the start-up log line); the rule is in `tenancy`
    audit_topic: str | None
    verbose: bool
    observations_topic: str | None = DEFAULT_OBSERVATIONS_TOPIC
    create_observations_topic: bool = True
    observations_max_gap: timedelta = DEFAULT_MAX_GAP

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorOptions:
        """Raises ValueError with a message naming the flag (never a property value or key)."""
        from groupwarden.deletion_trail import AuditKeyError

        if args.kafka_threads < 1 or args.lease_duration < 3:
            raise ValueError("--kafka-threads must be >= 1 and --lease-duration >= 3")
        tenancy, default_properties = guards_from_args(args)
        from groupwarden.core.durations import parse_duration

        try:
            max_gap = parse_duration(args.observations_max_gap)
        except ValueError as error:
            raise ValueError(f"--observations-max-gap: {error}") from None
        try:
            signer = signer_from_args(args)
        except AuditKeyError as error:
            raise ValueError(f"--audit-signing-key: {error}") from None
        return cls(
            namespaces=tuple(args.namespace),
            metrics_port=args.metrics_port,
            log_format=args.log_format,
            kubeconfig=args.kubeconfig,
            leader_election=not args.no_leader_election,
            leader_election_namespace=args.leader_election_namespace,
            lease_name=args.lease_name,
            lease_duration=args.lease_duration,
            read_offsets_log=not args.no_offsets_log,
            kafka_threads=args.kafka_threads,
            tenancy=tenancy,
            default_properties=default_properties,
            audit_sinks=audit_sinks_from_args(args),
            audit_signer=signer,
            min_retention=args.min_retention,
            audit_topic=args.audit_topic,
            verbose=args.verbose,
            observations_topic=args.observations_topic,
            create_observations_topic=not args.no_create_observations_topic,
            observations_max_gap=max_gap,
        )


def guards_from_args(args: argparse.Namespace) -> tuple[TenancyRules, dict[str, str]]:
    """(TenancyRules, default client properties) from the flags. Raises ValueError with a message
    naming the flag (never a property value)."""
    from groupwarden.connectivity.settings import load_properties_file, settings_from_properties
    from groupwarden.core.durations import parse_duration
    from groupwarden.core.policy import PolicyError
    from groupwarden.core.tenancy import TenancyRules, parse_allowlist, parse_namespace_list

    allowlist = None
    if args.tenant_allowlist is not None:
        try:
            allowlist = parse_allowlist(
                args.tenant_allowlist.read_text(encoding="utf-8"), str(args.tenant_allowlist)
            )
        except (OSError, PolicyError) as error:
            raise ValueError(f"--tenant-allowlist: {error}") from None
    min_retention = None
    if args.min_retention:
        try:
            min_retention = parse_duration(args.min_retention)
        except ValueError as error:
            raise ValueError(f"--min-retention: {error}") from None
    default_properties: dict[str, str] = {}
    if args.default_command_config is not None:
        try:
            default_properties = load_properties_file(args.default_command_config)
            settings_from_properties(default_properties, bootstrap_servers="127.0.0.1:9092")
        except (OSError, ValueError) as error:
            raise ValueError(f"--default-command-config: {error}") from None
    namespaces = parse_namespace_list(args.default_credentials_namespaces)
    return TenancyRules(namespaces, allowlist, min_retention), default_properties


def audit_sinks_from_args(args: argparse.Namespace) -> AuditSinks:
    """The per-cluster audit sinks: the log line always, plus the Kafka topic with --audit-topic
    (one producer per distinct connection, kept for the life of the process)."""
    from groupwarden.controller.reconcile import log_sink_only

    if not args.audit_topic:
        return log_sink_only
    from groupwarden.adapters.kafka_audit_topic import KafkaTopicSink
    from groupwarden.core.durations import parse_duration

    retention_ms = int(parse_duration(args.audit_topic_retention).total_seconds() * 1000)
    topic_sinks: dict[ConnectionSettings, KafkaTopicSink] = {}

    def sinks(settings: ConnectionSettings) -> tuple[AuditSink, ...]:
        sink = topic_sinks.get(settings)
        if sink is None:
            sink = topic_sinks.setdefault(
                settings,
                KafkaTopicSink(
                    settings,
                    args.audit_topic,
                    create=not args.no_create_audit_topic,
                    retention_ms=retention_ms,
                ),
            )
        return (*log_sink_only(settings), sink)

    return sinks


def run(args: argparse.Namespace) -> int:
    try:
        options = OperatorOptions.from_args(args)
    except ValueError as error:
        return exit_codes.fail(str(error), exit_codes.BAD_INPUT)
    import kopf  # the operator's libraries load only for this command

    kopf.configure(
        verbose=options.verbose,
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.FULL,
    )
    from groupwarden.adapters import client_logs

    # The client libraries at WARNING unless -v (kafka-python logs every connection and
    # coordinator lookup at INFO), and a repeated failure of theirs logged once (client_logs.py).
    client_logs.install(options.verbose)
    if options.kubeconfig:
        # kopf's login (the official client's loader) and our ApiClient then read the same file.
        os.environ["KUBECONFIG"] = options.kubeconfig
    from groupwarden.metrics import OperatorMetrics

    # One metrics endpoint for the whole process: it stays up (and probes pass) while the
    # operator retries a missing grant below.
    metrics = OperatorMetrics()
    stop_metrics = metrics.serve(options.metrics_port) if options.metrics_port else None
    try:
        return _run_until_stopped(options, metrics)
    finally:
        if stop_metrics is not None:
            stop_metrics()


def _run_until_stopped(options: OperatorOptions, metrics: OperatorMetrics) -> int:
    backoff = PERMISSION_RETRY_FIRST_S
    while True:
        try:
            left = asyncio.run(_operate(options, metrics))
            if left:
                # A client call that ignores the stop (one blocking librdkafka request) would hold
                # the exit until its own timeout: the Lease is released, leave without it.
                logging.shutdown()
                os._exit(exit_codes.OK)
        except KeyboardInterrupt:
            return exit_codes.OK
        except Exception as error:
            if not _is_forbidden(error):
                log.error("operator stopped: %s: %s", type(error).__name__, error)
                return exit_codes.PARTIAL_FAILURE
            # A missing grant is fixed by a person, not by restarting: say what is denied and keep
            # retrying in-process, so a pod shows one clear log line instead of a crash loop.
            log.error(
                "operator cannot watch ConsumerGroupPolicies (%s); it needs get, list and watch on "
                "consumergrouppolicies.groupwarden.io; retrying in %d s",
                error,
                backoff,
            )
            time.sleep(backoff)
            backoff = min(backoff * 2, PERMISSION_RETRY_MAX_S)
            continue
        return exit_codes.OK


def observation_keeper(options: OperatorOptions, leadership: Leadership, identity: str) -> PassMemory:
    """With --observations-topic: the clocks kept in that topic on each cluster (one store per
    cluster, through the connection of its first pass as leader)."""
    from groupwarden.controller.observation_keeper import ObservationKeeper, PassMemory

    topic = options.observations_topic
    if not topic:
        return PassMemory()
    from groupwarden.adapters.kafka_observation_store import KafkaObservationStore

    create = options.create_observations_topic

    def open_store(settings: ConnectionSettings, cluster_id: str) -> KafkaObservationStore:
        return KafkaObservationStore(settings, cluster_id, topic, create=create)

    return ObservationKeeper(open_store, leadership, identity, options.observations_max_gap)


def _is_forbidden(error: BaseException) -> bool:
    """kopf raises its APIForbiddenError (not public API) when the policy list/watch is denied."""
    return type(error).__name__ == "APIForbiddenError" or getattr(error, "status", None) == 403


async def _operate(options: OperatorOptions, metrics: OperatorMetrics) -> int:
    """Runs until kopf stops (SIGTERM); returns how many Kafka calls were still running then."""
    import kopf

    from groupwarden.adapters.kafka_admin_session import abort_sessions
    from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
    from groupwarden.adapters.kubernetes_client import load_api_client
    from groupwarden.adapters.kubernetes_events import KubernetesEventPoster
    from groupwarden.adapters.kubernetes_lease import KubernetesLeaseStore
    from groupwarden.adapters.kubernetes_secrets import KubernetesSecretSource
    from groupwarden.adapters.kubernetes_status import KubernetesStatusWriter
    from groupwarden.connectivity import stopping
    from groupwarden.controller import failpoints
    from groupwarden.controller.handlers import build_kopf_registry, operator_settings
    from groupwarden.controller.leadership import AlwaysLeader, LeaseLeadership, default_identity
    from groupwarden.controller.wiring import build_controller
    from groupwarden.deletion_trail import NoSigningKey, UnsignedRecords

    stopping.reset()  # a start again after a missing grant (`_run_until_stopped`) is a fresh one
    identity = os.environ.get("POD_NAME") or default_identity()
    api = load_api_client(options.kubeconfig)
    kafka_executor = KafkaThreads(options.kafka_threads)
    pem_dir = Path(tempfile.mkdtemp(prefix="groupwarden-pem-"))  # mode 0700

    namespaces = list(options.namespaces)
    lease_namespace = (
        options.leader_election_namespace or os.environ.get("POD_NAMESPACE") or (namespaces or ["default"])[0]
    )
    lease: LeaseLeadership | None = None
    leadership: LeaseLeadership | AlwaysLeader = AlwaysLeader()
    if options.leader_election:
        lease = LeaseLeadership(
            KubernetesLeaseStore(api, lease_namespace, options.lease_name), identity, options.lease_duration
        )
        leadership = lease
    observations = observation_keeper(options, leadership, identity)
    controller = build_controller(
        gateway_factory=KafkaAdminGateway,
        read_secret=KubernetesSecretSource(api).read,
        status=KubernetesStatusWriter(api),
        events=KubernetesEventPoster(api, identity),
        leadership=leadership,
        metrics=metrics,
        kafka_executor=kafka_executor,
        pem_dir=pem_dir,
        audit_signer=options.audit_signer,
        read_offsets_log=options.read_offsets_log,
        before_step=failpoints.from_environment(),
        tenancy=options.tenancy,
        default_properties=dict(options.default_properties),
        audit_sinks=options.audit_sinks,
        observations=observations,
    )
    if lease is not None:
        lease.on_change = controller.leadership_changed
    else:
        metrics.leader.set(1)

    async def drain() -> None:
        """The Kafka calls in flight once the workers stopped: a client still bootstrapping has
        sent nothing and is stopped at once; the others get IN_FLIGHT_GRACE_S (the stop makes
        every retry and read give up), then their clients are stopped too."""
        kafka_executor.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(abort_sessions, connecting_only=True)
        if await asyncio.to_thread(kafka_executor.wait_idle, IN_FLIGHT_GRACE_S):
            return
        log.info(
            "stopping: %d Kafka calls still running after %.0fs: stopping their clients (a sent "
            "deletion whose answer is lost is recorded as an unknown outcome)",
            kafka_executor.running,
            IN_FLIGHT_GRACE_S,
        )
        await asyncio.to_thread(abort_sessions)
        await asyncio.to_thread(kafka_executor.wait_idle, ABORTED_GRACE_S)

    # SIGTERM: kopf stops, its cleanup handler stops the controller (handlers.py), or the
    # `finally` below does: every retry gives up, nothing new is sent, then the drain.
    controller.on_stop = stopping.request_stop
    controller.drain = drain
    tenancy = options.tenancy
    log.info(
        "groupwarden operator %s starting: %s; leader election %s; default credentials for %s; "
        "tenant allowlist %s; minimum retention %s; audit topic %s; audit records %s; observations topic %s",
        identity,
        f"namespaces {', '.join(namespaces)}" if namespaces else "all namespaces",
        f"on Lease {lease_namespace}/{options.lease_name}" if lease else "off",
        ", ".join(sorted(tenancy.default_credentials_namespaces)) or "no namespace",
        f"{len(tenancy.allowlist.namespaces)} namespaces" if tenancy.allowlist else "off",
        options.min_retention or "off",
        options.audit_topic or "off",
        options.audit_signer,
        f"{options.observations_topic} (max gap {options.observations_max_gap})"
        if options.observations_topic
        else "off",
    )
    if isinstance(options.audit_signer, NoSigningKey):
        log.warning("Enforce policies will delete nothing: %s", NoSigningKey.MESSAGE)
    elif isinstance(options.audit_signer, UnsignedRecords):
        log.warning(
            "audit records are written UNSIGNED (--allow-unsigned-audit): anyone who may write the "
            "audit topic can forge what `restore` puts back; configure --audit-signing-key"
        )
    lease_task = asyncio.create_task(lease.run(), name="leader-election") if lease else None
    try:
        await kopf.operator(
            registry=build_kopf_registry(controller),
            settings=operator_settings(options.verbose),
            standalone=True,  # no kopf peering: the Lease decides who acts (leadership.py)
            clusterwide=not namespaces,
            namespaces=namespaces,
        )
    finally:
        # The Kafka calls in flight end (a sent deletion gets its answer, or its outcome is
        # Unknown; bounded: IN_FLIGHT_GRACE_S + ABORTED_GRACE_S) *before* the Lease is released,
        # so two replicas never act at the same time and nothing is sent after the release.
        await controller.shutdown()
        left = kafka_executor.running
        if left:
            log.warning("stopping: %d Kafka calls still running are abandoned", left)
        await asyncio.to_thread(observations.close)
        if lease_task is not None:
            lease_task.cancel()
            await asyncio.gather(lease_task, return_exceptions=True)
        api.close()  # type: ignore[no-untyped-call]
        shutil.rmtree(pem_dir, ignore_errors=True)
        log.info("groupwarden operator %s stopped", identity)
    return left

"""One run of one policy: operator guards -> credentials -> pooled gateway -> the cluster's cycle
(one pass for every policy that is due: gather -> decide_many -> audited execute in turn). Returns a
`RunReport`; it never raises for Kafka, Secret or spec problems (a bug of ours is reported as
`InternalError`, not raised).

Kafka clients block, so all Kafka work runs on a dedicated thread pool: a slow cluster never
stalls the event loop, the Kubernetes writes, or policies on other clusters. A cluster runs one
pass at a time (one offsets-log reader, one snapshot, no two policies deleting concurrently), and
the policies due together share it (controller/cycle.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from groupwarden.cleanup.cluster_pass import gather_and_decide, scope_of
from groupwarden.cleanup.gateway import (
    KafkaAuthenticationFailed,
    KafkaTlsHandshakeFailed,
    KafkaUnavailable,
)
from groupwarden.cleanup.pass_deletions import (
    Enforcement,
    PassStops,
    PolicyDeletions,
    StopCause,
    execute_pass,
)
from groupwarden.cleanup.recheck import Recheck
from groupwarden.cleanup.steps import AbortReason, RunGuard, StepsInterrupted
from groupwarden.connectivity.process_memory import release_freed_memory
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.controller.connections import ClusterState, Connection, ConnectionPool, cluster_id_or_raise
from groupwarden.controller.credentials import CredentialsError, SecretReader, resolve_settings
from groupwarden.controller.cycle import COALESCE_SECONDS, ClusterCycle, PassRequest
from groupwarden.controller.kafka_wait import WaitAnnouncer
from groupwarden.controller.listing_cache import ListedOnce
from groupwarden.controller.observation_keeper import PassMemory
from groupwarden.controller.registry import PolicyEntry, PolicyRegistry
from groupwarden.controller.report import RunReport
from groupwarden.core.gc_pause import gc_paused
from groupwarden.core.plan import ActionOutcome, Plan, ResultKind, SkipReason, summarize_outcomes
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, PolicyRef
from groupwarden.core.snapshot import ClusterSnapshot, TimestampSource
from groupwarden.core.status import Reason
from groupwarden.core.tenancy import ALL_NAMESPACES, Refusal, TenancyRules
from groupwarden.core.wording import counted, deleted_before_that, groups_and_offsets
from groupwarden.deletion_trail import AuditRecorder, AuditSink, LogSink, RecordSigner

log = logging.getLogger(__name__)

T = TypeVar("T")
INTERNAL_ERROR = "internal error (a groupwarden bug; the operator log has the traceback)"


@dataclass(frozen=True)
class _KafkaResult:
    plan: Plan
    outcomes: tuple[ActionOutcome, ...]
    aborted: AbortReason | None
    offsets_log: bool
    audit_error: str | None = None
    # An earlier deletion of the pass failed and stopped this policy's (pass_deletions.py).
    stopped_by: StopCause | None = None


# Audit sinks for one cluster connection: the structured log line always, plus e.g. a Kafka topic.
AuditSinks = Callable[[ConnectionSettings], Sequence[AuditSink]]
_LOG_SINK = LogSink()


def log_sink_only(_settings: ConnectionSettings) -> Sequence[AuditSink]:
    return (_LOG_SINK,)


class Reconciler:
    def __init__(
        self,
        registry: PolicyRegistry,
        pool: ConnectionPool,
        read_secret: SecretReader,
        executor: Executor,
        pem_dir: Path,
        *,
        audit_signer: RecordSigner,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        before_step: Callable[[str], None] | None = None,
        step_done: Callable[[PolicyEntry, Sequence[ActionOutcome]], None] | None = None,
        still_exists: Callable[[PolicyEntry], bool] | None = None,
        tenancy: TenancyRules | None = None,
        audit_sinks: AuditSinks = log_sink_only,
        default_properties: dict[str, str] | None = None,
        on_pass: Callable[[float], None] | None = None,
        coalesce_seconds: float = COALESCE_SECONDS,
        observations: PassMemory | None = None,
    ) -> None:
        self._registry = registry
        self._pool = pool
        self._read_secret = read_secret
        self._executor = executor
        self._pem_dir = pem_dir
        self._clock = clock
        self._before_step = before_step  # failpoints.py (e2e tests only)
        # Called (in the Kafka thread) right after each deletion step: per-item Events are posted
        # as deletions happen, so a crash later in the run loses no audit trail.
        self._step_done = step_done
        # Asked once before the first deletion of a run: the watch can miss a DELETED event.
        self._still_exists = still_exists
        # Without explicit rules (unit tests), every namespace may use the default credentials.
        self._tenancy = tenancy or TenancyRules(frozenset({ALL_NAMESPACES}))
        self._audit_sinks = audit_sinks
        # Signs every record (or refuses every deletion: no key and unsigned records not allowed).
        self._audit_signer = audit_signer
        # The operator's own client properties (--default-command-config) for policies without a Secret.
        self._default_properties = default_properties or {}
        self._on_pass = on_pass  # the duration of each cluster pass (a metric)
        self._coalesce_seconds = coalesce_seconds
        # Told (in the Kafka thread) when a pass has been waiting out a failover for a while: the
        # requesters' status says Reconciling with what Kafka answered (kafka_wait.py). Set by
        # wiring.py once the controller that publishes it exists.
        self.on_wait: Callable[[PolicyEntry, str], None] | None = None
        # Where the first-observed times outlive the process (controller/observation_keeper.py).
        self.observations = observations or PassMemory()

    async def _blocking(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    async def reconcile(self, entry: PolicyEntry, guard: RunGuard) -> RunReport:
        started = self._clock()
        try:
            return await self._reconcile(entry, guard, started)
        except Exception as error:
            # Nothing may end a policy's worker: a bug of ours becomes a visible, retried status.
            # No credentials are known here to redact with, so the exception's text is left out.
            frames = "".join(traceback.format_tb(error.__traceback__))
            log.error("policy %s: internal error: %s\n%s", entry.ref, type(error).__name__, frames)
            return RunReport(
                entry.ref,
                entry.uid,
                entry.generation,
                Reason.INTERNAL_ERROR,
                f"{INTERNAL_ERROR}: {type(error).__name__}",
                started,
                self._clock(),
            )

    async def _reconcile(self, entry: PolicyEntry, guard: RunGuard, started: datetime) -> RunReport:

        def report(reason: Reason, message: str, **details: Any) -> RunReport:
            return RunReport(
                entry.ref, entry.uid, entry.generation, reason, message, started, self._clock(), **details
            )

        if entry.policy is None:
            return report(Reason.INVALID_SPEC, "invalid spec: " + "; ".join(entry.problems))
        policy = entry.policy
        if policy.spec.suspend:
            return report(Reason.SUSPENDED, "spec.suspend is true: no Kafka calls, nothing deleted")
        refusal = self._tenancy.refusal(policy)
        if refusal is not None:
            return report(refusal.reason, refusal.message)
        try:
            settings = await self._blocking(
                resolve_settings, policy, self._read_secret, self._pem_dir, self._default_properties
            )
        except CredentialsError as error:
            return report(Reason.SECRET_NOT_FOUND, str(error))
        connection, unused = self._pool.acquire(entry.ref, settings)
        for stale in unused:
            await self._blocking(stale.reset)
        try:
            cluster_id = await self._blocking(cluster_id_or_raise, connection)
            cluster = self._pool.cluster(cluster_id, connection)
            stop = guard.stop_reason()
            if stop is not None:
                return report(Reason.RECONCILING, f"run interrupted: {stop.value}", aborted=stop)
            if cluster.cycle is None:
                cluster.cycle = ClusterCycle(
                    functools.partial(self._run_batch, cluster), self._coalesce_seconds
                )
            result = await cluster.cycle.submit(entry, connection, guard)
            if isinstance(result, Refusal):
                return report(result.reason, result.message)
            assert isinstance(result, _KafkaResult)
        except Exception as raised:
            await self._blocking(connection.reset)  # whatever went wrong, the next run gets a new client
            reason, message, partial = self._failure(entry, connection.settings, raised)
            return report(reason, f"{settings.describe()}: {message}", **partial)
        reason, message = _classify(
            result.plan, result.outcomes, result.aborted, result.audit_error, result.stopped_by
        )
        source = TimestampSource.OFFSETS_LOG if result.offsets_log else TimestampSource.OBSERVED
        # Decided with first-observed times: whether those clocks outlive this process.
        clocks = None if result.offsets_log else self.observations.clock_keeping(cluster_id)
        return report(
            reason,
            message,
            plan=result.plan,
            outcomes=result.outcomes,
            timestamp_source=source.value,
            aborted=result.aborted,
            clocks=clocks,
        )

    def _failure(
        self, entry: PolicyEntry, settings: ConnectionSettings, raised: Exception
    ) -> tuple[Reason, str, dict[str, Any]]:
        """What a run that raised after connecting comes to: reason, message (redacted) and, when a
        deletion step raised, the plan and the earlier steps' outcomes (they still count)."""
        error: BaseException = raised
        partial: dict[str, Any] = {}
        before = ""
        if isinstance(raised, StepsInterrupted) and raised.__cause__ is not None:
            error, partial = raised.__cause__, {"plan": raised.plan, "outcomes": raised.outcomes}
            before = deleted_before_that(summarize_outcomes(raised.outcomes))
        if isinstance(error, KafkaUnavailable):
            return _unavailable_reason(error), settings.redact(str(error)) + before, partial
        text = settings.redact(f"{type(error).__name__}: {error}")
        # The adapters translate every client library's exceptions into the port's (the tree:
        # adapters/client_errors.py): anything else is our bug. Say so (not "Kafka is down"), with
        # the traceback in the log.
        trace = "".join(traceback.format_exception(error))
        log.error("policy %s: internal error: %s", entry.ref, settings.redact(trace))
        return Reason.INTERNAL_ERROR, f"{INTERNAL_ERROR}: {text}{before}", partial

    async def _run_batch(self, cluster: ClusterState, batch: Sequence[PassRequest]) -> list[object]:
        """One pass of `cluster` for the requests of `batch`: per request, its result or the
        exception its part raised. Requests through different connections (other credentials for
        the same cluster) get a gather each, through their own principal; the ledger is shared."""
        began = time.monotonic()
        results: dict[PassRequest, object] = {}
        by_connection: dict[int, list[PassRequest]] = {}
        # The requesters' deletions run in the order of their names, not of their arrival, so a
        # pass does the same whatever the timing of the watch (and tests can say what it does).
        for request in sorted(batch, key=lambda r: (r.entry.ref.namespace, r.entry.ref.name)):
            by_connection.setdefault(id(request.connection), []).append(request)
        # What a failed deletion stops holds for the whole pass, across connections.
        stops = PassStops()
        for requests in by_connection.values():
            policies = self._pass_policies(cluster, requests)
            try:
                results.update(await self._blocking(self._pass_work, cluster, requests, policies, stops))
            except Exception as error:  # the gather itself failed: every request of it did
                results.update((r, error) for r in requests)
        seconds = time.monotonic() - began
        log.info(
            "cluster %s: pass for %d due policies (%d on the cluster) in %.2fs",
            cluster.cluster_id,
            len(batch),
            len(policies),
            seconds,
        )
        if self._on_pass is not None:
            self._on_pass(seconds)
        return [results[r] for r in batch]

    def _pass_policies(
        self, cluster: ClusterState, requests: Sequence[PassRequest]
    ) -> list[ConsumerGroupPolicy]:
        """Every valid policy on the cluster (they block one another's deletions: overlap.py), the
        requesters with the spec their run started with."""
        chosen: dict[PolicyRef, ConsumerGroupPolicy] = {}
        for request in requests:
            for policy in self._registry.peers(request.entry, cluster.cluster_id, self._pool.cluster_of):
                chosen.setdefault(policy.ref, policy)
        for request in requests:
            assert request.entry.policy is not None
            chosen[request.entry.ref] = request.entry.policy
        return list(chosen.values())

    def _pass_work(
        self,
        cluster: ClusterState,
        requests: Sequence[PassRequest],
        policies: Sequence[ConsumerGroupPolicy],
        stops: PassStops,
    ) -> dict[PassRequest, object]:
        """In the Kafka thread: list, tenant checks, one gather + decide for every policy, then
        the requesters' Enforce plans in turn (cleanup/pass_deletions.py)."""
        # The cyclic GC paused for the whole pass, not only the gather: decoding a ListGroups
        # answer of 100k+ groups makes ~10^6 objects, and every collection it triggered rescanned
        # the ledger's heap (py-spy: a third of an operator's later pass at 100k groups).
        gateway = requests[0].connection.gateway()
        if self.on_wait is not None:
            gateway.observe_retries(WaitAnnouncer(self.on_wait, [r.entry for r in requests]))
        try:
            with gc_paused():
                return self._pass_work_unpaused(cluster, requests, policies, stops)
        finally:
            gateway.observe_retries(None)
            # What the pass freed (its listing, snapshot and plans, the observation store's
            # producer buffers) goes back to the system: glibc keeps freed chunks in its arenas,
            # and each pass's peak would start from the last one's (docs/benchmarks.md, "The
            # operator's memory at 100k groups").
            release_freed_memory()

    def _pass_work_unpaused(
        self,
        cluster: ClusterState,
        requests: Sequence[PassRequest],
        policies: Sequence[ConsumerGroupPolicy],
        stops: PassStops,
    ) -> dict[PassRequest, object]:
        connection = requests[0].connection
        gateway = ListedOnce(connection.gateway())
        now = self._clock()
        group_ids = [g.group_id for g in gateway.list_groups()]
        results: dict[PassRequest, object] = {}
        runnable: dict[PolicyRef, PassRequest] = {}
        for request in requests:
            assert request.entry.policy is not None
            refusal = self._tenancy.group_refusal(request.entry.policy, group_ids)
            if refusal is not None:
                results[request] = refusal
            else:
                runnable[request.entry.ref] = request
        if not runnable:
            return results
        self.observations.before_pass(cluster, connection.settings, now)
        cluster_pass = gather_and_decide(gateway, cluster.memory, policies, now)
        self.observations.after_gather(cluster, connection.settings, now)
        offsets_log = cluster_pass.snapshot.offsets_log_available
        # The re-check before each step reads its groups anew (ListedOnce only keeps the listing).
        recheck = Recheck(
            connection.gateway(),
            cluster.memory,
            cluster_pass.snapshot,
            policies,
            scope_of(policies),
            self._clock,
        )
        enforcements = [self._enforcement(request, connection) for request in runnable.values()]
        ran = execute_pass(cluster_pass, gateway, enforcements, recheck=recheck, stops=stops)
        for ref, request in runnable.items():
            results[request] = self._result(ran[ref], offsets_log)
        return results

    def _enforcement(self, request: PassRequest, connection: Connection) -> Enforcement:
        """What one requester's deletions need: its guard, the existence check before the first
        deletion, its audit sinks (per connection) and the per-step hooks."""
        entry = request.entry
        settings = connection.settings
        still_exists = self._still_exists
        step_done = self._step_done

        def confirm() -> AbortReason | None:
            if still_exists is None:
                return None
            try:
                alive = still_exists(entry)
            except Exception as error:  # API server unreachable: delete nothing this time
                log.warning(
                    "policy %s: %s: %s", entry.ref, AbortReason.UNCONFIRMED.value, type(error).__name__
                )
                return AbortReason.UNCONFIRMED
            return None if alive else AbortReason.GONE

        def recorder(snapshot: ClusterSnapshot) -> AuditRecorder:
            return AuditRecorder(
                self._audit_sinks(settings),
                snapshot,
                settings.bootstrap_servers,
                signer=self._audit_signer,
                redact=settings.redact,
                clock=self._clock,
            )

        return Enforcement(
            entry.ref,
            recorder,
            sink=settings,
            guard=request.guard,
            confirm=confirm,
            before_step=self._before_step,
            after_step=(lambda done: step_done(entry, done)) if step_done is not None else None,
        )

    def _result(self, deletions: PolicyDeletions, offsets_log: bool) -> object:
        """A requester's result from its part of the pass: a failed deletion of its own is its
        exception (classified by `_failure`) or its audit error; a stop by another's failure is
        reported, with nothing deleted."""
        plan, stop = deletions.plan, deletions.stopped
        if stop is None:
            return _KafkaResult(plan, deletions.outcomes, deletions.aborted, offsets_log)
        if not deletions.failed_here:
            log.warning(
                "policy %s: deletions not run: %s during the deletions of %s in this pass",
                plan.policy,
                stop.cause.value,
                stop.policy,
            )
            return _KafkaResult(plan, (), None, offsets_log, stopped_by=stop.cause)
        if stop.cause is StopCause.AUDIT_BLOCKED:
            log.error("policy %s: %s", plan.policy, stop.raised)
            return _KafkaResult(plan, deletions.outcomes, None, offsets_log, audit_error=str(stop.raised))
        return stop.raised  # a StepsInterrupted with the earlier steps' outcomes, or a bug of ours


def _unavailable_reason(error: KafkaUnavailable) -> Reason:
    """TLS before SASL: a failed handshake is never a wrong password (nothing was sent yet)."""
    if isinstance(error, KafkaTlsHandshakeFailed):
        return Reason.TLS_HANDSHAKE_FAILED
    if isinstance(error, KafkaAuthenticationFailed):
        return Reason.AUTHENTICATION_FAILED
    return Reason.KAFKA_UNAVAILABLE


# A policy whose deletions an earlier failure of the pass stopped (pass_deletions.py): the reason
# of that failure, so it is retried with backoff like the policy that failed.
_STOPPED_REASONS = {
    StopCause.CLUSTER_UNAVAILABLE: Reason.KAFKA_UNAVAILABLE,
    StopCause.AUDIT_BLOCKED: Reason.AUDIT_UNAVAILABLE,
    StopCause.UNEXPECTED: Reason.INTERNAL_ERROR,
}
# Which sink or which policy failed is not said: it may be another namespace's.
_STOPPED_BY = {
    StopCause.CLUSTER_UNAVAILABLE: "the cluster became unavailable during an earlier deletion of this pass",
    StopCause.AUDIT_BLOCKED: "the audit trail refused a record of an earlier deletion of this pass "
    "(the same audit sink)",
    StopCause.UNEXPECTED: f"{INTERNAL_ERROR} during an earlier deletion of this pass",
}


def _classify(
    plan: Plan,
    outcomes: Sequence[ActionOutcome],
    aborted: AbortReason | None,
    audit_error: str | None = None,
    stopped_by: StopCause | None = None,
) -> tuple[Reason, str]:
    summary = plan.summary
    counts = (
        f"{counted(summary.groups_matched, 'group')} matched; eligible "
        f"{counted(summary.groups_eligible, 'group')}, {counted(summary.offsets_eligible, 'offset')}"
    )
    if audit_error is not None:
        return (
            Reason.AUDIT_UNAVAILABLE,
            f"{audit_error}{deleted_before_that(summarize_outcomes(outcomes))}; {counts}",
        )
    if stopped_by is not None:
        return (
            _STOPPED_REASONS[stopped_by],
            f"nothing deleted: {_STOPPED_BY[stopped_by]}; the next run reads the cluster again; {counts}",
        )
    if aborted is not None:
        return Reason.RECONCILING, f"run interrupted ({aborted.value}); {counts}"
    failed = [o for o in outcomes if o.result is ResultKind.FAILED]
    # Decided on the Kafka error itself (its name), never on the text users see.
    # Which operation on which group, so a person knows which ACL is missing.
    denied = [
        f"{o.action.kind.value} of group {o.action.group_id}: {o.error}"
        for o in failed
        if o.kafka_error is not None and o.kafka_error.is_authorization
    ]
    denied += [
        f"describing group {s.group_id}: {s.detail}"
        for s in plan.skipped
        if s.reason_code is SkipReason.DESCRIBE_FAILED
        and s.kafka_error is not None
        and s.kafka_error.is_authorization
    ]
    if denied:
        more = f" (and {len(denied) - 1} more)" if len(denied) > 1 else ""
        done = summarize_outcomes(outcomes)
        return (
            Reason.AUTHORIZATION_FAILED,
            f"the Kafka principal is not authorized: {denied[0]}{more}; the rest of the run went on: "
            f"deleted {groups_and_offsets(done.groups_deleted, done.offsets_deleted)}; {counts}",
        )
    if summary.blast_radius_exceeded:
        return (
            Reason.BLAST_RADIUS_EXCEEDED,
            f"{summary.groups_eligible} of {counted(summary.groups_matched, 'matched group')} "
            f"{'is' if summary.groups_eligible == 1 else 'are'} eligible, more than "
            f"limits.maxDeletionRatio allows: nothing deleted",
        )
    unknown = [o for o in outcomes if o.result is ResultKind.UNKNOWN]
    if unknown:
        # Tell the truth: not "failed" -- the broker may have executed them.
        done = summarize_outcomes(outcomes)
        failures = f"; {len(failed)} failed" if failed else ""
        return (
            Reason.PARTIAL_FAILURE,
            f"{len(unknown)} of {counted(len(outcomes), 'action')} "
            f"{'has an unknown outcome' if len(unknown) == 1 else 'have an unknown outcome'} (sent, then "
            f"{unknown[0].error}: the broker may have executed {'it' if len(unknown) == 1 else 'them'}; "
            f"the next run reads the cluster again){failures}; deleted "
            f"{groups_and_offsets(done.groups_deleted, done.offsets_deleted)}; {counts}",
        )
    if failed:
        first = failed[0].error
        return (
            Reason.PARTIAL_FAILURE,
            f"{len(failed)} of {counted(len(outcomes), 'action')} failed: {first}; {counts}",
        )
    if plan.mode is Mode.DRY_RUN:
        planned = f"would delete {groups_and_offsets(summary.groups_planned, summary.offsets_planned)}"
        return Reason.DRY_RUN, f"{planned} (DryRun); {counts}"
    done = summarize_outcomes(outcomes)
    skipped = f", {done.skipped_became_active} skipped (became active)" if done.skipped_became_active else ""
    return (
        Reason.SUCCEEDED,
        f"deleted {groups_and_offsets(done.groups_deleted, done.offsets_deleted)}{skipped}; {counts}",
    )

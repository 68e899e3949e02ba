"""`groupwarden plan` and `groupwarden apply`: one run of gather -> decide (-> execute) from a shell."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from groupwarden.cleanup.checkpoint import LedgerCheckpoint, default_directory
from groupwarden.cleanup.cluster_pass import ClusterPass, execute_in_turn, run_pass, scope_of
from groupwarden.cleanup.gateway import KafkaGateway, KafkaUnavailable
from groupwarden.cleanup.gather import ClusterKnowledge as TimestampMemory
from groupwarden.cleanup.recheck import Recheck
from groupwarden.cleanup.steps import ALWAYS_GO, AuditBlocked, StepsInterrupted, execute_guarded
from groupwarden.commands import exit_codes
from groupwarden.commands.inputs import load_policies, parse_now
from groupwarden.core.observed import ObservedTimes
from groupwarden.core.plan import ActionOutcome, Plan, ResultKind, summarize_outcomes
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, PolicyError
from groupwarden.core.render import plan_to_json, render_table
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.deletion_trail import (
    AuditRecorder,
    AuditSink,
    FileSink,
    LogSink,
    log_to_stderr_if_unconfigured,
)


def register(subparsers: Any) -> None:
    for name, helptext in (
        ("plan", "show what the policies would delete (never deletes)"),
        ("apply", "execute the plan of Enforce policies (requires --yes)"),
    ):
        parser = subparsers.add_parser(name, help=helptext, description=helptext)
        parser.add_argument(
            "-f",
            "--filename",
            action="append",
            required=True,
            metavar="POLICY.yaml",
            help="policy manifest(s); a file may hold several YAML documents",
        )
        parser.add_argument(
            "--bootstrap-servers", metavar="HOST:PORT", help="overrides spec.kafka.bootstrapServers"
        )
        parser.add_argument(
            "--command-config",
            metavar="client.properties",
            type=Path,
            help="Kafka client properties (security.protocol, sasl.*, ssl.*)",
        )
        parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
        parser.add_argument(
            "--no-offsets-log",
            action="store_true",
            help="do not read __consumer_offsets; use first-observed times",
        )
        parser.add_argument(
            "--ledger-cache",
            metavar="DIR",
            type=Path,
            help="where runs keep the offsets-log ledger and observed times per cluster, so the next "
            "run reads only the log's tail (default: ~/.cache/groupwarden/ledgers)",
        )
        parser.add_argument(
            "--no-ledger-cache",
            action="store_true",
            help="neither read nor write the ledger cache (read the whole log)",
        )
        if name == "plan":
            parser.add_argument(
                "--now",
                metavar="RFC3339",
                help="decide as of this time instead of now (compare with `groupwarden audit --now`)",
            )
        if name == "apply":
            parser.add_argument("--yes", action="store_true", help="confirm the deletions")
            parser.add_argument(
                "--audit-file",
                metavar="PATH",
                type=Path,
                help="append a write-ahead audit trail (JSON lines, fsynced) for `groupwarden restore`",
            )
        parser.set_defaults(run=run_apply if name == "apply" else run_plan)


def _load(args: argparse.Namespace) -> list[ConsumerGroupPolicy]:
    policies = load_policies(args.filename)
    if args.bootstrap_servers:
        policies = [p.with_bootstrap_servers(args.bootstrap_servers) for p in policies]
    clusters = {p.spec.kafka.bootstrap_servers for p in policies}
    if len(clusters) > 1:
        raise PolicyError(
            [f"policies name different clusters ({', '.join(sorted(clusters))}): run one per cluster"]
        )
    return policies


def _pass(
    args: argparse.Namespace, policies: list[ConsumerGroupPolicy], gateway: Any, now: datetime
) -> tuple[ClusterPass, TimestampMemory]:
    """The pass, and the timestamp memory it used (the re-checks before each step read on from it)."""
    read_log = not args.no_offsets_log
    if getattr(args, "no_ledger_cache", True):
        memory = TimestampMemory(ObservedTimes(), read_offsets_log=read_log)
        return run_pass(gateway, memory, policies, now), memory
    checkpoint = LedgerCheckpoint(args.ledger_cache or default_directory())
    cluster_id = gateway.cluster_id()
    memory = checkpoint.load(cluster_id, read_offsets_log=read_log)
    cluster_pass = run_pass(gateway, memory, policies, now)
    checkpoint.save(cluster_id, memory)
    return cluster_pass, memory


def _recorder(
    args: argparse.Namespace, snapshot: ClusterSnapshot, gateway: Any, durable: Sequence[AuditSink] | None
) -> AuditRecorder:
    """The write-ahead audit of `apply`: always a JSON log line, plus `--audit-file` if given (or
    the durable sinks a caller passes)."""
    settings = getattr(gateway, "settings", None)
    log_to_stderr_if_unconfigured()
    if durable is None:
        durable = [FileSink(args.audit_file)] if getattr(args, "audit_file", None) else []
    sinks: list[AuditSink] = [*durable]
    sinks.append(LogSink())  # after the durable sink: no "intent" log line for an unwritten intent
    return AuditRecorder(
        sinks,
        snapshot,
        settings.bootstrap_servers if settings else (),
        redact=settings.redact if settings else (lambda text: text),
    )


def _emit(args: argparse.Namespace, plans: list[Plan], outcomes: list[list[ActionOutcome]] | None) -> None:
    if args.output == "json":
        docs = [plan_to_json(p, outcomes[i] if outcomes else None) for i, p in enumerate(plans)]
        json.dump(docs[0] if len(docs) == 1 else {"plans": docs}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for i, plan in enumerate(plans):
            sys.stdout.write(render_table(plan, outcomes[i] if outcomes else None))
            sys.stdout.write("\n")


def _run(args: argparse.Namespace, execute: bool) -> int:
    from groupwarden.adapters.kafka_connect import open_gateway  # client libraries load only here

    try:
        policies = _load(args)
        now = parse_now(getattr(args, "now", None))
        gateway = open_gateway(policies[0].spec.kafka.bootstrap_servers, args.command_config)
    except (PolicyError, ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    return run_with_gateway(args, policies, now, gateway, execute=execute)


def run_with_gateway(
    args: argparse.Namespace,
    policies: list[ConsumerGroupPolicy],
    now: datetime,
    gateway: KafkaGateway,
    *,
    execute: bool,
    audit_sinks: Sequence[AuditSink] | None = None,
) -> int:
    """One run on an open gateway (closed at the end): gather -> decide (-> execute through the
    guarded step executor). `audit_sinks` replaces the `--audit-file` sink (unit tests)."""
    try:
        cluster_pass, memory = _pass(args, policies, gateway, now)
        plans = list(cluster_pass.plans)
        outcomes: list[list[ActionOutcome]] | None = None
        if execute:
            outcomes = [[] for _ in plans]
            recorder = _recorder(args, cluster_pass.snapshot, gateway, audit_sinks)
            recheck = Recheck(
                gateway, memory, cluster_pass.snapshot, cluster_pass.policies, scope_of(cluster_pass.policies)
            )
            error = _execute(cluster_pass, plans, outcomes, gateway, recorder, recheck)
            if error is not None:
                _emit(args, plans, outcomes)
                return exit_codes.fail(error, exit_codes.PARTIAL_FAILURE)
            for plan in plans:
                if plan.actions and (plan.mode is not Mode.ENFORCE or plan.suspended):
                    print(
                        f"note: {plan.policy} is {plan.mode.value}"
                        f"{' and suspended' if plan.suspended else ''}: nothing executed",
                        file=sys.stderr,
                    )
    except KafkaUnavailable as exc:
        return exit_codes.fail(f"Kafka unavailable: {exc}", exit_codes.PARTIAL_FAILURE)
    finally:
        gateway.close()
    _emit(args, plans, outcomes)
    unsure = (ResultKind.FAILED, ResultKind.UNKNOWN)
    failed = outcomes and any(o.result in unsure for run in outcomes for o in run)
    return exit_codes.PARTIAL_FAILURE if failed else exit_codes.OK


def _execute(
    cluster_pass: ClusterPass,
    plans: list[Plan],
    outcomes: list[list[ActionOutcome]],
    gateway: KafkaGateway,
    recorder: AuditRecorder,
    recheck: Recheck,
) -> str | None:
    """Executes the Enforce plans with the operator's step executor and pass order (write-ahead
    audit per step; nothing can change under a shell run, so its guard always says go; a policy
    after one that deleted is decided again without what was deleted). Fills `plans` with the plan
    each policy ran with and `outcomes` with what was done, also when a step fails; returns the
    error to report then (None: all ran)."""
    refs = [p.ref for p in cluster_pass.policies]
    errors: list[str] = []

    def execute_one(plan: Plan, _snapshot: ClusterSnapshot) -> Sequence[ActionOutcome]:
        i = refs.index(plan.policy)
        if errors:
            return ()  # a failed step stops every further deletion
        try:
            done, _ = execute_guarded(gateway, plan, ALWAYS_GO, recorder=recorder, recheck=recheck)
        except AuditBlocked as blocked:
            outcomes[i] = list(blocked.outcomes)
            errors.append(_audit_blocked(blocked, outcomes))
            return blocked.outcomes
        except StepsInterrupted as interrupted:
            outcomes[i] = list(interrupted.outcomes)
            if not isinstance(interrupted.__cause__, KafkaUnavailable):
                raise
            errors.append(f"Kafka unavailable: {interrupted.__cause__}{_before_that(outcomes)}")
            return interrupted.outcomes
        outcomes[i] = list(done)
        return done

    ran = execute_in_turn(cluster_pass, refs, execute_one)
    for i, ref in enumerate(refs):
        plans[i] = ran[ref]
    return errors[0] if errors else None


def _audit_blocked(blocked: AuditBlocked, outcomes: list[list[ActionOutcome]]) -> str:
    if blocked.after_deletion:
        what = "audit trail not writable after a deletion, no further action was executed"
    else:
        what = "audit trail not writable, the action was not executed"
    return f"{what}: {blocked.__cause__}{_before_that(outcomes)}"


def _before_that(outcomes: list[list[ActionOutcome]]) -> str:
    summary = summarize_outcomes([o for run in outcomes for o in run])
    if not (summary.groups_deleted or summary.offsets_deleted):
        return ""
    return f"; deleted {summary.groups_deleted} groups and {summary.offsets_deleted} offsets before that"


def run_plan(args: argparse.Namespace) -> int:
    return _run(args, execute=False)


def run_apply(args: argparse.Namespace) -> int:
    if not args.yes:
        return exit_codes.fail(
            "apply deletes consumer groups and offsets: confirm with --yes "
            "(run `groupwarden plan` to see what would go)",
            exit_codes.BAD_INPUT,
        )
    return _run(args, execute=True)

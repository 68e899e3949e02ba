"""`groupwarden plan` and `groupwarden apply`: one run of gather -> decide (-> execute) from a shell."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from groupwarden.cleanup.checkpoint import LedgerCheckpoint, default_directory
from groupwarden.cleanup.cluster_pass import ClusterPass, gather_and_decide, scope_of
from groupwarden.cleanup.gateway import KafkaGateway, KafkaUnavailable
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.cleanup.pass_deletions import Enforcement, PassStop, StopCause, execute_pass
from groupwarden.cleanup.recheck import Recheck
from groupwarden.cleanup.steps import AuditBlocked
from groupwarden.commands import exit_codes
from groupwarden.commands.audit_signing import add_signing_arguments, signing_key_path
from groupwarden.commands.inputs import load_policies, parse_now
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.core.durations import parse_duration
from groupwarden.core.observed_clocks import DEFAULT_MAX_GAP, ObservedTimes
from groupwarden.core.plan import ActionOutcome, Plan, ResultKind, summarize_outcomes
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, PolicyError
from groupwarden.core.render import plan_to_json, render_table
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.wording import deleted_before_that
from groupwarden.deletion_trail import (
    AuditKeyError,
    AuditRecorder,
    AuditSink,
    FileSink,
    LogSink,
    RecordSigner,
    log_to_stderr_if_unconfigured,
    signer_from_options,
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
        parser.add_argument(
            "--observed-max-gap",
            type=duration_argument,
            default="30m",
            metavar="DURATION",
            help="first-observed clocks in the ledger cache older than this (since the run that saved "
            "them) restart: set it above the time between your runs (default 30m)",
        )
        if name == "plan":
            parser.add_argument(
                "--now",
                metavar="RFC3339",
                help="decide as of this time instead of now (compare with `groupwarden audit --now`)",
            )
        if name == "apply":
            parser.add_argument("--yes", action="store_true", help="confirm the deletions")
            trail = parser.add_mutually_exclusive_group()
            trail.add_argument(
                "--audit-file",
                metavar="PATH",
                type=Path,
                help="append the write-ahead audit trail (JSON lines, fsynced) for `groupwarden restore` "
                f"here (default: {default_audit_file()})",
            )
            trail.add_argument(
                "--no-audit-file",
                action="store_true",
                help="keep the trail only in the log lines on stderr (no undo from a file)",
            )
            add_signing_arguments(parser)
        parser.set_defaults(run=run_apply if name == "apply" else run_plan)


@dataclass(frozen=True)
class PlanOptions:
    """What `plan` / `apply` were asked for, read once from the command line (`from_args`).
    Programs that run the command's code (tests, bench/) build it directly."""

    filenames: tuple[str, ...] = ()
    bootstrap_servers: str | None = None
    command_config: Path | None = None
    output: Literal["table", "json"] = "table"
    read_offsets_log: bool = True
    # Where the ledger and observed times are kept per cluster between runs (None: not kept).
    ledger_cache: Path | None = None
    now: str | None = None  # `plan --now`
    confirmed: bool = False  # `apply --yes`
    audit_file: Path | None = None
    audit_signing_key: Path | None = None  # `apply --audit-signing-key` (or its variable)
    allow_unsigned_audit: bool = False
    # The cached first-observed clocks restart when the run that saved them is older than this.
    observed_max_gap: timedelta = DEFAULT_MAX_GAP

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PlanOptions:
        return cls(
            filenames=tuple(args.filename),
            bootstrap_servers=args.bootstrap_servers,
            command_config=args.command_config,
            output=args.output,
            read_offsets_log=not args.no_offsets_log,
            ledger_cache=None if args.no_ledger_cache else (args.ledger_cache or default_directory()),
            now=getattr(args, "now", None),  # only `plan` has the flag ...
            confirmed=getattr(args, "yes", False),  # ... only `apply` these two
            audit_file=_audit_file(args),
            audit_signing_key=signing_key_path(args),
            allow_unsigned_audit=getattr(args, "allow_unsigned_audit", False),
            observed_max_gap=args.observed_max_gap,
        )


def default_audit_file() -> Path:
    """Where `apply` keeps its trail unless told otherwise: an undo that outlives the terminal."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "groupwarden" / "audit.jsonl"


def _audit_file(args: argparse.Namespace) -> Path | None:
    if not hasattr(args, "audit_file") or getattr(args, "no_audit_file", False):
        return None  # `plan`, or `apply --no-audit-file`
    return args.audit_file or default_audit_file()


def duration_argument(text: str) -> timedelta:
    """A command-line duration (`30m`, `2h`); argparse names the flag in its error."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _load(options: PlanOptions) -> list[ConsumerGroupPolicy]:
    policies = load_policies(options.filenames)
    if options.bootstrap_servers:
        policies = [p.with_bootstrap_servers(options.bootstrap_servers) for p in policies]
    clusters = {p.spec.kafka.bootstrap_servers for p in policies}
    if len(clusters) > 1:
        raise PolicyError(
            [f"policies name different clusters ({', '.join(sorted(clusters))}): run one per cluster"]
        )
    return policies


def _pass(
    options: PlanOptions, policies: list[ConsumerGroupPolicy], gateway: KafkaGateway, now: datetime
) -> tuple[ClusterPass, ClusterKnowledge]:
    """The pass, and the cluster knowledge it used (the re-checks before each step read on from it)."""
    read_log = options.read_offsets_log
    if options.ledger_cache is None:
        memory = ClusterKnowledge(ObservedTimes(), read_offsets_log=read_log)
        return gather_and_decide(gateway, memory, policies, now), memory
    checkpoint = LedgerCheckpoint(options.ledger_cache)
    cluster_id = gateway.cluster_id()
    memory = checkpoint.load(cluster_id, read_offsets_log=read_log, now=now, max_gap=options.observed_max_gap)
    cluster_pass = gather_and_decide(gateway, memory, policies, now)
    checkpoint.save(cluster_id, memory, confirmed_at=now)
    return cluster_pass, memory


def _recorder(
    options: PlanOptions,
    snapshot: ClusterSnapshot,
    gateway: KafkaGateway,
    durable: Sequence[AuditSink] | None,
    signer: RecordSigner,
) -> AuditRecorder:
    """The write-ahead audit of `apply`: always a JSON log line, plus the audit file (or the
    durable sinks a caller passes)."""
    settings: ConnectionSettings | None = getattr(gateway, "settings", None)  # the real adapter's
    log_to_stderr_if_unconfigured()
    if durable is None:
        durable = [FileSink(options.audit_file)] if options.audit_file else []
    sinks: list[AuditSink] = [*durable]
    sinks.append(LogSink())  # after the durable sink: no "intent" log line for an unwritten intent
    return AuditRecorder(
        sinks,
        snapshot,
        settings.bootstrap_servers if settings else (),
        signer=signer,
        redact=settings.redact if settings else (lambda text: text),
    )


def _emit(options: PlanOptions, plans: list[Plan], outcomes: list[list[ActionOutcome]] | None) -> None:
    if options.output == "json":
        docs = [plan_to_json(p, outcomes[i] if outcomes else None) for i, p in enumerate(plans)]
        json.dump(docs[0] if len(docs) == 1 else {"plans": docs}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for i, plan in enumerate(plans):
            sys.stdout.write(render_table(plan, outcomes[i] if outcomes else None))
            sys.stdout.write("\n")


def _plan_or_apply_command(options: PlanOptions, execute: bool) -> int:
    from groupwarden.adapters.kafka_connect import open_gateway  # client libraries load only here

    try:
        policies = _load(options)
        now = parse_now(options.now)
        signer = _signer(options) if execute else None
        gateway = open_gateway(policies[0].spec.kafka.bootstrap_servers, options.command_config)
    except (PolicyError, AuditKeyError, ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    return plan_or_apply(options, policies, now, gateway, execute=execute, signer=signer)


def _signer(options: PlanOptions) -> RecordSigner:
    """The signer of `apply --yes` (a key that cannot be read is bad input before any Kafka call);
    the default audit file's directory is made here, private to the user."""
    signer = signer_from_options(options.audit_signing_key, options.allow_unsigned_audit)
    if options.audit_file is not None and options.audit_file == default_audit_file():
        options.audit_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return signer


def plan_or_apply(
    options: PlanOptions,
    policies: list[ConsumerGroupPolicy],
    now: datetime,
    gateway: KafkaGateway,
    *,
    execute: bool,
    audit_sinks: Sequence[AuditSink] | None = None,
    signer: RecordSigner | None = None,
) -> int:
    """One run on an open gateway (closed at the end): gather -> decide (-> execute the pass's
    Enforce plans, cleanup/pass_deletions.py). `audit_sinks` replaces the `--audit-file` sink
    (tests); `signer` defaults to the options' key (none: deletions refused unless unsigned
    records are allowed). The gateway raises only the port's exceptions: KafkaUnavailable is an outage,
    anything else a bug of ours (raised, with its traceback)."""
    try:
        cluster_pass, memory = _pass(options, policies, gateway, now)
        plans = list(cluster_pass.plans)
        outcomes: list[list[ActionOutcome]] | None = None
        if execute:
            outcomes = [[] for _ in plans]
            if signer is None:
                signer = signer_from_options(options.audit_signing_key, options.allow_unsigned_audit)
            recorder = _recorder(options, cluster_pass.snapshot, gateway, audit_sinks, signer)
            recheck = Recheck(
                gateway, memory, cluster_pass.snapshot, cluster_pass.policies, scope_of(cluster_pass.policies)
            )
            stop = _execute(cluster_pass, plans, outcomes, gateway, recorder, recheck)
            if stop is not None:
                _emit(options, plans, outcomes)
                if stop.cause is StopCause.UNEXPECTED:
                    raise stop.raised  # a bug of ours: its traceback, after what was done is printed
                return exit_codes.fail(_stop_message(stop, outcomes), exit_codes.PARTIAL_FAILURE)
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
    _emit(options, plans, outcomes)
    unsure = (ResultKind.FAILED, ResultKind.UNKNOWN)
    failed = outcomes and any(o.result in unsure for run in outcomes for o in run)
    return exit_codes.PARTIAL_FAILURE if failed else exit_codes.OK


# Every policy of `apply` writes to the same sinks (the --audit-file and the log line).
_APPLY_SINKS = "apply"


def _execute(
    cluster_pass: ClusterPass,
    plans: list[Plan],
    outcomes: list[list[ActionOutcome]],
    gateway: KafkaGateway,
    recorder: AuditRecorder,
    recheck: Recheck,
) -> PassStop | None:
    """Executes the Enforce plans with the operator's loop (cleanup/pass_deletions.py: write-ahead
    audit per step, a policy after one that deleted decided again without it, a failed deletion
    stops the later ones by what failed); nothing can change under a shell run, so its guard always
    says go. Fills `plans` with the plan each policy ran with and `outcomes` with what was done,
    also when a deletion failed; returns the first failure (None: all ran). One cluster and one
    audit sink for all policies: a failure stops every later deletion."""
    refs = [p.ref for p in cluster_pass.policies]
    enforcements = [Enforcement(ref, lambda _snapshot: recorder, _APPLY_SINKS) for ref in refs]
    ran = execute_pass(cluster_pass, gateway, enforcements, recheck=recheck)
    first: PassStop | None = None
    for i, ref in enumerate(refs):
        plans[i] = ran[ref].plan
        outcomes[i] = list(ran[ref].outcomes)
        if first is None and ran[ref].failed_here:
            first = ran[ref].stopped
    return first


def _stop_message(stop: PassStop, outcomes: list[list[ActionOutcome]]) -> str:
    before = deleted_before_that(summarize_outcomes([o for run in outcomes for o in run]))
    if stop.cause is StopCause.CLUSTER_UNAVAILABLE:
        return f"Kafka unavailable: {stop.error}{before}"
    raised = stop.raised
    if isinstance(raised, AuditBlocked) and raised.after_deletion:
        what = "audit trail not writable after a deletion, no further action was executed"
    else:
        what = "audit trail not writable, the action was not executed"
    return f"{what}: {raised.__cause__ or raised}{before}"


def run_plan(args: argparse.Namespace) -> int:
    return _plan_or_apply_command(PlanOptions.from_args(args), execute=False)


def run_apply(args: argparse.Namespace) -> int:
    options = PlanOptions.from_args(args)
    if not options.confirmed:
        return exit_codes.fail(
            "apply deletes consumer groups and offsets: confirm with --yes "
            "(run `groupwarden plan` to see what would go)",
            exit_codes.BAD_INPUT,
        )
    return _plan_or_apply_command(options, execute=True)

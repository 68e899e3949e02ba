"""`groupwarden restore`: re-commit the offsets an audit trail says groupwarden deleted.

Only records signed by a trusted key (`--audit-public-key`) are counted; every other line of the
trail is listed with its position and why, and makes the command exit 1 (docs/audit-and-restore.md,
"Threat model")."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogUnavailable
from groupwarden.commands import exit_codes
from groupwarden.core.render import text_table
from groupwarden.core.snapshot import GroupKind
from groupwarden.deletion_trail import (
    AuditKeyError,
    RefusedRecord,
    TrailReading,
    TrustedKeys,
    load_public_keys,
    numbered_lines,
    read_trail,
)
from groupwarden.deletion_trail.records import AuditFormatError, RecordedOffset
from groupwarden.deletion_trail.restore import Decision, Deletions, RestoreStatus, decide, deleted_offsets

SHARE_KIND = GroupKind.SHARE.value  # an intent's groupKind
HELP = "re-commit the offsets an audit trail recorded as deleted (requires --yes to act)"
PUBLIC_KEYS_ENV = "GROUPWARDEN_AUDIT_PUBLIC_KEYS"  # paths, separated like PATH
# Statuses that leave a recorded partition not restored for a reason on-call must look at.
_NOT_RESTORED = (RestoreStatus.FAILED, RestoreStatus.SKIPPED_BEYOND_LOG_END)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("restore", help=HELP, description=HELP)
    trail = parser.add_mutually_exclusive_group(required=True)
    trail.add_argument("--audit-file", type=Path, metavar="PATH", help="the trail `apply --audit-file` wrote")
    trail.add_argument(
        "--audit-topic",
        metavar="TOPIC",
        help="the trail the operator's --audit-topic wrote (read from the --bootstrap-servers cluster)",
    )
    parser.add_argument(
        "--group", action="append", default=[], metavar="GROUP", help="only this group (repeatable)"
    )
    parser.add_argument(
        "--since",
        metavar="RFC3339",
        help="only deletions recorded at or after this time (e.g. 2026-11-22T03:00:00Z)",
    )
    parser.add_argument(
        "--audit-public-key",
        action="append",
        default=[],
        metavar="PATH",
        help="trust records signed by the Ed25519 public key(s) in this PEM file or directory "
        f"(repeatable, for rotation; default: ${PUBLIC_KEYS_ENV})",
    )
    parser.add_argument(
        "--trust-unsigned",
        action="store_true",
        help="also count unsigned records (auditVersion 1: written before signing, or with "
        "--allow-unsigned-audit); this trusts that nobody but groupwarden could write the trail",
    )
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    parser.add_argument(
        "--command-config",
        metavar="client.properties",
        type=Path,
        help="Kafka client properties (security.protocol, sasl.*, ssl.*)",
    )
    parser.add_argument(
        "--yes", action="store_true", help="commit (without it: only show what would be done)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite offsets committed after the deletion")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.set_defaults(run=run_restore)


def _since(text: str | None) -> datetime | None:
    if not text:
        return None
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"--since {text!r} needs a time zone (e.g. a trailing Z)")
    return value


@dataclass(frozen=True)
class TrailSource:
    """Where the trail is and whom to believe."""

    trusted: TrustedKeys
    trust_unsigned: bool
    file: Path | None
    topic: str | None


def _trusted_keys(paths: list[str]) -> TrustedKeys:
    given = paths or [p for p in os.environ.get(PUBLIC_KEYS_ENV, "").split(os.pathsep) if p]
    return load_public_keys(given)


def _read_file(source: TrailSource) -> TrailReading:
    assert source.file is not None
    with source.file.open(encoding="utf-8", errors="replace") as handle:
        return read_trail(
            numbered_lines(handle, str(source.file)),
            source.trusted,
            trust_unsigned=source.trust_unsigned,
            forgive_torn_tail=True,
        )


def _read_topic(settings: Any, source: TrailSource) -> TrailReading:
    from groupwarden.adapters.kafka_audit_topic import read_audit_topic

    assert source.topic is not None
    try:
        lines = list(read_audit_topic(settings, source.topic))
    except OffsetsLogUnavailable as exc:
        raise KafkaUnavailable(f"cannot read the audit topic {source.topic}: {exc}") from None
    return read_trail(lines, source.trusted, trust_unsigned=source.trust_unsigned)


def run_restore(args: argparse.Namespace) -> int:
    from groupwarden.adapters.kafka_connect import open_gateway  # client libraries load only here

    try:
        since = _since(args.since)
        source = TrailSource(
            _trusted_keys(args.audit_public_key), args.trust_unsigned, args.audit_file, args.audit_topic
        )
        if not source.trusted and not source.trust_unsigned:
            raise ValueError(
                "restore needs the operator's public key to trust its records: --audit-public-key PATH "
                f"(or ${PUBLIC_KEYS_ENV}); unsigned trails need --trust-unsigned"
            )
        reading = _read_file(source) if source.file is not None else None
        gateway = open_gateway(args.bootstrap_servers, args.command_config)
    except (AuditFormatError, AuditKeyError, ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    try:
        if reading is None:
            reading = _read_topic(gateway.settings, source)
        deletions = deleted_offsets(reading.records, gateway.cluster_id(), args.group, since)
        refused = [r for r in reading.refused if not args.group or r.group is None or r.group in args.group]
        return _restore(args, gateway, Deletions(deletions.candidates, [*refused, *deletions.refused]))
    except KafkaUnavailable as exc:
        return exit_codes.fail(
            f"Kafka unavailable: {gateway.settings.redact(str(exc))}", exit_codes.PARTIAL_FAILURE
        )
    finally:
        gateway.close()


def _restore(args: argparse.Namespace, gateway: Any, deletions: Deletions) -> int:
    from groupwarden.adapters.kafka_restore import current_state, log_end_offsets

    candidates = deletions.candidates
    groups = sorted({c.group for c in candidates})
    share = {c.group for c in candidates if c.group_kind == SHARE_KIND}
    ends = log_end_offsets(gateway.settings, (c.recorded.tp for c in candidates))
    decisions = decide(candidates, current_state(gateway, groups, share), log_ends=ends, force=args.force)
    if args.yes:
        decisions = _commit(gateway, decisions)
    _emit(args, decisions, deletions.refused)
    if not args.yes and any(d.status is RestoreStatus.WOULD_RESTORE for d in decisions):
        print("note: nothing was committed: run again with --yes to restore", file=sys.stderr)
    if deletions.refused:
        print(
            f"warning: {len(deletions.refused)} record(s) of the trail were not trusted and not restored "
            "(listed above): find out who wrote them",
            file=sys.stderr,
        )
    failed = any(d.status in _NOT_RESTORED for d in decisions)
    return exit_codes.PARTIAL_FAILURE if failed or deletions.refused else exit_codes.OK


def _commit(gateway: Any, decisions: list[Decision]) -> list[Decision]:
    from groupwarden.adapters.client_errors import exception_text
    from groupwarden.adapters.kafka_restore import alter_share_offsets, commit_offsets

    settings = gateway.settings
    by_group: dict[str, list[RecordedOffset]] = {}
    share: set[str] = set()
    for d in decisions:
        if d.status is RestoreStatus.WOULD_RESTORE:
            by_group.setdefault(d.candidate.group, []).append(d.candidate.recorded)
            if d.candidate.group_kind == SHARE_KIND:
                share.add(d.candidate.group)
    results: dict[tuple[str, Any], str | None] = {}
    for group, offsets in by_group.items():
        try:
            if group in share:  # share-partition start offsets, not committed offsets
                answer = alter_share_offsets(gateway, group, offsets)
            else:
                answer = commit_offsets(settings, group, offsets)
        except Exception as exc:  # a connection failure fails this group's partitions, not the run
            answer = {o.tp: settings.redact(exception_text(exc)) for o in offsets}
        for tp, error in answer.items():
            results[(group, tp)] = error
    done: list[Decision] = []
    for d in decisions:
        if d.status is not RestoreStatus.WOULD_RESTORE:
            done.append(d)
            continue
        error = results.get((d.candidate.group, d.candidate.recorded.tp), "no answer")
        if error is None:
            done.append(Decision(d.candidate, RestoreStatus.RESTORED, d.detail, d.current_offset))
        else:
            done.append(Decision(d.candidate, RestoreStatus.FAILED, error, d.current_offset))
    return done


def _emit(args: argparse.Namespace, decisions: list[Decision], refused: Iterable[RefusedRecord]) -> None:
    refused = list(refused)
    if args.output == "json":
        json.dump(
            {
                "dryRun": not args.yes,
                "partitions": [d.to_json() for d in decisions],
                "refusedRecords": [r.to_json() for r in refused],
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return
    if refused:
        refused_rows = [(r.position, r.group or "-", r.reason) for r in refused]
        table = text_table(("REFUSED RECORD", "CLAIMED GROUP", "REASON"), refused_rows)
        sys.stdout.write("".join(line + "\n" for line in table) + "\n")
    if not decisions:
        sys.stdout.write("nothing to restore: the trail records no deleted offsets (for these filters)\n")
        return
    headers = ("GROUP", "TOPIC", "PARTITION", "OFFSET", "CURRENT", "STATUS", "DETAIL")
    rows = [
        (
            d.candidate.group,
            d.candidate.recorded.topic,
            str(d.candidate.recorded.partition),
            str(d.candidate.recorded.offset),
            "-" if d.current_offset is None else str(d.current_offset),
            d.status.value,
            d.detail,
        )
        for d in decisions
    ]
    sys.stdout.write("".join(line + "\n" for line in text_table(headers, rows)))

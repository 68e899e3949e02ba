"""`groupwarden restore`: re-commit the offsets an audit trail says groupwarden deleted."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogUnavailable
from groupwarden.commands import exit_codes
from groupwarden.core.render import text_table
from groupwarden.core.snapshot import GroupKind
from groupwarden.deletion_trail.records import AuditFormatError, RecordedOffset, parse_records
from groupwarden.deletion_trail.restore import Candidate, Decision, RestoreStatus, decide, deleted_offsets

SHARE_KIND = GroupKind.SHARE.value  # an intent's groupKind
HELP = "re-commit the offsets an audit trail recorded as deleted (requires --yes to act)"


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


def _read_trail(path: Path, groups: list[str], since: datetime | None) -> list[Candidate]:
    with path.open(encoding="utf-8") as handle:
        return deleted_offsets(parse_records(handle, str(path)), groups, since)


def _read_topic_trail(
    settings: Any, topic: str, groups: list[str], since: datetime | None
) -> list[Candidate]:
    from groupwarden.adapters.kafka_audit_topic import read_audit_topic

    try:
        lines = list(read_audit_topic(settings, topic))
    except OffsetsLogUnavailable as exc:
        raise KafkaUnavailable(f"cannot read the audit topic {topic}: {exc}") from None
    return deleted_offsets(parse_records(lines, f"audit topic {topic}"), groups, since)


def run_restore(args: argparse.Namespace) -> int:
    from groupwarden.adapters.kafka_connect import open_gateway  # client libraries load only here

    try:
        since = _since(args.since)
        candidates = _read_trail(args.audit_file, args.group, since) if args.audit_file else []
        gateway = open_gateway(args.bootstrap_servers, args.command_config)
    except (AuditFormatError, ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    try:
        if args.audit_topic:
            candidates = _read_topic_trail(gateway.settings, args.audit_topic, args.group, since)
        return _restore(args, gateway, candidates)
    except AuditFormatError as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    except KafkaUnavailable as exc:
        return exit_codes.fail(
            f"Kafka unavailable: {gateway.settings.redact(str(exc))}", exit_codes.PARTIAL_FAILURE
        )
    finally:
        gateway.close()


def _restore(args: argparse.Namespace, gateway: Any, candidates: list[Candidate]) -> int:
    from groupwarden.adapters.kafka_restore import current_state

    groups = sorted({c.group for c in candidates})
    share = {c.group for c in candidates if c.group_kind == SHARE_KIND}
    decisions = decide(candidates, current_state(gateway, groups, share), force=args.force)
    if args.yes:
        decisions = _commit(gateway, decisions)
    _emit(args, decisions)
    if not args.yes and any(d.status is RestoreStatus.WOULD_RESTORE for d in decisions):
        print("note: nothing was committed: run again with --yes to restore", file=sys.stderr)
    failed = any(d.status is RestoreStatus.FAILED for d in decisions)
    return exit_codes.PARTIAL_FAILURE if failed else exit_codes.OK


def _commit(gateway: Any, decisions: list[Decision]) -> list[Decision]:
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
            answer = {o.tp: f"{type(exc).__name__}: {settings.redact(str(exc))}" for o in offsets}
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


def _emit(args: argparse.Namespace, decisions: list[Decision]) -> None:
    if args.output == "json":
        json.dump(
            {"dryRun": not args.yes, "partitions": [d.to_json() for d in decisions]}, sys.stdout, indent=2
        )
        sys.stdout.write("\n")
        return
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

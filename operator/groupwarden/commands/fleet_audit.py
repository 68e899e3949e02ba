"""`groupwarden audit`: what the policies would delete across a fleet, and which retention is safe.

Reads `__consumer_offsets` live (Spark's Kafka source) or from `export-offsets-log` directories,
rebuilds the ledger on Spark, decides with the same engine as `groupwarden plan`, and writes
plan.json, summary.json, Parquet tables and report.html to `--out`. Never deletes anything.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogUnavailable
from groupwarden.commands import exit_codes
from groupwarden.commands.inputs import load_policies, parse_now
from groupwarden.core.durations import DurationError, parse_duration
from groupwarden.core.policy import ConsumerGroupPolicy, PolicyError
from groupwarden.core.timestamps import to_rfc3339

HELP = "audit policies against whole offsets logs on Spark (plans, what-if, report; never deletes)"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("audit", help=HELP, description=HELP)
    parser.add_argument("-f", "--filename", action="append", required=True, metavar="POLICY.yaml")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="read the cluster live")
    source.add_argument(
        "--input",
        action="append",
        type=Path,
        metavar="DIR",
        help="an export-offsets-log directory (repeat for several clusters)",
    )
    parser.add_argument("--command-config", metavar="client.properties", type=Path)
    parser.add_argument("--out", required=True, type=Path, metavar="DIR")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--now", metavar="RFC3339", help="evaluate as of this time (default: now)")
    parser.add_argument(
        "--what-if", metavar="1h,1d,7d,30d", help="candidate retentions for the what-if table"
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings"
    )
    parser.set_defaults(run=run)


def parse_retentions(text: str | None) -> list[timedelta]:
    if not text:
        return []
    return sorted({parse_duration(part.strip()) for part in text.split(",") if part.strip()})


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def run(args: argparse.Namespace) -> int:
    try:
        policies = load_policies(args.filename)
        now = parse_now(args.now)
        retentions = parse_retentions(args.what_if)
        conf = _conf(args.conf)
        if args.input and args.command_config:
            raise ValueError("--command-config applies to --bootstrap-servers only")
    except (PolicyError, DurationError, ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    try:
        from groupwarden.fleet.session import start_session  # pyspark loads only here
    except ImportError as exc:
        return exit_codes.fail(f"audit needs the [spark] extra ({exc.name} is missing)", exit_codes.BAD_INPUT)
    audit = _Audit(policies, now, retentions, conf, start_session)
    return _run_on_exports(args, audit) if args.input else _run_live(args, audit)


@dataclass(frozen=True)
class _Audit:
    """What both sources share: the parsed flags and the Spark session factory."""

    policies: list[ConsumerGroupPolicy]
    now: datetime
    retentions: list[timedelta]
    conf: dict[str, str]
    start_session: Any


def _run_on_exports(args: argparse.Namespace, audit: _Audit) -> int:
    from groupwarden.fleet.job import run_audit
    from groupwarden.fleet.sources import OldExportLayout, export_files, read_exports

    missing = [str(d) for d in args.input if not d.is_dir()]
    if missing:
        return exit_codes.fail(f"--input is not a directory: {', '.join(missing)}", exit_codes.BAD_INPUT)
    for directory in args.input:  # an export of the older layout: refused before Spark starts
        try:
            export_files(directory)
        except OldExportLayout as exc:
            return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
        except (ValueError, OSError, KeyError) as exc:
            return exit_codes.fail(f"unreadable export: {exc}", exit_codes.BAD_INPUT)
    spark, owned = audit.start_session(args.master, kafka_source=False, extra=audit.conf)
    try:
        try:
            raw, sources = read_exports(spark, args.input)
        except OldExportLayout as exc:
            return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
        except (ValueError, OSError, KeyError) as exc:
            return exit_codes.fail(f"unreadable export: {exc}", exit_codes.BAD_INPUT)
        result = run_audit(spark, raw, sources, audit.policies, audit.now, args.out, audit.retentions)
    except Exception as exc:  # the job's failures arrive as JVM exceptions: one line, no traceback
        return _failed(exc, str)
    finally:
        if owned:
            spark.stop()
    _report(args.out, result.summary, audit.now)
    return exit_codes.OK


# What to change when a Spark job fails for memory (the most likely cause on a large fleet).
MEMORY_HINT = (
    "if it ran out of memory, raise --conf spark.driver.memory=4g (local mode: every task runs in "
    "the driver's JVM) or spark.executor.memory on a cluster"
)


def _failed(exc: Exception, redact: Callable[[str], str]) -> int:
    """An audit that failed in Spark: its first line and what to change, never a traceback."""
    # A Py4J error's text is "An error occurred while calling ...", the JVM exception, its stack:
    # the lines that say what happened, without the stack frames.
    lines = [line.strip() for line in redact(str(exc)).splitlines()]
    said = " ".join(line for line in lines if line and not line.startswith("at "))
    what = said[:2000] or type(exc).__name__
    return exit_codes.fail(f"the audit failed: {what} ({MEMORY_HINT})", exit_codes.PARTIAL_FAILURE)


def _run_live(args: argparse.Namespace, audit: _Audit) -> int:
    from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
    from groupwarden.adapters.spark_kafka import offsets_log_bounds, spark_kafka_options
    from groupwarden.connectivity.settings import settings_from_file
    from groupwarden.fleet.job import run_audit
    from groupwarden.fleet.sources import ClusterSource, live_records, live_share_starts, read_live

    try:
        settings = settings_from_file(args.bootstrap_servers, args.command_config)
        options = spark_kafka_options(settings)
    except (ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    gateway = KafkaAdminGateway(settings)
    try:
        cluster_id = gateway.cluster_id()
        try:  # small (pruned to the latest snapshots): read on the driver, like `plan` reads it
            share_starts = live_share_starts(gateway.read_share_state_log({}), gateway.topic_names_by_id())
        except OffsetsLogUnavailable as exc:
            print(
                f"warning: {settings.redact(str(exc))}: share groups are dated as a first plan run does",
                file=sys.stderr,
            )
            share_starts = None
        source = ClusterSource(
            cluster_id,
            cluster_id,
            gateway.list_topics(),
            offsets_log_bounds(settings),
            share_starts=share_starts,
        )
    except (KafkaUnavailable, OffsetsLogUnavailable) as exc:
        return exit_codes.fail(settings.redact(str(exc)), exit_codes.PARTIAL_FAILURE)
    finally:
        gateway.close()
    spark, owned = audit.start_session(args.master, kafka_source=True, extra=audit.conf)
    try:
        raw = live_records(read_live(spark, options, source))
        result = run_audit(spark, raw, [source], audit.policies, audit.now, args.out, audit.retentions)
    except Exception as exc:  # Spark wraps Kafka failures in JVM exceptions: report them redacted
        return _failed(exc, settings.redact)
    finally:
        if owned:
            spark.stop()
    _report(args.out, result.summary, audit.now)
    return exit_codes.OK


def _report(out: Path, summary: dict[str, Any], now: datetime) -> None:
    for cluster in summary["clusters"]:
        log = cluster["log"]
        print(
            f"{cluster['cluster']}: {log['records']} records (log reaches back to {log['earliestRecord']}), "
            f"{cluster['groups']} groups, {cluster['offsets']} offsets",
            file=sys.stderr,
        )
        for policy in cluster["policies"]:
            s = policy["summary"]
            print(
                f"  {policy['policy']} ({policy['mode']}): would delete {s['groupsPlanned']} groups and "
                f"{s['offsetsPlanned']} offsets (eligible {s['groupsEligible']} / {s['offsetsEligible']})",
                file=sys.stderr,
            )
    print(f"audit as of {to_rfc3339(now)} written to {out}", file=sys.stderr)

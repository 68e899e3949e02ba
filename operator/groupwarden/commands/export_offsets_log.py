"""`groupwarden export-offsets-log`: a cluster's `__consumer_offsets` as Parquet for `audit --input`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogUnavailable
from groupwarden.commands import exit_codes

HELP = "write a cluster's __consumer_offsets records as Parquet (for `groupwarden audit --input`)"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("export-offsets-log", help=HELP, description=HELP)
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="the cluster to export")
    parser.add_argument(
        "--command-config", metavar="client.properties", type=Path, help="Kafka client properties"
    )
    parser.add_argument(
        "--cluster", metavar="NAME", help="the `cluster` column (default: the broker's cluster id)"
    )
    parser.add_argument("--out", type=Path, metavar="DIR")
    parser.add_argument(
        "--convert",
        type=Path,
        metavar="DIR",
        help="rewrite an export of the older interleaved layout in place as one file per partition "
        "(what `audit --input` reads); no Kafka needed",
    )
    parser.set_defaults(run=run)


def _convert(directory: Path) -> int:
    try:
        from groupwarden.fleet.export import convert_export
    except ImportError as exc:
        return exit_codes.fail(
            f"export-offsets-log needs the [spark] extra ({exc.name} is missing)", exit_codes.BAD_INPUT
        )
    try:
        stats = convert_export(directory)
    except (OSError, ValueError, KeyError) as exc:
        return exit_codes.fail(f"cannot convert {directory}: {exc}", exit_codes.BAD_INPUT)
    print(f"converted {directory}: {stats.records} records, one file per partition", file=sys.stderr)
    return exit_codes.OK


def run(args: argparse.Namespace) -> int:
    if args.convert is not None:
        if args.bootstrap_servers or args.out:
            return exit_codes.fail("--convert takes no --bootstrap-servers or --out", exit_codes.BAD_INPUT)
        return _convert(args.convert)
    if not args.bootstrap_servers or not args.out:
        return exit_codes.fail("--bootstrap-servers and --out are required", exit_codes.BAD_INPUT)
    # Client libraries and pyarrow load only here.
    from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
    from groupwarden.cleanup.connection_settings import settings_from_file

    try:
        from groupwarden.fleet.export import write_export
    except ImportError as exc:
        return exit_codes.fail(
            f"export-offsets-log needs the [spark] extra ({exc.name} is missing)", exit_codes.BAD_INPUT
        )
    try:
        settings = settings_from_file(args.bootstrap_servers, args.command_config)
    except (ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    gateway = KafkaAdminGateway(settings)
    try:
        cluster_id = gateway.cluster_id()
        topics = gateway.list_topics()
        try:
            share_state = list(gateway.read_share_state_log({}))
        except OffsetsLogUnavailable as exc:
            print(
                f"warning: {settings.redact(str(exc))}: share groups will be dated as a first plan run does",
                file=sys.stderr,
            )
            share_state = None
        stats = write_export(
            args.out,
            args.cluster or cluster_id,
            cluster_id,
            topics,
            gateway.read_offsets_log({}),
            share_state=share_state,
            topic_ids=gateway.topic_names_by_id(),
        )
    except (KafkaUnavailable, OffsetsLogUnavailable) as exc:
        return exit_codes.fail(settings.redact(str(exc)), exit_codes.PARTIAL_FAILURE)
    finally:
        gateway.close()
    print(
        f"exported {stats.records} records of {len(stats.bounds)} partitions of __consumer_offsets "
        f"(cluster {args.cluster or cluster_id}) to {args.out}",
        file=sys.stderr,
    )
    return exit_codes.OK

"""`groupwarden export-offsets-log`: a cluster's `__consumer_offsets` as Parquet for `audit --input`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogGap, OffsetsLogUnavailable
from groupwarden.commands import exit_codes

if TYPE_CHECKING:
    from groupwarden.fleet.export import ExportStats, Piece

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
        "--parallel",
        type=_positive,
        metavar="N",
        help="processes reading partitions at once, each with its own consumer "
        f"(default: the CPUs this process may use, at most {MAX_DEFAULT_READERS})",
    )
    parser.add_argument(
        "--convert",
        type=Path,
        metavar="DIR",
        help="rewrite an export of the older interleaved layout in place as one file per partition "
        "(what `audit --input` reads); no Kafka needed",
    )
    parser.set_defaults(run=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


# Each reading process holds its own read buffers (~0.5 GB peak at 1.2M records,
# docs/benchmarks.md, "`export-offsets-log`"): more than this many need `--parallel` said explicitly.
MAX_DEFAULT_READERS = 4
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def default_readers(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The CPUs this process may use: its affinity, and a container's CPU limit (cgroup v2
    `cpu.max`: a pod's `limits.cpu` on a large node would otherwise count the node's CPUs), at
    most `MAX_DEFAULT_READERS`."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit readable: the affinity
    return max(1, min(cpus, MAX_DEFAULT_READERS))


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
    from groupwarden.connectivity.settings import settings_from_file

    try:
        from groupwarden.fleet.export import clear_export  # noqa: F401  (the [spark] extra's check)
    except ImportError as exc:
        return exit_codes.fail(
            f"export-offsets-log needs the [spark] extra ({exc.name} is missing)", exit_codes.BAD_INPUT
        )
    try:
        settings = settings_from_file(args.bootstrap_servers, args.command_config)
    except (ValueError, OSError) as exc:
        return exit_codes.fail(str(exc), exit_codes.BAD_INPUT)
    try:
        cluster, stats = _export(args, settings)
    except OffsetsLogGap as exc:
        return exit_codes.fail(
            f"__consumer_offsets partition {exc.partition}: its log start moved past offset "
            f"{exc.position} while it was exported (retention removed records); export again",
            exit_codes.PARTIAL_FAILURE,
        )
    except (KafkaUnavailable, OffsetsLogUnavailable) as exc:
        return exit_codes.fail(settings.redact(str(exc)), exit_codes.PARTIAL_FAILURE)
    print(
        f"exported {stats.records} records of {len(stats.bounds)} partitions of __consumer_offsets "
        f"(cluster {cluster}) to {args.out}",
        file=sys.stderr,
    )
    return exit_codes.OK


def _export(args: argparse.Namespace, settings: Any) -> tuple[str, ExportStats]:
    """The records read by `--parallel` processes at once, each its share of the partitions into
    its own files (one file per partition: the shares never meet); this process meanwhile reads
    the metadata and `__share_group_state`, then writes the metadata file. One share: no process
    is started."""
    from concurrent.futures import Future, ProcessPoolExecutor
    from multiprocessing import get_context

    from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
    from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
    from groupwarden.fleet.export import (
        ExportStats,
        clear_export,
        share_partitions,
        write_metadata,
        write_partition_files,
    )

    pool = None
    parts: list[Future[ExportStats]] = []
    gateway = KafkaAdminGateway(settings)
    try:
        cluster_id = gateway.cluster_id()
        cluster = args.cluster or cluster_id
        readers = args.parallel or default_readers()
        shares = share_partitions(OffsetsLogReader(settings).ranges(), readers) if readers > 1 else []
        # An earlier export in `out` is removed only once the cluster answered.
        clear_export(args.out)
        if len(shares) > 1:
            # Spawned, not forked: this process already runs librdkafka's and the admin client's
            # threads, and librdkafka is not fork-safe.
            pool = ProcessPoolExecutor(max_workers=len(shares), mp_context=get_context("spawn"))
            source = (args.bootstrap_servers, args.command_config, args.out, cluster)
            parts = [pool.submit(export_share, *source, share) for share in shares]
        topics = gateway.list_topics()
        try:
            share_state = list(gateway.read_share_state_log({}))
        except OffsetsLogUnavailable as exc:
            print(
                f"warning: {settings.redact(str(exc))}: share groups will be dated as a first plan run does",
                file=sys.stderr,
            )
            share_state = None
        topic_ids = gateway.topic_names_by_id()
        if pool is None:
            stats = write_partition_files(args.out, cluster, gateway.read_offsets_log({}))
        else:
            stats = ExportStats()
            for part in parts:
                stats.add(part.result())
        write_metadata(
            args.out, cluster, cluster_id, topics, stats, share_state=share_state, topic_ids=topic_ids
        )
    finally:
        gateway.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return cluster, stats


def export_share(
    bootstrap_servers: str, command_config: Path | None, out: Path, cluster: str, pieces: list[Piece]
) -> ExportStats:
    """One reading process of `--parallel`: its pieces of `__consumer_offsets` (at most one per
    partition), as their files in `out`. Run in a spawned process; the port's exceptions it
    raises (messages redacted by the reader) reach the command as they are."""
    from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
    from groupwarden.connectivity.settings import settings_from_file
    from groupwarden.fleet.export import write_partition_files

    settings = settings_from_file(bootstrap_servers, command_config)
    records = OffsetsLogReader(settings).read(
        {p.partition: p.start for p in pieces},
        partitions={p.partition for p in pieces},
        until={p.partition: p.end for p in pieces},
    )
    return write_partition_files(out, cluster, records, {p.partition: p.file for p in pieces})

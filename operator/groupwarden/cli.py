"""groupwarden: keeps Kafka consumer groups tidy with the broker's own semantics."""

from __future__ import annotations

import argparse
import sys

from groupwarden import __version__
from groupwarden.commands import crd, export_offsets_log, fleet_audit, migrate_storage, plan, restore, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupwarden", description=__doc__)
    parser.add_argument("--version", action="version", version=f"groupwarden {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    plan.register(subparsers)
    crd.register(subparsers)
    run.register(subparsers)
    restore.register(subparsers)
    fleet_audit.register(subparsers)
    export_offsets_log.register(subparsers)
    migrate_storage.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

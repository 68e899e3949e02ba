"""`groupwarden crd`: print the generated CRD, write it into directories, or check them for drift."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from groupwarden.commands import exit_codes
from groupwarden.core.crd import CRD_FILENAME, render_crd_yaml


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("crd", help="print, write or check the ConsumerGroupPolicy CRD")
    parser.add_argument("--write", nargs="+", metavar="DIR", type=Path, help=f"write DIR/{CRD_FILENAME}")
    parser.add_argument("--check", nargs="+", metavar="DIR", type=Path, help="exit 1 if DIR's copy drifted")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    text = render_crd_yaml()
    if args.write:
        for directory in args.write:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / CRD_FILENAME).write_text(text)
    if args.check:
        drifted = [
            d for d in args.check if not (d / CRD_FILENAME).exists() or (d / CRD_FILENAME).read_text() != text
        ]
        for directory in drifted:
            print(
                f"{directory / CRD_FILENAME} is not what the models generate: run `make crds`",
                file=sys.stderr,
            )
        return exit_codes.PARTIAL_FAILURE if drifted else exit_codes.OK
    if not args.write:
        sys.stdout.write(text)
    return exit_codes.OK

"""The audit signing flags shared by the commands that delete (`apply`, `run`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from groupwarden.deletion_trail import RecordSigner, signer_from_options

SIGNING_KEY_ENV = "GROUPWARDEN_AUDIT_SIGNING_KEY"  # a path, never the key itself


def add_signing_arguments(parser: Any) -> None:
    parser.add_argument(
        "--audit-signing-key",
        metavar="PATH",
        type=Path,
        help="Ed25519 private key (PEM) that signs every audit record, so that `restore` can tell them "
        f"from forgeries (default: ${SIGNING_KEY_ENV}; make one with "
        "`openssl genpkey -algorithm ed25519 -out signing-key.pem`)",
    )
    parser.add_argument(
        "--allow-unsigned-audit",
        action="store_true",
        help="without a signing key, delete anyway and write unsigned records (auditVersion 1), which "
        "`restore` trusts only with --trust-unsigned: for trails nobody else can write",
    )


def signing_key_path(args: argparse.Namespace) -> Path | None:
    """The key file of a command that deletes (None for the others, e.g. `plan`)."""
    if not hasattr(args, "audit_signing_key"):
        return None
    given: Path | None = args.audit_signing_key
    if given is not None:
        return given
    from_env = os.environ.get(SIGNING_KEY_ENV, "")
    return Path(from_env) if from_env else None


def signer_from_args(args: argparse.Namespace) -> RecordSigner:
    """Raises AuditKeyError (naming the file, never its content) for a key that cannot be used."""
    return signer_from_options(signing_key_path(args), getattr(args, "allow_unsigned_audit", False))

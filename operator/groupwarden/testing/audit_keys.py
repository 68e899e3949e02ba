"""A fixed audit signing key for tests and benchmarks (never used at run time).

Derived from a constant, so every process of a test run (pytest-xdist workers, the operator
processes they start, the CLI) signs with the same key and `restore` in one process trusts what
another wrote. `write_key_files` puts the pair where the CLI and the operator read them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from groupwarden.deletion_trail import (
    Ed25519Signer,
    SigningKey,
    TrailReading,
    TrustedKeys,
    numbered_lines,
    read_trail,
)


@cache
def fixed_signing_key() -> SigningKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = hashlib.sha256(b"groupwarden test audit key").digest()
    return SigningKey(Ed25519PrivateKey.from_private_bytes(seed))


def fixed_signer() -> Ed25519Signer:
    return Ed25519Signer(fixed_signing_key())


def fixed_trusted_keys() -> TrustedKeys:
    return TrustedKeys.of([fixed_signing_key().public_key])


def write_key_files(directory: Path) -> tuple[Path, Path]:
    """(private key PEM, public key PEM) in `directory` (mode 0600 for the private one)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = fixed_signing_key()
    private, public = directory / "audit-signing-key.pem", directory / "audit-public-key.pem"
    private.touch(mode=0o600)
    private.write_bytes(key.private_pem())
    public.write_bytes(key.public_key.public_pem())
    return private, public


def read_fixed_trail(lines: Iterable[str], source: str = "trail", **options: Any) -> TrailReading:
    """A trail's lines read back as `restore` reads them, trusting the test key."""
    return read_trail(numbered_lines(lines, source), fixed_trusted_keys(), **options)


def trusted_records(lines: Iterable[str], source: str = "trail") -> list[dict[str, Any]]:
    """The records of lines that must all verify (raises AssertionError naming the first that
    does not)."""
    reading = read_fixed_trail(lines, source)
    if reading.refused:
        first = reading.refused[0]
        raise AssertionError(f"{first.position}: {first.reason}")
    return [dict(r.record) for r in reading.records]

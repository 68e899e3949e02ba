"""Signed audit records: an Ed25519 signature over the exact bytes of each record.

The record is serialised once (sorted keys, no spaces, UTF-8: the serialisation of `auditVersion 1`)
and those bytes are signed and written unchanged inside an envelope; a reader verifies the same
bytes it slices out of the line, then parses them. Nothing is ever re-canonicalised, so a reader
needs no JSON canonical form, and any change of a signed byte fails the signature:

    {"auditVersion":2,"keyId":"<id>","signature":"<base64>","record":<the signed record bytes>}

The envelope's fields come first and in this order, so the record is everything between the
prefix and the closing brace. The signed message is `SIGNED_CONTEXT + record bytes` (a context
string: a signature made for an audit record is never valid for anything else the key might sign).

Only the operator (and whoever runs `apply`) holds the private key; `restore` needs only public
keys, so whoever can restore still cannot forge. A key id is derived from the public key (the first
16 hex digits of the SHA-256 of its raw bytes): records name the key that signed them, and several
public keys may be trusted at once (rotation).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

SIGNED_AUDIT_VERSION: Final = 2
UNSIGNED_AUDIT_VERSION: Final = 1
SIGNED_CONTEXT: Final = b"groupwarden audit record v2\n"
_PEM_PUBLIC = "-----BEGIN PUBLIC KEY-----"
_PEM_END = "-----END PUBLIC KEY-----"


class AuditKeyError(ValueError):
    """A key file cannot be used (the message names the file, never key material)."""


def record_text(record: Mapping[str, Any]) -> str:
    """The one serialisation of a record (what is signed and written)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _envelope_prefix(key_id: str, signature: str) -> str:
    return (
        f'{{"auditVersion":{SIGNED_AUDIT_VERSION},"keyId":{json.dumps(key_id)},'
        f'"signature":{json.dumps(signature)},"record":'
    )


def key_id_of(raw_public_key: bytes) -> str:
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


class SigningKey:
    """The private half: signs records. Loaded from a PEM file (PKCS#8, as `openssl genpkey
    -algorithm ed25519` writes it)."""

    def __init__(self, private_key: Any) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        if not isinstance(private_key, Ed25519PrivateKey):
            raise AuditKeyError("the audit signing key must be an Ed25519 key")
        self._key = private_key
        self.public_key = VerifyingKey(private_key.public_key())

    @property
    def key_id(self) -> str:
        return self.public_key.key_id

    @classmethod
    def generate(cls) -> SigningKey:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem_file(cls, path: str | Path) -> SigningKey:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise AuditKeyError(f"cannot read the audit signing key {path}: {error.strerror}") from None
        try:
            key = load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            # Never the library's message: it may quote the file's content.
            raise AuditKeyError(
                f"{path} is not an unencrypted PEM private key (make one with "
                "`openssl genpkey -algorithm ed25519 -out FILE`)"
            ) from None
        try:
            return cls(key)
        except AuditKeyError:
            raise AuditKeyError(f"{path}: the audit signing key must be an Ed25519 key") from None

    def private_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def sign(self, record: Mapping[str, Any]) -> str:
        """The envelope line (no newline) of `record`, signed."""
        text = record_text(record)
        signature = self._key.sign(SIGNED_CONTEXT + text.encode("utf-8"))
        return _envelope_prefix(self.key_id, base64.b64encode(signature).decode("ascii")) + text + "}"


class VerifyingKey:
    """The public half: verifies signatures."""

    def __init__(self, public_key: Any) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        if not isinstance(public_key, Ed25519PublicKey):
            raise AuditKeyError("an audit public key must be an Ed25519 key")
        self._key = public_key
        self.key_id = key_id_of(public_key.public_bytes(Encoding.Raw, PublicFormat.Raw))

    def verifies(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        return self._key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys `restore` trusts, by key id (empty: no signed record is trusted)."""

    by_id: Mapping[str, VerifyingKey]

    @classmethod
    def of(cls, keys: Iterable[VerifyingKey]) -> TrustedKeys:
        return cls({key.key_id: key for key in keys})

    def __bool__(self) -> bool:
        return bool(self.by_id)


def load_public_keys(paths: Iterable[str | Path]) -> TrustedKeys:
    """The public keys in `paths`: PEM files with one or more `PUBLIC KEY` blocks, or directories of
    such files (a mounted ConfigMap: every regular file not starting with a dot)."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    keys: list[VerifyingKey] = []
    for given in paths:
        path = Path(given)
        files = (
            sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            if path.is_dir()
            else [path]
        )
        for file in files:
            try:
                text = file.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as error:
                reason = error.strerror if isinstance(error, OSError) else "not a PEM file"
                raise AuditKeyError(f"cannot read the audit public key {file}: {reason}") from None
            blocks = _pem_blocks(text)
            if not blocks:
                raise AuditKeyError(f"{file} holds no PEM public key (`-----BEGIN PUBLIC KEY-----`)")
            for block in blocks:
                try:
                    keys.append(VerifyingKey(load_pem_public_key(block.encode("ascii"))))
                except (ValueError, TypeError, AuditKeyError):
                    raise AuditKeyError(f"{file}: not an Ed25519 public key") from None
    return TrustedKeys.of(keys)


def _pem_blocks(text: str) -> list[str]:
    blocks: list[str] = []
    start = text.find(_PEM_PUBLIC)
    while start >= 0:
        end = text.find(_PEM_END, start)
        if end < 0:
            break
        blocks.append(text[start : end + len(_PEM_END)] + "\n")
        start = text.find(_PEM_PUBLIC, end)
    return blocks


@dataclass(frozen=True)
class Opened:
    """What a trail line holds once opened: the record and who vouches for it (`key_id` None:
    an unsigned record), or why it cannot be trusted (`problem`)."""

    record: dict[str, Any] | None
    key_id: str | None
    problem: str | None = None


def open_envelope(line: str, trusted: TrustedKeys) -> Opened:
    """Verifies a line of `auditVersion 2` and returns its record, or the reason it is refused.
    Lines of `auditVersion 1` come back as unsigned records (the caller decides whether it trusts
    them). Never raises for what a line holds."""
    try:
        outer = json.loads(line)
    except json.JSONDecodeError:
        return Opened(None, None, "not a JSON object")
    if not isinstance(outer, dict):
        return Opened(None, None, "not a JSON object")
    version = outer.get("auditVersion")
    if version == UNSIGNED_AUDIT_VERSION:
        return Opened(outer, None)
    if version != SIGNED_AUDIT_VERSION:
        return Opened(None, None, f"unsupported auditVersion {version!r}")
    key_id, signature = outer.get("keyId"), outer.get("signature")
    if not isinstance(key_id, str) or not isinstance(signature, str):
        return Opened(None, None, "unsigned: no keyId or signature")
    prefix = _envelope_prefix(key_id, signature)
    if not line.startswith(prefix) or not line.endswith("}"):
        return Opened(None, None, "not a groupwarden envelope (fields out of place)")
    signed = line[len(prefix) : -1]
    key = trusted.by_id.get(key_id)
    if key is None:
        return Opened(None, key_id, f"signed by key {key_id}, which is not trusted (--audit-public-key)")
    try:
        raw_signature = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return Opened(None, key_id, "signature is not base64")
    if base64.b64encode(raw_signature).decode("ascii") != signature:
        # Unused bits set: the same signature in another spelling. Only the writer's own spelling
        # is accepted, so that no byte of a line can change and still verify.
        return Opened(None, key_id, "signature is not in canonical base64")
    if not key.verifies(SIGNED_CONTEXT + signed.encode("utf-8"), raw_signature):
        return Opened(None, key_id, f"signature does not verify with key {key_id} (altered or forged)")
    try:
        record = json.loads(signed)
    except json.JSONDecodeError:
        return Opened(None, key_id, "signed bytes are not JSON")
    if not isinstance(record, dict) or record.get("auditVersion") != SIGNED_AUDIT_VERSION:
        return Opened(None, key_id, "signed record does not say auditVersion 2")
    return Opened(record, key_id)

"""Where audit records go, and the recorder that turns `execute_plan`'s hook into records.

A sink is anything with `write(entry)`: it must either store the entry's line durably or raise. The
recorder signs each record once (its `RecordSigner`) and writes the same line to every sink before
the action runs; a raising sink, or a signer that may not sign, raises `AuditWriteError` out of the
`before_action` hook, so `execute_plan` deletes nothing unrecorded. The operator adds a Kafka topic
sink (adapters/kafka_audit_topic.py, keyed by group).
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from groupwarden.core.plan import Action, ActionOutcome, Plan
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.deletion_trail.records import intent_record, outcome_record
from groupwarden.deletion_trail.signing import UNSIGNED_AUDIT_VERSION, SigningKey, record_text

# The logger keeps the name operators' log pipelines know (it predates the package name).
AUDIT_LOGGER = "groupwarden.audit"


class AuditWriteError(Exception):
    """An audit record could not be stored: the action it describes must not run."""


@dataclass(frozen=True)
class TrailEntry:
    """One record as every sink stores it: `line` (the signed envelope, or the unsigned record) is
    written unchanged; `record` is the same record as an object, for sinks that route by group."""

    record: dict[str, Any]
    line: str


class AuditSink(Protocol):
    def write(self, entry: TrailEntry) -> None: ...


class BatchSink(AuditSink, Protocol):
    """A sink that stores several entries at once (one fsync, one flush): all durably, or raises.
    An exception may name the entry that failed in its `entry` attribute."""

    def write_many(self, entries: Sequence[TrailEntry]) -> None: ...


class RecordSigner(Protocol):
    """Turns a record into the line every sink writes; raises AuditWriteError when it may not."""

    def line(self, record: dict[str, Any]) -> str: ...


class Ed25519Signer:
    """Signed records (`auditVersion 2`): what `restore` trusts with the matching public key."""

    def __init__(self, key: SigningKey) -> None:
        self.key = key

    def line(self, record: dict[str, Any]) -> str:
        return self.key.sign(record)

    def __str__(self) -> str:
        return f"signed with key {self.key.key_id}"


class UnsignedRecords:
    """Unsigned records (`auditVersion 1`), only where the operator was told so explicitly
    (`--allow-unsigned-audit`): `restore` trusts them only with `--trust-unsigned`."""

    def line(self, record: dict[str, Any]) -> str:
        return record_text({**record, "auditVersion": UNSIGNED_AUDIT_VERSION})

    def __str__(self) -> str:
        return "UNSIGNED (--allow-unsigned-audit)"


class NoSigningKey:
    """No key and no permission to write unsigned records: every deletion is refused, because its
    undo would rest on a trail anyone with Write on it could forge."""

    MESSAGE = (
        "no audit signing key is configured (--audit-signing-key or $GROUPWARDEN_AUDIT_SIGNING_KEY; "
        "chart: audit.signing.existingSecret), and unsigned records were not allowed "
        "(--allow-unsigned-audit): nothing is deleted"
    )

    def line(self, record: dict[str, Any]) -> str:
        raise AuditWriteError(
            f"cannot sign the audit record of {record.get('action')} {record.get('group')!r}: {self.MESSAGE}"
        )

    def __str__(self) -> str:
        return "off: no signing key, deletions refused"


def signer_from_options(key_file: str | Path | None, allow_unsigned: bool) -> RecordSigner:
    """The entry points' one rule: a key signs; without one, unsigned only when allowed. Raises
    AuditKeyError (naming the file) for a key that cannot be used."""
    if key_file:
        return Ed25519Signer(SigningKey.from_pem_file(key_file))
    return UnsignedRecords() if allow_unsigned else NoSigningKey()


class LogSink:
    """One structured JSON log line per record (logger `groupwarden.audit`, level INFO)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(AUDIT_LOGGER)

    def write(self, entry: TrailEntry) -> None:
        self.logger.info(entry.line)

    def write_many(self, entries: Sequence[TrailEntry]) -> None:
        for entry in entries:
            self.logger.info(entry.line)


def log_to_stderr_if_unconfigured() -> None:
    """For the CLI: when nothing configured logging, audit log lines go to stderr (one JSON object
    per line, nothing else), so the "always a log line" sink is never silently dropped."""
    logger = logging.getLogger(AUDIT_LOGGER)
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


class FileSink:
    """Appends one JSON line per record and fsyncs it before returning (write-ahead durability).

    The file is opened per record in append mode (O_APPEND: concurrent writers never interleave a
    line), so a trail can be shared by runs and rotated between them."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def write(self, entry: TrailEntry) -> None:
        self.write_many([entry])

    def write_many(self, entries: Sequence[TrailEntry]) -> None:
        """One append of every entry's line and one fsync (a batch of intents costs one disk
        flush, not one per group)."""
        line = "".join(entry.line + "\n" for entry in entries).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)


class MemorySink:
    """Keeps records and their lines in lists (tests)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.lines: list[str] = []

    def write(self, entry: TrailEntry) -> None:
        self.records.append(entry.record)
        self.lines.append(entry.line)

    def write_many(self, entries: Sequence[TrailEntry]) -> None:
        for entry in entries:
            self.write(entry)


def _now() -> datetime:
    return datetime.now(UTC)


class AuditRecorder:
    """Records one run (one `planId`) to `sinks`. Use `before_action(plan)` as `execute_plan`'s hook
    and `record_outcomes(plan, outcomes)` after it returns."""

    def __init__(
        self,
        sinks: Sequence[AuditSink],
        snapshot: ClusterSnapshot,
        bootstrap_servers: Iterable[str],
        *,
        signer: RecordSigner,
        plan_id: str | None = None,
        redact: Callable[[str], str] = lambda text: text,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.sinks = list(sinks)
        self.signer = signer
        self.plan_id = plan_id or str(uuid.uuid4())
        self.bootstrap_servers = list(bootstrap_servers)
        self._facts = {g.group_id: g for g in snapshot.groups}
        self._redact = redact
        self._clock = clock
        self._action_ids: dict[int, tuple[Action, str]] = {}

    def _write(self, records: Sequence[dict[str, Any]]) -> None:
        """Every record to every sink, in order (a batch sink takes them at once): stored, or
        AuditWriteError naming the record that was not."""
        # Signed once, the same line everywhere.
        entries = [TrailEntry(record, self.signer.line(record)) for record in records]
        for sink in self.sinks:
            current = entries[0] if entries else None
            try:
                many = getattr(sink, "write_many", None)
                if many is not None:
                    many(entries)
                else:
                    for current in entries:
                        sink.write(current)
            except Exception as exc:  # any failure to store means "not recorded"
                failed = getattr(exc, "entry", None) or current
                record = failed.record if failed is not None else {}
                raise AuditWriteError(
                    f"cannot write the audit record of {record.get('action')} {record.get('group')!r} "
                    f"to {getattr(sink, 'path', type(sink).__name__)}: {exc}"
                ) from exc

    def _action_id(self, action: Action) -> str:
        # Keyed by the action object (kept alive here, so its id is never reused): the executor
        # may run a plan in steps (sub-plans sharing the same Action objects).
        key = id(action)
        if key not in self._action_ids:
            self._action_ids[key] = (action, str(uuid.uuid4()))
        return self._action_ids[key][1]

    def before_action(self, plan: Plan) -> Callable[[Action], None]:
        """The write-ahead hook for `execute_plan(gateway, plan, hook)`: raises AuditWriteError when
        the intent cannot be stored, so the action is not executed."""
        batch = self.before_actions(plan)
        return lambda action: batch([action])

    def before_actions(self, plan: Plan) -> Callable[[Sequence[Action]], None]:
        """The same for a batch (`execute_plan(..., before_actions=hook)`): every intent of the
        batch stored (one fsync or flush per sink) before any of its requests, or AuditWriteError
        and none of them runs."""

        def hook(actions: Sequence[Action]) -> None:
            at = self._clock()
            self._write(
                [
                    intent_record(
                        plan=plan,
                        action=action,
                        facts=self._facts.get(action.group_id),
                        plan_id=self.plan_id,
                        action_id=self._action_id(action),
                        bootstrap_servers=self.bootstrap_servers,
                        at=at,
                        redact=self._redact,
                    )
                    for action in actions
                ]
            )

        return hook

    def record_outcomes(self, plan: Plan, outcomes: Sequence[ActionOutcome]) -> None:
        """One outcome record per executed action (actions whose intent was never written are
        skipped: they did not run), written as one batch."""
        records = []
        at = self._clock()
        for outcome in outcomes:
            known = self._action_ids.get(id(outcome.action))
            if known is None or known[0] is not outcome.action:
                continue
            records.append(
                outcome_record(
                    plan=plan,
                    outcome=outcome,
                    plan_id=self.plan_id,
                    action_id=known[1],
                    at=at,
                    redact=self._redact,
                )
            )
        if records:
            self._write(records)

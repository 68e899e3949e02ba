"""Signed audit records: what only the key holder can write, and what every reader can check."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from audit_factories import cluster, plan_for
from hypothesis import given
from hypothesis import strategies as st

from groupwarden.cleanup.execute import execute_plan
from groupwarden.deletion_trail import (
    AuditKeyError,
    AuditRecorder,
    FileSink,
    LogSink,
    MemorySink,
    SigningKey,
    TrustedKeys,
    load_public_keys,
    numbered_lines,
    read_trail,
)
from groupwarden.deletion_trail.signing import SIGNED_CONTEXT, open_envelope, record_text
from groupwarden.testing.audit_keys import fixed_signer, fixed_signing_key, fixed_trusted_keys

RECORD: dict[str, Any] = {
    "auditVersion": 2,
    "type": "intent",
    "actionId": "a-1",
    "planId": "p-1",
    "clusterId": "cluster-1",
    "group": "orders-ß-✓",  # non-ASCII: the signed bytes are UTF-8
    "timestamp": "2026-11-22T03:12:45.120Z",
    "partitions": [{"topic": "orders", "partition": 0, "offset": 4, "leaderEpoch": 0, "metadata": ""}],
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
records = st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=5).map(
    lambda extra: {**RECORD, **extra, "auditVersion": 2}
)


def test_the_envelope_holds_the_records_one_serialisation_verbatim() -> None:
    line = fixed_signer().line(RECORD)
    envelope = json.loads(line)
    assert envelope["auditVersion"] == 2 and envelope["keyId"] == fixed_signing_key().key_id
    assert list(envelope) == ["auditVersion", "keyId", "signature", "record"]
    assert line.endswith("," + '"record":' + record_text(RECORD) + "}")
    assert envelope["record"] == RECORD  # `jq .record` reads it as it is


@given(records)
def test_a_record_verifies_after_it_is_signed(record: dict[str, Any]) -> None:
    opened = open_envelope(fixed_signer().line(record), fixed_trusted_keys())
    assert opened.problem is None and opened.record == json.loads(record_text(record))


@given(st.data())
def test_any_changed_byte_of_a_signed_line_is_refused(data: st.DataObject) -> None:
    record = data.draw(records)
    line = fixed_signer().line(record)
    index = data.draw(st.integers(0, len(line) - 1))
    replacement = data.draw(st.characters(codec="utf-8").filter(lambda c: c != line[index]))
    altered = line[:index] + replacement + line[index + 1 :]
    assert open_envelope(altered, fixed_trusted_keys()).record is None


@given(records)
def test_a_forger_with_its_own_key_cannot_pass_for_the_trusted_one(record: dict[str, Any]) -> None:
    forger = SigningKey.generate()
    line = forger.sign(record)
    assert "not trusted" in (open_envelope(line, fixed_trusted_keys()).problem or "")
    # Claiming the trusted key's id does not help: its public key does not verify the forgery.
    claimed = line.replace(forger.key_id, fixed_signing_key().key_id, 1)
    assert "does not verify" in (open_envelope(claimed, fixed_trusted_keys()).problem or "")


def test_unsigned_and_stripped_lines_are_told_apart() -> None:
    envelope = json.loads(fixed_signer().line(RECORD))
    stripped = json.dumps({"auditVersion": 2, "record": envelope["record"]})
    assert open_envelope(stripped, fixed_trusted_keys()).problem == "unsigned: no keyId or signature"
    unsigned = record_text({**RECORD, "auditVersion": 1})
    opened = open_envelope(unsigned, fixed_trusted_keys())
    assert opened.record is not None and opened.key_id is None  # the reader decides (--trust-unsigned)
    reordered = json.dumps(
        {"record": envelope["record"], **{k: envelope[k] for k in ("auditVersion", "keyId", "signature")}}
    )
    assert "fields out of place" in (open_envelope(reordered, fixed_trusted_keys()).problem or "")


def test_the_signature_is_bound_to_the_audit_context() -> None:
    """A signature the key made over the same bytes for any other purpose is not a record's."""
    raw = record_text(RECORD).encode()
    key = fixed_signing_key()
    line = key.sign(RECORD)
    assert key.public_key.verifies(SIGNED_CONTEXT + raw, _signature(line))
    assert not key.public_key.verifies(raw, _signature(line))


def _signature(line: str) -> bytes:
    import base64

    return base64.b64decode(json.loads(line)["signature"])


def test_records_verify_after_every_sink_wrote_them(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    trail, memory = tmp_path / "audit.jsonl", MemorySink()
    recorder = AuditRecorder(
        [FileSink(trail), memory, LogSink()], snapshot, ["fake:9092"], signer=fixed_signer()
    )
    with caplog.at_level(logging.INFO, logger="groupwarden.audit"):
        recorder.record_outcomes(plan, execute_plan(fake, plan, recorder.before_action(plan)))
    logged = [r.getMessage() for r in caplog.records if r.name == "groupwarden.audit"]
    with trail.open(encoding="utf-8") as handle:
        from_file = read_trail(numbered_lines(handle, str(trail)), fixed_trusted_keys())
    from_log = read_trail(numbered_lines(logged, "log"), fixed_trusted_keys())
    assert from_file.refused == () and from_log.refused == ()
    assert [r.record for r in from_file.records] == [r.record for r in from_log.records] == memory.records
    assert trail.read_text().splitlines() == memory.lines == logged  # one line, signed once
    assert {r.key_id for r in from_file.records} == {fixed_signing_key().key_id}


def test_several_public_keys_are_trusted_at_once_for_a_rotation(tmp_path: Path) -> None:
    old, new = SigningKey.generate(), SigningKey.generate()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "old.pem").write_bytes(old.public_key.public_pem())
    (tmp_path / "both.pem").write_bytes(old.public_key.public_pem() + new.public_key.public_pem())
    (tmp_path / "keys" / "..data").write_text("ignored: a ConfigMap mount's own entries start with a dot")
    assert set(load_public_keys([tmp_path / "both.pem"]).by_id) == {old.key_id, new.key_id}
    trusted = load_public_keys([tmp_path / "keys"])
    assert set(trusted.by_id) == {old.key_id}
    lines = [old.sign(RECORD), new.sign({**RECORD, "actionId": "a-2"})]
    reading = read_trail(numbered_lines(lines, "t"), trusted)
    assert len(reading.records) == 1 and "not trusted" in reading.refused[0].reason
    assert reading.refused[0].position == "t:2" and reading.refused[0].group == RECORD["group"]


def test_unusable_key_files_say_which_file_and_never_what_it_holds(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    ec = tmp_path / "ec.pem"
    ec.write_bytes(
        generate_private_key(SECP256R1())
        .public_key()
        .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(AuditKeyError, match=r"ec\.pem: not an Ed25519 public key"):
        load_public_keys([ec])
    secret = tmp_path / "private.pem"
    secret.write_bytes(fixed_signing_key().private_pem())
    with pytest.raises(AuditKeyError, match=r"private\.pem holds no PEM public key"):
        load_public_keys([secret])  # a private key is never taken for trust
    with pytest.raises(AuditKeyError, match=r"missing\.pem"):
        SigningKey.from_pem_file(tmp_path / "missing.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not-a-key-c2VjcmV0")
    with pytest.raises(AuditKeyError) as raised:
        SigningKey.from_pem_file(garbage)
    assert "c2VjcmV0" not in str(raised.value)
    assert not TrustedKeys.of([])

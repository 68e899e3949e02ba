"""The commands' options are read once from the command line into typed values: `plan`/`apply`
into `PlanOptions`, `run` into `OperatorOptions` (checked there, with the flag named in the error)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from groupwarden.cleanup.checkpoint import default_directory
from groupwarden.cli import build_parser
from groupwarden.commands.plan import PlanOptions
from groupwarden.commands.run import OperatorOptions

pytestmark = pytest.mark.unit


def plan_options(*argv: str) -> PlanOptions:
    return PlanOptions.from_args(build_parser().parse_args(list(argv)))


def operator_options(*argv: str) -> OperatorOptions:
    return OperatorOptions.from_args(build_parser().parse_args(["run", *argv]))


def test_plan_and_apply_options() -> None:
    planned = plan_options("plan", "-f", "a.yaml", "-f", "b.yaml", "--now", "2026-11-26T10:00:00Z")
    assert planned == PlanOptions(
        filenames=("a.yaml", "b.yaml"), now="2026-11-26T10:00:00Z", ledger_cache=default_directory()
    )
    applied = plan_options(
        "apply",
        "-f",
        "p.yaml",
        "--yes",
        "-o",
        "json",
        "--no-offsets-log",
        "--no-ledger-cache",
        "--audit-file",
        "trail.jsonl",
        "--audit-signing-key",
        "key.pem",
        "--bootstrap-servers",
        "k:9092",
    )
    assert applied == PlanOptions(
        filenames=("p.yaml",),
        bootstrap_servers="k:9092",
        output="json",
        read_offsets_log=False,
        ledger_cache=None,
        confirmed=True,
        audit_file=Path("trail.jsonl"),
        audit_signing_key=Path("key.pem"),
    )
    assert plan_options("apply", "-f", "p.yaml", "--ledger-cache", "/tmp/l").ledger_cache == Path("/tmp/l")


def test_apply_keeps_a_trail_and_signs_it_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("GROUPWARDEN_AUDIT_SIGNING_KEY", "/keys/signing.pem")
    defaults = plan_options("apply", "-f", "p.yaml", "--yes")
    assert defaults.audit_file == tmp_path / "groupwarden" / "audit.jsonl"  # an undo outside the terminal
    assert defaults.audit_signing_key == Path("/keys/signing.pem") and not defaults.allow_unsigned_audit
    assert plan_options("apply", "-f", "p.yaml", "--no-audit-file").audit_file is None
    monkeypatch.delenv("GROUPWARDEN_AUDIT_SIGNING_KEY")
    unsigned = plan_options("apply", "-f", "p.yaml", "--allow-unsigned-audit")
    assert unsigned.audit_signing_key is None and unsigned.allow_unsigned_audit
    assert plan_options("plan", "-f", "p.yaml").audit_file is None


def test_operator_options(tmp_path: Path) -> None:
    options = operator_options(
        "-n",
        "team-a",
        "-n",
        "team-b",
        "--no-leader-election",
        "--min-retention",
        "10m",
        "--default-credentials-namespaces",
        "team-a",
    )
    assert options.namespaces == ("team-a", "team-b") and not options.leader_election
    assert options.tenancy.min_retention == timedelta(minutes=10)
    assert options.tenancy.default_credentials_namespaces == frozenset({"team-a"})
    assert options.audit_topic is None and options.default_properties == {}
    assert options.read_offsets_log and options.kafka_threads == 8 and options.lease_duration == 15.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kafka-threads", "0"], "--kafka-threads must be >= 1"),
        (["--lease-duration", "2"], "--lease-duration >= 3"),
        (["--min-retention", "soon"], "--min-retention: "),
        (["--tenant-allowlist", "/nonexistent/allowlist.yaml"], "--tenant-allowlist: "),
    ],
)
def test_bad_operator_options_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        operator_options(*argv)


def test_the_operator_signs_with_its_key_and_without_one_deletes_only_if_told_to_write_unsigned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from groupwarden.deletion_trail import Ed25519Signer, NoSigningKey, SigningKey, UnsignedRecords

    key = SigningKey.generate()
    key_file = tmp_path / "signing-key.pem"
    key_file.write_bytes(key.private_pem())
    signer = operator_options("--audit-signing-key", str(key_file)).audit_signer
    assert isinstance(signer, Ed25519Signer) and signer.key.key_id == key.key_id
    monkeypatch.setenv("GROUPWARDEN_AUDIT_SIGNING_KEY", str(key_file))
    assert isinstance(operator_options().audit_signer, Ed25519Signer)
    monkeypatch.delenv("GROUPWARDEN_AUDIT_SIGNING_KEY")
    assert isinstance(operator_options().audit_signer, NoSigningKey)
    assert isinstance(operator_options("--allow-unsigned-audit").audit_signer, UnsignedRecords)
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("-----BEGIN PRIVATE KEY-----\nc2VjcmV0LXZhbHVl\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ValueError, match=r"--audit-signing-key: .*not-a-key\.pem") as raised:
        operator_options("--audit-signing-key", str(not_a_key))
    assert "c2VjcmV0" not in str(raised.value)


def test_the_cli_imports_no_kubernetes_client_until_a_verb_needs_it() -> None:
    """`plan`, `apply`, `restore` and the fleet audit never talk to Kubernetes; the client's import
    (~0.15 s, 13 MB) was a seventh of a warm `plan` (docs/benchmarks.md, "`plan` at 100k groups")."""
    import subprocess
    import sys

    probe = (
        "import sys, groupwarden.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"

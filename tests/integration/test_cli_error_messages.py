"""The CLI's error messages name each exception once: against a port where no broker listens (a
short `default.api.timeout.ms`, so each run fails in seconds), with plain and with SASL client
properties, and with client properties that cannot work.

kafka-python's errors print their class name themselves ("KafkaTimeoutError: Unable to bootstrap
..."); a message that prefixed `type(exc).__name__` again printed "KafkaTimeoutError:
KafkaTimeoutError: ..." (adapters/client_errors.exception_text is the one place that names them)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from gwtest.cli import run_cli, write_policy
from gwtest.ports import free_port

pytestmark = pytest.mark.integration

FAST = {"default.api.timeout.ms": "3000", "request.timeout.ms": "2000"}
SASL = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "nobody",
    "sasl.password": "not-the-password",
}
# An exception's name as messages print it: kafka-python's and Python's classes, librdkafka's codes.
EXCEPTION_NAME = re.compile(r"\b(?:[A-Z][A-Za-z0-9]*(?:Error|Exception)|_[A-Z][A-Z_]+)\b")


def properties(tmp_path: Path, name: str, props: dict[str, str]) -> Path:
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    return path


def error_lines(stderr: str) -> list[str]:
    """What the CLI itself says (librdkafka's own log lines, "%3|...|FAIL|...", are not its messages)."""
    return [line for line in stderr.splitlines() if line.startswith(("error:", "warning:"))]


def assert_each_name_once(stderr: str) -> None:
    lines = error_lines(stderr)
    assert lines, f"no error message in stderr: {stderr[-2000:]}"
    for line in lines:
        twice = {name: n for name, n in Counter(EXCEPTION_NAME.findall(line)).items() if n > 1}
        assert not twice, f"{sorted(twice)} named more than once: {line}"
        assert not re.search(r"\b(\w+): \1\b", line), f"a name repeated: {line}"


def cli_runs(policy: Path, bootstrap: str, config: Path, out: Path) -> dict[str, list[str]]:
    """Every command that connects to Kafka, as the user types it."""
    common = ["--bootstrap-servers", bootstrap, "--command-config", str(config)]
    return {
        "plan": ["plan", "-f", str(policy), *common],
        "apply": ["apply", "-f", str(policy), "--yes", *common],
        "export-offsets-log": ["export-offsets-log", *common, "--out", str(out / "export")],
        "restore": ["restore", "--audit-topic", "gw-audit", "--trust-unsigned", "--yes", *common],
    }


@pytest.mark.parametrize("auth", ["plaintext", "sasl"])
@pytest.mark.parametrize("command", ["plan", "apply", "export-offsets-log", "restore"])
def test_an_unreachable_broker_is_reported_with_each_exception_named_once(
    tmp_path: Path, command: str, auth: str
) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = properties(tmp_path, auth, FAST | (SASL if auth == "sasl" else {}))
    policy = write_policy(tmp_path / "p.yaml", "unreachable", bootstrap, ["ci-*"])
    result = run_cli(*cli_runs(policy, bootstrap, config, tmp_path)[command], timeout=90)
    assert result.returncode == 1, result.stderr  # PARTIAL_FAILURE: the cluster could not be reached
    assert bootstrap in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert_each_name_once(result.stderr)


def test_audit_of_an_unreachable_broker_names_each_exception_once(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    config = properties(tmp_path, "fast", FAST)
    policy = write_policy(tmp_path / "p.yaml", "unreachable", bootstrap, ["ci-*"])
    result = run_cli(
        "audit",
        "-f",
        str(policy),
        "--bootstrap-servers",
        bootstrap,
        "--command-config",
        str(config),
        "--out",
        str(tmp_path / "audit"),
        timeout=180,
    )
    assert result.returncode == 1, result.stderr
    assert bootstrap in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert_each_name_once(result.stderr)


def test_client_properties_that_cannot_work_are_refused_once(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    config = properties(
        tmp_path,
        "bad-tls",
        FAST | {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "no-ca.pem")},
    )
    policy = write_policy(tmp_path / "p.yaml", "bad-tls", bootstrap, ["ci-*"])
    result = run_cli(
        "plan", "-f", str(policy), "--bootstrap-servers", bootstrap, "--command-config", str(config)
    )
    assert result.returncode == 2, result.stderr  # BAD_INPUT
    assert "ssl.ca.location" in result.stderr, result.stderr
    assert_each_name_once(result.stderr)

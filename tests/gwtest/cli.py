"""Run the real `groupwarden` console script (the product's CLI contract) from tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

GROUPWARDEN = str(Path(sys.executable).with_name("groupwarden"))


def write_policy(path: Path, name: str, bootstrap: str, include: list[str], **spec: Any) -> Path:
    document = {
        "apiVersion": "groupwarden.io/v1beta1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name, "namespace": "tests"},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "selector": {"include": include},
            "limits": {"maxDeletionRatio": 1.0},
            **spec,
        },
    }
    path.write_text(yaml.safe_dump(document))
    return path


def run_cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`env`: the command's whole environment (default: this process's, with the suite's audit
    keys: tests/conftest.py)."""
    return subprocess.run(
        [GROUPWARDEN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(os.environ) if env is None else env,
    )


def plan_json(policy: Path, *extra: str, command: str = "plan") -> dict[str, Any]:
    result = run_cli(command, "-f", str(policy), "-o", "json", *extra)
    if result.returncode not in (0, 1):
        raise AssertionError(f"groupwarden {command} failed ({result.returncode}): {result.stderr}")
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def apply_until_deleted(policy: Path, audit: Path, timeout: float, what: str) -> list[dict[str, Any]]:
    """`groupwarden apply --yes` again and again until a run reports outcomes (a first run may only
    start an observed Empty-since clock); returns those outcomes."""
    from gwtest.wait import wait_for

    outcomes: list[dict[str, Any]] = []

    def deleted() -> bool:
        done = run_cli("apply", "-f", str(policy), "-o", "json", "--yes", "--audit-file", str(audit))
        assert done.returncode == 0, done.stderr
        outcomes.extend(json.loads(done.stdout).get("outcomes", []))
        return bool(outcomes)

    wait_for(deleted, timeout=timeout, what=what)
    return outcomes

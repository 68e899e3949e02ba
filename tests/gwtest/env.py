"""Where the real systems are: the caller's environment first, else the devstack."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVSTACK_DIR = Path(os.environ.get("DEVSTACK_DIR", REPO / ".devstack"))


def devstack_env(component: str) -> dict[str, str]:
    """Starts the devstack component if needed and returns the variables it exports."""
    subprocess.run([str(REPO / "devstack" / "up.sh"), component], check=True, stdout=subprocess.DEVNULL)
    return exported_by(DEVSTACK_DIR / f"{component}.env")


def exported_by(env_file: Path) -> dict[str, str]:
    """The variables a devstack env file (`export NAME=value` lines, shell-quoted) exports."""
    values: dict[str, str] = {}
    for line in env_file.read_text().splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            key, _, raw = line[len("export ") :].partition("=")
            parts = shlex.split(raw)
            values[key] = parts[0] if parts else ""
    return values


def setting(name: str, component: str) -> str:
    """An environment variable if the caller set it, else the devstack's value."""
    if os.environ.get(name):
        return os.environ[name]
    values = devstack_env(component)
    if name not in values:
        raise RuntimeError(f"devstack component {component!r} did not export {name}")
    return values[name]


def tool_path(name: str) -> str:
    """A Kafka/Kubernetes CLI tool: the devstack's wrapper first, else PATH."""
    candidate = DEVSTACK_DIR / "bin" / name
    if candidate.exists():
        return str(candidate)
    return name

"""The container image's install steps (Dockerfile, stage `build`), run here without Docker: build
groupwarden's wheel from exactly the files the image gets, install it with the pinned constraints
and wheels only into a clean virtualenv, and run the image's entrypoint from it."""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from groupwarden import __version__

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "deploy" / "docker" / "constraints.txt"


def run(*args: str | Path, cwd: Path | None = None) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=540, cwd=cwd)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_the_constraints_file_pins_the_tested_runtime_closure() -> None:
    lock = runpy.run_path(str(REPO / "deploy" / "docker" / "lock_constraints.py"))
    assert CONSTRAINTS.read_text() == lock["render"](), (
        "run .venv/bin/python deploy/docker/lock_constraints.py"
    )


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("image")
    # The build context after .dockerignore: pyproject.toml, README.md, operator/.
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "operator", src / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    wheels = work / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheels, ".", cwd=src)
    venv = work / "opt-groupwarden"
    run(sys.executable, "-m", "venv", venv)
    (wheel,) = wheels.glob("groupwarden-*.whl")
    run(venv / "bin" / "pip", "install", "--only-binary=:all:", "--constraint", CONSTRAINTS, wheel)
    run(venv / "bin" / "pip", "uninstall", "--yes", "pip", "setuptools")
    return venv


def test_the_wheel_carries_the_package_data(image_venv: Path) -> None:
    (wheel,) = (image_venv.parent / "wheels").glob("groupwarden-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("groupwarden/adapters/kafka_schemas/") and n.endswith(".json") for n in names)
    assert "groupwarden/py.typed" in names


def test_the_entrypoint_runs_from_the_image_venv(image_venv: Path, tmp_path: Path) -> None:
    groupwarden = image_venv / "bin" / "groupwarden"
    assert "run" in run(groupwarden, "--help")
    assert "--all-namespaces" in run(groupwarden, "run", "--help")
    # `groupwarden crd` from the installed package prints the committed CRD.
    assert (
        run(groupwarden, "crd") == (REPO / "crds" / "groupwarden.io_consumergrouppolicies.yaml").read_text()
    )
    # The Kafka gateway (kafka-python + its JSON protocol schemas shipped as package data) and the
    # operator's wiring import from the installed wheel, not from the repo.
    probe = (
        "import json, groupwarden, groupwarden.adapters.kafka_gateway, groupwarden.controller.handlers;"
        "from importlib import metadata;"
        "print(json.dumps({'file': groupwarden.__file__,"
        " 'dists': sorted(f\"{d.metadata['Name'].lower().replace('_', '-')}=={d.version}\""
        " for d in metadata.distributions())}))"
    )
    found = json.loads(
        run(image_venv / "bin" / "python", "-W", "ignore::DeprecationWarning", "-c", probe, cwd=tmp_path)
    )
    assert found["file"].startswith(str(image_venv))
    pins = [line for line in CONSTRAINTS.read_text().splitlines() if not line.startswith("#")]
    # Exactly the pinned closure plus groupwarden itself: no pip, setuptools or dev tools.
    assert sorted(found["dists"]) == sorted([*pins, f"groupwarden=={__version__}"])

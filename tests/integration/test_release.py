"""`make release` (scripts/release.sh) without the image: the sdist and wheel, the chart, the SBOM
and SHA256SUMS as a release makes them, checked from the artifacts; and what it refuses. The image
half (docker build with the labels, docker save) is the same code path as `make image`, checked by
tests/e2e/test_node_image.py; a whole release with the image was measured by hand (docs/deploy.md,
"Releasing")."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

from groupwarden import __version__

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "release.sh"
CONSTRAINTS = REPO / "deploy" / "docker" / "constraints.txt"
FIRST_RELEASE = "7ba1aca34edbd354916004c1303e5036d8f8e1db"  # 0.1.0 (deploy/releases.txt)


def release(*args: str | Path, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cwd / "scripts" / "release.sh"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHON": str(REPO / ".venv" / "bin" / "python")},
    )


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release")
    # --rehearsal: the working tree may have changes, and HEAD may not be the recorded release.
    result = release("--no-image", "--rehearsal", "--out", out, __version__)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def test_the_release_has_every_artifact_and_their_checksums(artifacts: Path) -> None:
    v = __version__
    names = sorted(p.name for p in artifacts.iterdir())
    assert names == sorted(
        [
            "SHA256SUMS",
            f"groupwarden-{v}-py3-none-any.whl",
            f"groupwarden-{v}-sbom.cdx.json",
            f"groupwarden-{v}.tar.gz",
            f"groupwarden-{v}.tgz",
        ]
    )
    summed = [line.split()[1] for line in (artifacts / "SHA256SUMS").read_text().splitlines()]
    assert summed == sorted(n for n in names if n != "SHA256SUMS")
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=artifacts, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_wheel_and_the_sdist_carry_the_version(artifacts: Path) -> None:
    v = __version__
    with zipfile.ZipFile(artifacts / f"groupwarden-{v}-py3-none-any.whl") as wheel:
        metadata = Parser().parsestr(wheel.read(f"groupwarden-{v}.dist-info/METADATA").decode())
        assert "groupwarden/adapters/kafka_schemas/" in "\n".join(wheel.namelist())
    assert (metadata["Name"], metadata["Version"]) == ("groupwarden", v)
    with tarfile.open(artifacts / f"groupwarden-{v}.tar.gz") as sdist:
        member = sdist.extractfile(f"groupwarden-{v}/PKG-INFO")
        assert member is not None
        assert Parser().parsestr(member.read().decode())["Version"] == v


def test_the_chart_package_has_the_version_and_app_version(artifacts: Path) -> None:
    with tarfile.open(artifacts / f"groupwarden-{__version__}.tgz") as chart:
        member = chart.extractfile("groupwarden/Chart.yaml")
        assert member is not None
        meta = yaml.safe_load(io.TextIOWrapper(member))
    assert (meta["version"], meta["appVersion"]) == (__version__, __version__)
    with tarfile.open(artifacts / f"groupwarden-{__version__}.tgz") as chart:
        assert "groupwarden/crds/groupwarden.io_consumergrouppolicies.yaml" in chart.getnames()


def test_the_sbom_lists_the_images_python_environment(artifacts: Path) -> None:
    sbom = json.loads((artifacts / f"groupwarden-{__version__}-sbom.cdx.json").read_text())
    assert (sbom["bomFormat"], sbom["specVersion"]) == ("CycloneDX", "1.6")
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"], root["type"]) == ("groupwarden", __version__, "application")
    listed = {
        (c["name"].lower().replace("_", "-"), c["version"], c["purl"].split("@")[0])
        for c in sbom["components"]
    }
    # Exactly the image's pinned closure (the Dockerfile's constraints), each a PyPI package URL.
    pins = {
        tuple(line.split("=="))
        for line in CONSTRAINTS.read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert {(name, version) for name, version, _ in listed} == pins
    assert all(purl.startswith("pkg:pypi/") for _, _, purl in listed)


def _tiny_repo(tmp_path: Path, releases: str) -> Path:
    """The files the refusals read, committed in a repository of their own."""
    repo = tmp_path / "repo"
    for rel in (
        "scripts/release.sh",
        "operator/groupwarden/__init__.py",
        "deploy/helm/groupwarden/Chart.yaml",
        "CHANGELOG.md",
    ):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, repo / rel)
    (repo / "deploy" / "releases.txt").write_text(releases)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tiny"], check=True)
    return repo


def test_the_release_refuses_another_version_and_a_bad_one() -> None:
    other = release("9.9.9")
    assert other.returncode == 2
    assert f"not the package's version {__version__}" in other.stderr
    bad = release("1.2")
    assert bad.returncode == 2 and "usage: make release VERSION=X.Y.Z" in bad.stderr


def test_the_release_refuses_a_tree_with_changes(tmp_path: Path) -> None:
    repo = _tiny_repo(tmp_path, "# none yet\n")
    (repo / "notes.txt").write_text("an untracked file\n")
    refused = release(__version__, cwd=repo)
    assert refused.returncode == 2
    assert "the tree has changes (git status --porcelain: 1 entries)" in refused.stderr


def test_the_release_refuses_a_version_released_at_another_commit(tmp_path: Path) -> None:
    repo = _tiny_repo(tmp_path, f"{__version__} {FIRST_RELEASE} 2026-11-29\n")
    refused = release(__version__, cwd=repo)
    assert refused.returncode == 2
    assert f"{__version__} is the release of commit {FIRST_RELEASE} (deploy/releases.txt)" in refused.stderr
    assert release("commit", __version__, cwd=repo).stdout.strip() == FIRST_RELEASE
    assert release("previous", cwd=repo).stdout.split()[:2] == [__version__, FIRST_RELEASE]


def test_bump_writes_the_package_and_the_chart(tmp_path: Path) -> None:
    repo = _tiny_repo(tmp_path, "# none yet\n")
    bumped = release("bump", "7.8.9", cwd=repo)
    assert bumped.returncode == 0, bumped.stderr
    assert '__version__ = "7.8.9"' in (repo / "operator/groupwarden/__init__.py").read_text()
    chart = yaml.safe_load((repo / "deploy/helm/groupwarden/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("7.8.9", "7.8.9")
    assert "CHANGELOG.md's [Unreleased] entries under '## [7.8.9]" in bumped.stderr
    # The bumped tree now has changes: nothing is released from it until they are committed.
    assert release("7.8.9", cwd=repo).returncode == 2

"""The version has one source, operator/groupwarden/__init__.py: pyproject.toml reads it, the chart
says the same, the Dockerfile hard-codes none, and the releases recorded in deploy/releases.txt
match CHANGELOG.md (docs/deploy.md, "Releasing")."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from groupwarden import __version__
from groupwarden.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "groupwarden" / "Chart.yaml"
CHANGELOG = REPO / "CHANGELOG.md"
RELEASES = REPO / "deploy" / "releases.txt"
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


def recorded_releases() -> list[tuple[str, str, str]]:
    rows = []
    for line in RELEASES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, commit, date = line.split()
            rows.append((version, commit, date))
    return rows


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "groupwarden.__version__"}
    assert SEMVER.fullmatch(__version__), "X.Y.Z: the chart's SemVer and the package's PEP 440 agree"


def test_the_chart_says_the_packages_version() -> None:
    chart = yaml.safe_load(CHART.read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__), (
        f"scripts/release.sh bump {__version__}"
    )


def test_the_dockerfile_hard_codes_no_version() -> None:
    args = re.findall(r"^ARG (VERSION|REVISION)=(.*)$", (REPO / "Dockerfile").read_text(), re.M)
    assert args == [("VERSION", "unknown"), ("REVISION", "unknown")]


def test_groupwarden_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"groupwarden {__version__}\n"


def test_the_changelog_keeps_a_changelog() -> None:
    text = CHANGELOG.read_text()
    sections = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert sections[0] == ("Unreleased", "")
    versions = [v for v, _ in sections[1:]]
    assert all(SEMVER.fullmatch(v) for v in versions)
    assert all(date for _, date in sections[1:]), "every released section has its date"
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    assert __version__ in versions, f"CHANGELOG.md needs a '## [{__version__}] - DATE' section"
    links = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", text, re.M))
    assert set(links) == {v for v, _ in sections}, "a link reference for every section"


def test_every_recorded_release_is_in_the_changelog_with_its_date() -> None:
    rows = recorded_releases()
    assert rows, "deploy/releases.txt records at least 0.1.0"
    assert len({v for v, _, _ in rows}) == len(rows)
    sections = dict(re.findall(r"^## \[([^\]]+)\] - (\S+)$", CHANGELOG.read_text(), re.M))
    for version, commit, date in rows:
        assert SEMVER.fullmatch(version) and re.fullmatch(r"[0-9a-f]{40}", commit), (version, commit)
        assert sections.get(version) == date, f"CHANGELOG.md: '## [{version}] - {date}'"
    assert rows[0][:2] == ("0.1.0", "7ba1aca34edbd354916004c1303e5036d8f8e1db")


def test_the_recorded_commits_are_in_the_history() -> None:
    git = ["git", "-C", str(REPO)]
    inside = subprocess.run([*git, "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "false":
        pytest.skip("not a full git clone: the recorded commits cannot be looked up")
    for version, commit, date in recorded_releases():
        shown = subprocess.run(
            [*git, "show", "-s", "--format=%cs", f"{commit}^{{commit}}"], capture_output=True, text=True
        )
        assert shown.returncode == 0, f"{version}: commit {commit} is not in this clone's history"
        assert shown.stdout.strip() == date, f"{version}: {commit} is of {shown.stdout.strip()}, not {date}"

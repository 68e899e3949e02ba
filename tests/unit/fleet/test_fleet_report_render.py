"""report.html renders in a real browser (Debian's headless Chromium): a screenshot is produced, the
page's script ran (it sets a marker) and the console has no error; at 8 clusters and at 100.
Chromium comes from scripts/ensure-chromium.sh (apt-get install when missing; CI runs as root)."""

from __future__ import annotations

import re
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from test_fleet_driver_side import NOW, partition_table, policy

from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.partition_audit import audit_partitions
from groupwarden.fleet.sources import ClusterSource
from groupwarden.testing.fleet_oracle import collect_reference, decide_reference
from groupwarden.testing.synthetic_offsets_log import synthetic_log

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def chromium() -> str:
    result = subprocess.run(
        [str(REPO / "scripts" / "ensure-chromium.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def render(chromium: str, page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp / 'profile'}",
            *extra,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def report_for(clusters: int, tmp: Path) -> Path:
    records = list(synthetic_log(12_000, 300, partitions=3, seed=11))
    rows = []
    for partition in range(3):
        mine = [r for r in records if r[3] == partition]
        rows.extend(audit_partitions(partition_table("c", mine)).to_pylist())
    sources = [ClusterSource(f"cluster-{i:03d}", f"id-{i}") for i in range(clusters)]
    audits = collect_reference(
        [dict(row, cluster=source.name) for source in sources for row in rows], sources
    )
    decide_reference(audits, [policy()], NOW, [timedelta(minutes=10), timedelta(hours=1), timedelta(days=1)])
    out = tmp / f"audit-{clusters}"
    write_outputs(out, audits, NOW, {"master": "test"}, policies=[policy()])
    return out / "report.html"


@pytest.mark.parametrize("clusters", [8, 100])
def test_report_renders_in_headless_chromium_without_script_errors(
    chromium: str, tmp_path: Path, clusters: int
) -> None:
    page = report_for(clusters, tmp_path)
    html = page.read_text()
    assert html.index("Fleet overview") < html.index("idle-histogram") < html.index("<details")
    assert html.count("<details class=cluster>") == clusters
    assert "<table><tr></tr></table>" not in html and "<table><tr><th>" in html
    shot = tmp_path / f"report-{clusters}.png"
    result = render(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1300,2200")
    assert shot.exists() and shot.stat().st_size > 20_000, result.stderr[-3000:]
    errors = [
        line
        for line in result.stderr.splitlines()
        if "CONSOLE" in line and re.search(r"error|uncaught", line, re.IGNORECASE)
    ]
    assert not errors, errors
    dom = render(chromium, page, tmp_path, "--dump-dom")
    assert 'data-rendered="ok"' in dom.stdout, dom.stderr[-3000:]

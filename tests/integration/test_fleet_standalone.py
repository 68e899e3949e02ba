"""The same audit on a real Spark standalone cluster (a master and two workers on loopback, from
pyspark's own jars: devstack/spark.sh) gives the same result as local[*].

Both runs are `groupwarden audit` processes on the same export of the real broker's log, so the
only difference is the engine: plan.json, summary.json (minus the engine block) and the Parquet
tables must be identical, and the standalone run must really have used the workers' executors.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from groupwarden.core.timestamps import to_rfc3339
from gwtest.cli import run_cli, write_policy
from gwtest.env import DEVSTACK_DIR, REPO
from gwtest.kafka import commit_offsets, consumer_in_group, create_topics, produce
from gwtest.ports import free_port


@pytest.fixture(scope="module")
def standalone_master() -> Iterator[str]:
    # Free ports, not fixed ones: a fixed port in the kernel's ephemeral range can be held by any
    # client connection of the suite at that moment (the master then fails to bind), and a
    # developer's own cluster (devstack/spark.sh's default port) keeps running.
    master_port, ui_port = free_port(), free_port()
    env = {
        **os.environ,
        "DEVSTACK_DIR": str(DEVSTACK_DIR / "spark-test"),
        "SPARK_MASTER_PORT": str(master_port),
        "SPARK_MASTER_UI_PORT": str(ui_port),
        "SPARK_START_TIMEOUT": "150",  # two JVMs starting on a machine busy with the rest of the suite
    }
    script = str(REPO / "devstack" / "spark.sh")
    started = subprocess.run([script, "up"], env=env, timeout=400, capture_output=True, text=True)
    assert started.returncode == 0, f"devstack/spark.sh up failed:\n{started.stdout}\n{started.stderr}"
    try:
        yield f"spark://127.0.0.1:{master_port}"
    finally:
        subprocess.run([script, "down"], check=True, env=env, timeout=60, capture_output=True)


def audit(out: Path, policy: Path, export: Path, master: str, now: str) -> dict[str, Any]:
    result = run_cli(
        "audit", "-f", str(policy), "--input", str(export), "--out", str(out), "--master", master,
        "--now", now, "--what-if", "1s,1h,7d", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def sorted_rows(directory: Path) -> list[dict[str, Any]]:
    return sorted(
        pq.read_table(directory).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str)
    )


def test_standalone_cluster_gives_the_same_audit_as_local(
    standalone_master: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"fleet-sa-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}-t"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 4)
    with consumer_in_group(kafka_bootstrap, f"{prefix}-classic", [topic], expected_messages=4):
        pass
    commit_offsets(kafka_bootstrap, f"{prefix}-simple", {(topic, 0): 1})
    export = tmp_path / "export"
    result = run_cli("export-offsets-log", "--bootstrap-servers", kafka_bootstrap, "--out", str(export))
    assert result.returncode == 0, result.stderr
    policy = write_policy(
        tmp_path / "policy.yaml",
        "standalone",
        kafka_bootstrap,
        [f"{prefix}-*"],
        rules={"emptyGroupRetention": "1s", "simpleGroupOffsetRetention": "1s"},
    )
    now = to_rfc3339(datetime.now(UTC) + timedelta(hours=1))

    local = audit(tmp_path / "local", policy, export, "local[2]", now)
    cluster = audit(tmp_path / "cluster", policy, export, standalone_master, now)

    assert cluster.pop("engine")["master"] == standalone_master
    assert local.pop("engine")["master"] == "local[2]"
    assert cluster == local
    assert (tmp_path / "cluster" / "plan.json").read_text() == (tmp_path / "local" / "plan.json").read_text()
    for table in ("groups", "offsets", "plan"):
        assert sorted_rows(tmp_path / "cluster" / table) == sorted_rows(tmp_path / "local" / table), table
    planned = json.loads((tmp_path / "local" / "plan.json").read_text())["actions"]
    assert {f"{prefix}-classic", f"{prefix}-simple"} <= {a["group"] for a in planned}
    # The work ran in executors the workers launched (not in the driver).
    work = DEVSTACK_DIR / "spark-test" / "spark"
    assert any(work.glob("work-*/app-*/*/stderr")), "no executor was launched on the workers"

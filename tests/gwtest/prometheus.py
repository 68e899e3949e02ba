"""A real Prometheus for the alerting and dashboard tests: Debian's package, fetched and started by
devstack/prometheus.sh (its own directory and a free loopback port per test module), driven
through its HTTP API."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from gwtest.env import REPO
from gwtest.ports import free_port
from gwtest.wait import wait_for

SCRIPT = REPO / "devstack" / "prometheus.sh"


def promtool() -> str:
    done = subprocess.run([str(SCRIPT), "promtool"], capture_output=True, text=True, timeout=600, check=True)
    return done.stdout.strip()


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d)", duration))


def shortened_rules(source: Path, longest_for: str) -> str:
    """The shipped rules with every `for:` longer than `longest_for` cut to it; expressions and
    everything else unchanged. (A test cannot wait the production `for:` durations.)"""
    document = yaml.safe_load(source.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule and _seconds(rule["for"]) > _seconds(longest_for):
                rule["for"] = longest_for
    return yaml.safe_dump(document, sort_keys=False)


class PrometheusServer:
    """One Prometheus scraping `targets` (job -> host:port) every `interval`, evaluating
    `rule_files` every `interval`."""

    def __init__(
        self, directory: Path, targets: Mapping[str, str], rule_files: Sequence[Path], interval: str = "1s"
    ) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {
                "scrape_interval": interval,
                "evaluation_interval": interval,
                "scrape_timeout": interval,
            },
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]}
                for job, target in targets.items()
            ],
        }
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> PrometheusServer:
        self._script("up", str(self.directory), str(self.config), str(self.port))
        wait_for(self._ready, timeout=60, what="prometheus to be ready")
        return self

    def stop(self) -> None:
        self._script("down", str(self.directory))

    def _script(self, *args: str) -> None:
        done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"devstack/prometheus.sh {' '.join(args)}: {done.stderr}"

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log(self) -> str:
        path = self.directory / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def api(self, path: str, **params: str | float) -> Any:
        """GET /api/v1/<path>; returns `data`, raises with Prometheus's error text otherwise."""
        query = urllib.parse.urlencode(params)
        request = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] in ("vector", "matrix") else []
        return result

    def query_range(self, expr: str, start: float, end: float, step: float = 1) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query_range", query=expr, start=start, end=end, step=step)[
            "result"
        ]
        return result

    def alerts(self, alertname: str, /, **labels: str) -> list[dict[str, Any]]:
        """Active (pending or firing) alerts called `alertname` whose labels include `labels`."""
        return [
            alert
            for alert in self.api("alerts")["alerts"]
            if alert["labels"].get("alertname") == alertname
            and all(alert["labels"].get(k) == v for k, v in labels.items())
        ]

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]


@contextmanager
def prometheus_server(
    directory: Path, targets: Mapping[str, str], rule_files: Sequence[Path], interval: str = "1s"
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(directory, targets, rule_files, interval).start()
    try:
        yield server
    finally:
        server.stop()


MONITORING_CRDS = ("monitoring.coreos.com_prometheusrules.yaml", "monitoring.coreos.com_servicemonitors.yaml")


def ensure_monitoring_crds(kubeconfig: str) -> None:
    """The Prometheus Operator's PrometheusRule and ServiceMonitor CRDs, from the release pinned in
    devstack/prometheus.sh (its Go module), applied to the API server: idempotent (server-side
    apply of the same objects) and safe when several modules do it at once (a create race is
    answered with a conflict, and the next attempt finds the object)."""
    from gwtest.env import tool_path

    directory = Path(
        subprocess.run(
            [str(SCRIPT), "crds"], capture_output=True, text=True, timeout=600, check=True
        ).stdout.strip()
    )
    files = [arg for name in MONITORING_CRDS for arg in ("-f", str(directory / name))]
    kubectl = [tool_path("kubectl"), "--kubeconfig", kubeconfig]
    apply = [
        *kubectl,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=groupwarden-tests",
        *files,
    ]
    errors: list[str] = []

    def applied() -> bool:
        done = subprocess.run(apply, capture_output=True, text=True, timeout=120)
        errors.append(done.stderr)
        return done.returncode == 0

    wait_for(applied, timeout=60, interval=1, what=f"the monitoring CRDs to apply: {errors[-1:]}")
    names = [
        f"crd/{name.removeprefix('monitoring.coreos.com_').removesuffix('.yaml')}.monitoring.coreos.com"
        for name in MONITORING_CRDS
    ]
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "--timeout=60s", *names],
        check=True,
        capture_output=True,
        timeout=90,
    )

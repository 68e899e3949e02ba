"""The devstack's node: the image built from the Dockerfile, the chart installed by helm, its pods."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiClient

from gwtest.env import DEVSTACK_DIR, REPO, tool_path
from gwtest.wait import wait_for

CHART = REPO / "deploy" / "helm" / "groupwarden"
DEVSTACK_VALUES = CHART / "ci" / "devstack-values.yaml"
IMAGE = "groupwarden:dev"


def node_env() -> dict[str, str]:
    return {**os.environ, "DEVSTACK_DIR": str(DEVSTACK_DIR)}


def build_image(tag: str = IMAGE) -> str:
    """`make image`: builds the Dockerfile into `tag` and loads it into the node's containerd
    (docker's layer cache makes an unchanged tree a few seconds)."""
    subprocess.run(
        [str(REPO / "devstack" / "node.sh"), "image", tag], check=True, env=node_env(), timeout=1200
    )
    return tag


@dataclass(frozen=True)
class Release:
    """An earlier release rebuilt from its recorded commit (deploy/releases.txt): its source tree,
    its chart and its image on the node."""

    version: str
    commit: str
    tree: Path
    image: str

    @property
    def chart(self) -> Path:
        return self.tree / "deploy" / "helm" / "groupwarden"

    @property
    def devstack_values(self) -> Path:
        return self.chart / "ci" / "devstack-values.yaml"


def previous_release() -> Release:
    """The release before this tree (`scripts/release.sh previous`): its tree extracted from git
    once (kept under the devstack's directory with its wheelhouse), its Dockerfile built into
    `groupwarden:release-VERSION` and loaded into the node (docker's cache: seconds when built)."""
    recorded = subprocess.run(
        [str(REPO / "scripts" / "release.sh"), "previous"], capture_output=True, text=True, check=True
    ).stdout.split()
    version, commit = recorded[0], recorded[1]
    tree = DEVSTACK_DIR / "releases" / f"{version}-{commit[:12]}"
    if not (tree / ".extracted").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True)
        if archive.returncode != 0:
            raise AssertionError(
                f"cannot rebuild {version}: this clone lacks its commit {commit} "
                f"(deploy/releases.txt): {archive.stderr.decode(errors='replace')}"
            )
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        (tree / ".extracted").touch()
    image = f"groupwarden:release-{version}"
    subprocess.run(
        [str(REPO / "devstack" / "node.sh"), "image", image, str(tree)],
        check=True,
        env={**node_env(), "IMAGE_REVISION": commit},
        timeout=1200,
    )
    return Release(version, commit, tree, image)


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The devstack's docker CLI against its dockerd (DOCKER_HOST from node.env)."""
    return subprocess.run(
        [tool_path("docker"), *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env=node_env(),
    )


def kubectl(
    kubeconfig: str, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [tool_path("kubectl"), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def helm(kubeconfig: str, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [tool_path("helm"), "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args)} failed ({result.returncode}): {result.stderr}{result.stdout}"
        )
    return result.stdout


# The Secret `installed_chart` creates with the suite's audit signing key (as docs/deploy.md says).
SIGNING_SECRET = "groupwarden-audit-signing"


def chart_values(namespace: str, *sets: str) -> list[str]:
    """The devstack values, the test's namespace as the only watched one, the tests' short
    retentions allowed (no minimum), and the audit signing key from `SIGNING_SECRET`."""
    args = ["-f", str(DEVSTACK_VALUES), "--set", f"watchNamespaces={{{namespace}}}", "--set", "minRetention="]
    args += ["--set", f"audit.signing.existingSecret={SIGNING_SECRET}"]
    for item in sets:
        args += ["--set", item]
    return args


def create_signing_secret(kubeconfig: str, namespace: str) -> None:
    """The audit signing key's Secret, as docs/deploy.md has an installation create it (the key:
    the suite's, tests/conftest.py)."""
    kubectl(kubeconfig, "-n", namespace, "delete", "secret", SIGNING_SECRET, "--ignore-not-found")
    kubectl(
        kubeconfig,
        "-n",
        namespace,
        "create",
        "secret",
        "generic",
        SIGNING_SECRET,
        f"--from-file=signing-key.pem={os.environ['GROUPWARDEN_AUDIT_SIGNING_KEY']}",
    )


@contextmanager
def installed_chart(kubeconfig: str, release: str, namespace: str, *sets: str) -> Iterator[str]:
    """`helm install --wait` (the Deployment is Available: its probes passed); uninstalled after.
    The audit signing key's Secret is created first, as an installation creates it."""
    create_signing_secret(kubeconfig, namespace)
    helm(
        kubeconfig,
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        *chart_values(namespace, *sets),
        "--wait",
        "--timeout",
        "240s",
    )
    try:
        yield release
    finally:
        helm(kubeconfig, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "120s")


def deployment_available(api: ApiClient, namespace: str, name: str) -> bool:
    deployment = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
    conditions = {c.type: c.status for c in (deployment.status.conditions or [])}
    return conditions.get("Available") == "True"


def running_pods(api: ApiClient, namespace: str, release: str) -> list[Any]:
    """The release's pods that run and are Ready (not terminating)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/instance={release}"
    )
    ready = []
    for pod in pods.items:
        if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
            continue
        if all(s.ready for s in pod.status.container_statuses or []):
            ready.append(pod)
    return sorted(ready, key=lambda p: p.metadata.name)


def wait_for_pods(
    api: ApiClient, namespace: str, release: str, count: int, timeout: float = 180
) -> list[Any]:
    pods: list[Any] = wait_for(
        lambda: (lambda ps: ps if len(ps) == count else None)(running_pods(api, namespace, release)),
        timeout=timeout,
        what=f"{count} ready pod(s) of {namespace}/{release}",
    )
    return pods


@contextmanager
def lease_history(
    api: ApiClient, namespace: str, lease: str = "groupwarden-leader"
) -> Iterator[list[tuple[float, str | None]]]:
    """Every holder the Lease had while the block ran, with the seconds since the block began,
    from a watch: a release that a poll every 200 ms could miss (the standby takes the Lease a few
    milliseconds later) is seen too. The first entry is the holder when the block began."""
    history: list[tuple[float, str | None]] = []
    started = time.monotonic()
    watcher = watch.Watch()
    ready = threading.Event()

    stopped = threading.Event()

    def follow() -> None:
        stream = watcher.stream(
            client.CoordinationV1Api(api).list_namespaced_lease,
            namespace,
            field_selector=f"metadata.name={lease}",
            timeout_seconds=600,
        )
        ready.set()
        try:
            for event in stream:
                holder = event["object"].spec.holder_identity or None
                if not history or history[-1][1] != holder:
                    history.append((round(time.monotonic() - started, 2), holder))
        except Exception as error:  # the API server ends the stream when the namespace goes
            if not stopped.is_set():
                history.append((round(time.monotonic() - started, 2), f"<watch failed: {error!r}>"))

    thread = threading.Thread(target=follow, name=f"lease-watch-{namespace}", daemon=True)
    thread.start()
    ready.wait(30)
    wait_for(lambda: history, timeout=30, what=f"the Lease {namespace}/{lease} in the watch")
    try:
        yield history
    finally:
        stopped.set()
        watcher.stop()


@contextmanager
def cordoned(api: ApiClient, node: str) -> Iterator[None]:
    """The node takes no new pods while the block runs (`kubectl cordon`), as in a drain."""
    nodes = client.CoreV1Api(api)
    nodes.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        yield
    finally:
        nodes.patch_node(node, {"spec": {"unschedulable": None}})


def pod_exec(kubeconfig: str, namespace: str, pod: str, command: Sequence[str]) -> str:
    """Runs `command` in the pod's operator container (API server -> kubelet -> containerd)."""
    result = kubectl(kubeconfig, "-n", namespace, "exec", pod, "-c", "operator", "--", *command, check=False)
    return result.stdout + result.stderr


def pod_logs(kubeconfig: str, namespace: str, pod: str) -> str:
    return kubectl(kubeconfig, "-n", namespace, "logs", pod, "-c", "operator").stdout


def image_config(tag: str) -> dict[str, Any]:
    inspected: list[dict[str, Any]] = json.loads(docker("image", "inspect", tag).stdout)
    return inspected[0]


def node_log_dir() -> Path:
    return DEVSTACK_DIR / "logs"


def printed_columns(api: ApiClient, namespace: str, plural_path: str, name: str) -> dict[str, str]:
    """What `kubectl get` prints for one object (the API server's Table, every column incl. wide)."""
    group_version, plural = plural_path.rsplit("/", 1)
    method, url, headers, body, _ = api.param_serialize(
        "GET",
        f"/apis/{group_version}/namespaces/{namespace}/{plural}/{name}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=body)
    response.read()
    table = json.loads(response.data)
    names = [c["name"] for c in table["columnDefinitions"]]
    return {n: str(v) for n, v in zip(names, table["rows"][0]["cells"], strict=True)}

"""E2E tier: a real Kubernetes API server (KUBECONFIG, else the devstack's) plus real Kafka."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from gwtest.env import setting
from gwtest.k8s import api_client, create_namespace, delete_namespace
from gwtest.operator import OperatorProcess, ensure_crd, running_operator
from gwtest.toxiproxy import ToxiproxyServer, toxiproxy_server


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return setting("KUBECONFIG", "k8s")


@pytest.fixture(scope="session")
def k8s(kubeconfig: str) -> Iterator[ApiClient]:
    api = api_client(kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="module")
def policy_crd(k8s: ApiClient) -> None:
    """The ConsumerGroupPolicy CRD from crds/ (modules that need it: `usefixtures("policy_crd")`)."""
    ensure_crd(k8s)


@pytest.fixture(scope="module")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyServer]:
    """A Toxiproxy server of the module's own, on a free loopback port."""
    with toxiproxy_server(tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log") as server:
        yield server


@pytest.fixture
def namespace(k8s: ApiClient, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A fresh namespace per test, removed afterwards."""
    name = unique_name("gw-e2e")
    create_namespace(k8s, name)
    yield name
    delete_namespace(k8s, name)


def _sasl_setting(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        from gwtest.env import devstack_env

        value = devstack_env("kafka").get(name)
    if not value:
        pytest.skip(reason=f"{name} is not set: no SASL_SSL listener to test against")
    return value


@pytest.fixture(scope="module")
def sasl() -> dict[str, str]:
    """What a user would put in the Secret for the SASL_SSL listener."""
    return {
        "bootstrap": _sasl_setting("GROUPWARDEN_KAFKA_SASL_BOOTSTRAP"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": _sasl_setting("GROUPWARDEN_KAFKA_SASL_MECHANISM"),
        "sasl.username": _sasl_setting("GROUPWARDEN_KAFKA_SASL_USERNAME"),
        "sasl.password": Path(_sasl_setting("GROUPWARDEN_KAFKA_SASL_PASSWORD_FILE")).read_text().strip(),
        # PEM *content* (a Secret holds data, not paths on the operator's disk).
        "ssl.ca.pem": Path(_sasl_setting("GROUPWARDEN_KAFKA_CA_FILE")).read_text(),
    }


@pytest.fixture
def operator_env() -> dict[str, str]:
    """Extra environment of the `operator` fixture's process (a module may override it)."""
    return {}


@pytest.fixture
def operator(
    kubeconfig: str, namespace: str, tmp_path: Path, operator_env: dict[str, str]
) -> Iterator[OperatorProcess]:
    """`groupwarden run` watching the test's namespace only; the tail of its log is printed after
    the test (pytest shows it when the test failed)."""
    with running_operator(kubeconfig, [namespace], tmp_path / "operator.log", env=operator_env) as process:
        yield process
    print("---- operator log (tail) ----\n" + "\n".join(process.logs().splitlines()[-80:]))

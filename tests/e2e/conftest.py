"""E2E tier: a real Kubernetes API server (KUBECONFIG, else the devstack's) plus real Kafka."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes.client import ApiClient

from gwtest.env import setting
from gwtest.k8s import api_client, create_namespace, delete_namespace


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return setting("KUBECONFIG", "k8s")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return setting("KAFKA_BOOTSTRAP_SERVERS", "kafka")


@pytest.fixture(scope="session")
def k8s(kubeconfig: str) -> Iterator[ApiClient]:
    api = api_client(kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(k8s: ApiClient, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A fresh namespace per test, removed afterwards."""
    name = unique_name("gw-e2e")
    create_namespace(k8s, name)
    yield name
    delete_namespace(k8s, name)

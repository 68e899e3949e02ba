"""The Kubernetes API client the operator's adapters share (kubeconfig or in-cluster)."""

from __future__ import annotations

import os

from kubernetes import client, config

FIELD_MANAGER = "groupwarden"
# Every API call is bounded: a hung API server must not hang a worker thread forever.
REQUEST_TIMEOUT = (5.0, 30.0)


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """`kubeconfig` (or $KUBECONFIG / ~/.kube/config), else the pod's service account."""
    if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        api: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return api
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)

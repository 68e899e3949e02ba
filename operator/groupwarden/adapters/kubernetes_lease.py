"""The leader Lease (coordination.k8s.io/v1) as a compare-and-swap store for `LeaseLeadership`."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from groupwarden.adapters.kubernetes_client import REQUEST_TIMEOUT
from groupwarden.core.lease import LeaseRecord


def _micro(moment: datetime | None) -> datetime | None:
    # Lease times are MicroTime: the API server parses exactly six fraction digits, and
    # datetime.isoformat() drops the fraction when it is zero.
    if moment is None:
        return None
    return moment if moment.microsecond else moment.replace(microsecond=1)


def _version(lease: client.V1Lease) -> str:
    return (lease.metadata.resource_version if lease.metadata else None) or ""


class KubernetesLeaseStore:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self._leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name

    def get(self) -> LeaseRecord | None:
        try:
            lease = self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        spec = lease.spec or client.V1LeaseSpec()
        return LeaseRecord(
            holder=spec.holder_identity or None,
            duration_seconds=spec.lease_duration_seconds or 15,
            transitions=spec.lease_transitions or 0,
            renew_time=spec.renew_time,
            acquire_time=spec.acquire_time,
            resource_version=_version(lease),
        )

    def _body(self, record: LeaseRecord) -> client.V1Lease:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record.resource_version:
            metadata["resourceVersion"] = record.resource_version
        body = {
            "metadata": metadata,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.duration_seconds,
                "leaseTransitions": record.transitions,
                "renewTime": _micro(record.renew_time),
                "acquireTime": _micro(record.acquire_time),
            },
        }
        lease = client.V1Lease.from_dict(body)
        assert lease is not None
        return lease

    def create(self, record: LeaseRecord) -> LeaseRecord | None:
        try:
            created = self._leases.create_namespaced_lease(
                self.namespace, self._body(record), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == 409:
                return None
            raise
        return replace(record, resource_version=_version(created))

    def update(self, record: LeaseRecord) -> LeaseRecord | None:
        try:
            updated = self._leases.replace_namespaced_lease(
                self.name, self.namespace, self._body(record), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status in (404, 409):
                return None
            raise
        return replace(record, resource_version=_version(updated))

"""What the operator knows about every ConsumerGroupPolicy it watches: the latest body, parsed.

kopf's watch events update the registry; workers read it. Overlap needs *all* policies of a cluster
at once (`decide_many`), which is why the registry exists instead of each handler seeing one body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import ValidationError

from groupwarden.core.policy import ConsumerGroupPolicy, PolicyError, PolicyRef, parse_policy
from groupwarden.core.status import PolicyStatus, Totals


class Change(Enum):
    NEW = "new"
    SPEC_CHANGED = "spec-changed"  # metadata.generation moved: restart the cycle
    UNCHANGED = "unchanged"  # status-only or metadata-only update


@dataclass(frozen=True)
class PolicyEntry:
    ref: PolicyRef
    uid: str
    generation: int
    resource_version: str
    # None when the spec is invalid (then `problems` says why).
    policy: ConsumerGroupPolicy | None
    problems: tuple[str, ...]
    # The status as last seen on the object (what a previous operator process wrote).
    status: PolicyStatus
    # spec.kafka.bootstrapServers as written (also for an invalid spec, when it is a string):
    # the Kafka cluster label of the policy's metrics.
    kafka_cluster: str = ""

    @property
    def valid(self) -> bool:
        return self.policy is not None

    @property
    def bootstrap_key(self) -> frozenset[str] | None:
        """The bootstrap servers as a set: equal sets surely mean the same cluster."""
        if self.policy is None:
            return None
        return frozenset(self.policy.spec.kafka.bootstrap_server_list)


def entry_from_body(body: Mapping[str, Any]) -> PolicyEntry:
    """Parses a ConsumerGroupPolicy object as read from the API server (never raises on bad specs)."""
    meta = body.get("metadata") or {}
    ref = PolicyRef(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    policy: ConsumerGroupPolicy | None
    try:
        policy = parse_policy(body)
        problems: tuple[str, ...] = ()
    except PolicyError as error:
        policy, problems = None, error.problems
    return PolicyEntry(
        ref=ref,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        policy=policy,
        problems=problems,
        status=_status(body.get("status")),
        kafka_cluster=_bootstrap_servers(body.get("spec")),
    )


def _bootstrap_servers(spec: object) -> str:
    kafka = spec.get("kafka") if isinstance(spec, Mapping) else None
    servers = kafka.get("bootstrapServers") if isinstance(kafka, Mapping) else None
    return servers.strip() if isinstance(servers, str) else ""


def _status(raw: object) -> PolicyStatus:
    # A status we cannot read (hand-edited, older schema) must not stop the policy: start afresh.
    if not isinstance(raw, Mapping):
        return PolicyStatus()
    try:
        return PolicyStatus.model_validate(_plain(raw))
    except ValidationError:
        totals = raw.get("totals")
        try:
            return PolicyStatus(totals=Totals.model_validate(_plain(totals)) if totals else None)
        except ValidationError:
            return PolicyStatus()


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


class PolicyRegistry:
    """Latest entry per policy. Mutated only from the event loop (kopf handlers)."""

    def __init__(self) -> None:
        self._entries: dict[PolicyRef, PolicyEntry] = {}

    def upsert(self, entry: PolicyEntry) -> Change:
        previous = self._entries.get(entry.ref)
        self._entries[entry.ref] = entry
        if previous is None or previous.uid != entry.uid:
            return Change.NEW
        if previous.generation != entry.generation:
            return Change.SPEC_CHANGED
        return Change.UNCHANGED

    def remove(self, ref: PolicyRef) -> PolicyEntry | None:
        return self._entries.pop(ref, None)

    def get(self, ref: PolicyRef) -> PolicyEntry | None:
        return self._entries.get(ref)

    def __iter__(self) -> Iterator[PolicyEntry]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def peers(
        self, entry: PolicyEntry, cluster_id: str, cluster_of: Mapping[frozenset[str], str]
    ) -> list[ConsumerGroupPolicy]:
        """`entry`'s policy first, then every other valid policy on the same Kafka cluster.

        Same cluster = the same bootstrap set, or a bootstrap set some connection has already
        reported `cluster_id` for (so a SASL listener and a plaintext listener of one cluster merge).
        Suspended and DryRun policies are included on purpose: they block deletions (overlap.py).
        """
        if entry.policy is None:
            raise ValueError(f"policy {entry.ref} is invalid")
        own = entry.bootstrap_key
        result = [entry.policy]
        for other in self._entries.values():
            if other.ref == entry.ref or other.policy is None:
                continue
            key = other.bootstrap_key
            if key == own or (key is not None and cluster_of.get(key) == cluster_id and cluster_id):
                result.append(other.policy)
        return result

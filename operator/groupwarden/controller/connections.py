"""Kafka clients shared per connection, and what the operator remembers per Kafka cluster.

- A connection is (bootstrap servers + credentials) = one `ConnectionSettings` value; policies with
  equal settings share one gateway. It is closed when no policy uses it any more, or after a
  whole-run failure (a fresh client after an outage beats a wedged one).
- A cluster is what the broker calls itself (`cluster_id`): policies reaching it through different
  listeners or users still share one lock and one `ClusterKnowledge`, so the offsets log is read
  once per cluster and never by two runs at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from groupwarden.cleanup.gateway import KafkaGateway, KafkaUnavailable
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.cleanup.steps import RunGuard
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.controller.registry import PolicyEntry
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.policy import PolicyRef

log = logging.getLogger(__name__)

GatewayFactory = Callable[[ConnectionSettings], KafkaGateway]


class Connection:
    """One pooled gateway. Its methods block: call them from a worker thread."""

    def __init__(self, settings: ConnectionSettings, factory: GatewayFactory) -> None:
        self.settings = settings
        self._factory = factory
        self._gateway: KafkaGateway | None = None
        self._cluster_id: str | None = None
        # Guards creating/closing the client; the per-cluster lock serialises its use.
        self._lock = threading.Lock()
        self.users: set[PolicyRef] = set()

    def gateway(self) -> KafkaGateway:
        with self._lock:
            if self._gateway is None:
                self._gateway = self._factory(self.settings)
            return self._gateway

    def cluster_id(self) -> str:
        """The broker's cluster id (asked once per client). Raises KafkaUnavailable."""
        gateway = self.gateway()
        with self._lock:
            if self._cluster_id is None:
                cluster_id = gateway.cluster_id()
                if not cluster_id:
                    # Very old brokers report none; the bootstrap list then names the cluster.
                    cluster_id = "bootstrap:" + ",".join(sorted(self.settings.bootstrap_servers))
                self._cluster_id = cluster_id
            return self._cluster_id

    def reset(self) -> None:
        """Closes the client; the next use makes a new one."""
        with self._lock:
            gateway, self._gateway, self._cluster_id = self._gateway, None, None
        if gateway is not None:
            try:
                gateway.close()
            except Exception as error:  # closing a broken client must not fail the run
                log.debug("closing a Kafka client failed: %s", type(error).__name__)

    @property
    def is_open(self) -> bool:
        return self._gateway is not None


class PassQueue(Protocol):
    """Where a cluster's runs wait for a pass (`cycle.ClusterCycle`): the pool keeps one per
    cluster without knowing how passes are scheduled."""

    async def submit(self, entry: PolicyEntry, connection: Connection, guard: RunGuard) -> object: ...


@dataclass
class ClusterState:
    """Per Kafka cluster: its cycle (passes, one at a time) and what the passes share: the
    offsets-log ledger (read once for all the cluster's policies, scoped to the groups they
    select) and the first-observed times (one pass covers every policy's groups)."""

    cluster_id: str
    memory: ClusterKnowledge
    cycle: PassQueue | None = None


class ConnectionPool:
    """Connections by settings, and which policy uses which. Used from the event loop only."""

    def __init__(self, factory: GatewayFactory, read_offsets_log: bool = True) -> None:
        self._factory = factory
        self._read_offsets_log = read_offsets_log
        self._connections: dict[ConnectionSettings, Connection] = {}
        self._by_policy: dict[PolicyRef, Connection] = {}
        self._clusters: dict[str, ClusterState] = {}
        # bootstrap set -> cluster id, learned from connections (for overlap peers).
        self.cluster_of: dict[frozenset[str], str] = {}

    def acquire(self, ref: PolicyRef, settings: ConnectionSettings) -> tuple[Connection, list[Connection]]:
        """The connection for `ref`, plus connections this made unused (the caller closes them)."""
        unused = []
        current = self._by_policy.get(ref)
        if current is not None and current.settings != settings:
            unused = self.release(ref)
            current = None
        if current is None:
            current = self._connections.get(settings)
            if current is None:
                current = Connection(settings, self._factory)
                self._connections[settings] = current
            current.users.add(ref)
            self._by_policy[ref] = current
        return current, unused

    def release(self, ref: PolicyRef) -> list[Connection]:
        """Forgets `ref`'s connection; returns it if no policy uses it any more (to be closed)."""
        connection = self._by_policy.pop(ref, None)
        if connection is None:
            return []
        connection.users.discard(ref)
        if connection.users:
            return []
        del self._connections[connection.settings]
        return [connection]

    def cluster(self, cluster_id: str, connection: Connection) -> ClusterState:
        self.cluster_of[frozenset(connection.settings.bootstrap_servers)] = cluster_id
        state = self._clusters.get(cluster_id)
        if state is None:
            memory = ClusterKnowledge(ObservedTimes(), read_offsets_log=self._read_offsets_log)
            state = ClusterState(cluster_id, memory)
            self._clusters[cluster_id] = state
        return state

    def forget_observations(self) -> None:
        """The Lease was lost: the first-observed clocks stop here. Kept until this replica leads
        again, they would hide what the leader of the meantime saw (a group active and Empty
        again): the next term starts them afresh, or continues that leader's from the observation
        store (controller/observation_keeper.py)."""
        for state in self._clusters.values():
            state.memory.observed = ObservedTimes()

    def all_connections(self) -> list[Connection]:
        return list(self._connections.values())

    def open_count(self) -> int:
        return sum(1 for c in self._connections.values() if c.is_open)


def cluster_id_or_raise(connection: Connection) -> str:
    """`connection.cluster_id()`, closing the client when the cluster is unreachable."""
    try:
        return connection.cluster_id()
    except KafkaUnavailable:
        connection.reset()
        raise

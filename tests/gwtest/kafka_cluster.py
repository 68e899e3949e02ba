"""A private 3-node KRaft cluster for failover tests (`KAFKA_NODES=3 devstack/kafka.sh`).

Each node is a combined broker+controller with its own DEVSTACK_DIR (under the test's directory),
node id and free ports; `__consumer_offsets` has 12 partitions with 3 replicas and min ISR 2, so
every node coordinates some groups and one node may be lost. The shared devstack broker is never
touched. Nodes are killed with SIGKILL (a lost machine: no controlled shutdown, the controller
fences the node after `broker.session.timeout.ms`) and started again on the same data.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from gwtest.env import REPO
from gwtest.kafka import consumer_in_group, produce
from gwtest.ports import free_port
from gwtest.proxied_kafka import purge_private_kafka
from gwtest.wait import wait_for

NODES = 3
OFFSETS_PARTITIONS = 12
OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(text: str) -> int:
    """`String.hashCode()` of Java (UTF-16 code units, 32-bit overflow)."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def offsets_partition(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The `__consumer_offsets` partition of a group (`Utils.abs(groupId.hashCode) % partitions`):
    its leader is the group's coordinator."""
    hashed = java_string_hash(group_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partitions


@dataclass
class KafkaCluster:
    directory: Path
    env: dict[str, str]
    nodes: dict[int, str]  # node id -> its PLAINTEXT listener

    @property
    def bootstrap(self) -> str:
        return ",".join(self.nodes.values())

    def _script(self, *args: str, timeout: float = 240) -> None:
        done = subprocess.run(
            [str(REPO / "devstack" / "kafka.sh"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafka.sh {' '.join(args)} failed: {done.stderr[-3000:]}")

    def up(self, *nodes: int) -> None:
        """Starts the given nodes (all by default) and waits until each serves requests."""
        self._script("up", *map(str, nodes))

    def kill(self, node: int) -> None:
        """SIGKILL (returns once the process is gone)."""
        self._script("kill", str(node))

    def stop(self, node: int) -> None:
        """SIGTERM: a controlled shutdown, as a rolling restart does (leaderships move first)."""
        self._script("stop", str(node))

    def alive(self) -> dict[int, str]:
        """The nodes whose PLAINTEXT port accepts connections."""
        found = {}
        for node, address in self.nodes.items():
            host, port = address.rsplit(":", 1)
            with socket.socket() as sock:
                sock.settimeout(0.5)
                if sock.connect_ex((host, int(port))) == 0:
                    found[node] = address
        return found

    def leaders(self, topic: str, timeout: float = 10.0) -> dict[int, int]:
        """Partition -> leader node id (-1 while it has none), as a live node's metadata says."""
        client = AdminClient({"bootstrap.servers": ",".join(self.alive().values()) or self.bootstrap})
        metadata = client.list_topics(topic, timeout=timeout)
        found = metadata.topics[topic]
        if found.error is not None:
            raise RuntimeError(f"{topic}: {found.error}")
        return {p.id: p.leader for p in found.partitions.values()}

    def preferred_leaders(self, topic: str, timeout: float = 10.0) -> dict[int, int]:
        """Partition -> its preferred leader (the first replica)."""
        client = AdminClient({"bootstrap.servers": ",".join(self.alive().values()) or self.bootstrap})
        found = client.list_topics(topic, timeout=timeout).topics[topic]
        return {p.id: p.replicas[0] for p in found.partitions.values()}

    def elect_preferred_leaders(self) -> None:
        """Moves every partition back to its preferred leader (what `auto.leader.rebalance.enable`
        does after `leader.imbalance.check.interval.seconds`, 5 min by default) and returns when done."""
        node, address = next(iter(self.alive().items()))
        tool = self.directory / "kafka-cluster" / f"node-{node}" / "bin" / "kafka-run-class"
        election = ["--election-type", "PREFERRED", "--all-topic-partitions"]
        subprocess.run(
            [
                str(tool),
                "org.apache.kafka.tools.LeaderElectionCommand",
                "--bootstrap-server",
                address,
                *election,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,  # "no election needed" for some partitions exits non-zero
        )

    def coordinator_of(self, group_id: str) -> int:
        """The node coordinating `group_id` (the leader of its `__consumer_offsets` partition)."""
        return self.leaders(OFFSETS_TOPIC)[offsets_partition(group_id)]

    def wait_leaders_on(self, nodes: set[int], topic: str = OFFSETS_TOPIC, timeout: float = 60.0) -> None:
        """Until every partition of `topic` is led by one of `nodes` (after a kill: the controller
        fenced the dead node and moved its leaderships)."""

        def moved() -> bool:
            try:
                return all(leader in nodes for leader in self.leaders(topic, timeout=5).values())
            except Exception:
                return False

        wait_for(moved, timeout=timeout, what=f"every {topic} partition led by nodes {sorted(nodes)}")

    def in_sync(self, topic: str = OFFSETS_TOPIC) -> bool:
        """Every partition of `topic` has all its replicas in sync (what a rolling restart waits
        for before the next node: no under-replicated partition)."""
        client = AdminClient({"bootstrap.servers": ",".join(self.alive().values()) or self.bootstrap})
        try:
            found = client.list_topics(topic, timeout=5).topics[topic]
        except Exception:
            return False
        partitions = found.partitions.values()
        return bool(partitions) and all(len(p.isrs) == len(p.replicas) and p.leader > 0 for p in partitions)

    def restored(self) -> KafkaCluster:
        """Every node up, in sync and leading its preferred partitions: what a test that follows
        one which killed nodes starts from."""
        if len(self.alive()) < len(self.nodes):
            self.up()
        wait_for(self.in_sync, timeout=120, what="every __consumer_offsets replica in sync")
        if self.leaders(OFFSETS_TOPIC) != self.preferred_leaders(OFFSETS_TOPIC):
            self.elect_preferred_leaders()  # a JVM tool: seconds, so only when needed
        self.wait_leaders_on(set(self.nodes))
        return self


def replicated_topic(cluster: KafkaCluster, name: str, messages: int = 10) -> str:
    """A topic with 2 partitions, each on all three nodes (a node may be lost), and `messages`
    records."""
    client = AdminClient({"bootstrap.servers": ",".join(cluster.alive().values())})
    for future in client.create_topics([NewTopic(name, num_partitions=2, replication_factor=3)]).values():
        future.result(timeout=60)
    produce(",".join(cluster.alive().values()), name, messages)
    return name


def dead_groups(bootstrap: str, topic: str, groups: list[tuple[str, str]]) -> None:
    """Each (group, protocol) joined by a real consumer that reads, commits and leaves: Empty
    groups with committed offsets (made side by side: a join takes a second or two)."""

    def make(group: str, protocol: str) -> None:
        with consumer_in_group(bootstrap, group, [topic], protocol=protocol, expected_messages=1):
            pass

    with ThreadPoolExecutor(len(groups)) as pool:
        for done in [pool.submit(make, g, p) for g, p in groups]:
            done.result()


def group_ids_coordinated_by(node: int, cluster: KafkaCluster, prefix: str, count: int) -> list[str]:
    """`count` group ids starting with `prefix` whose coordinator is `node` now."""
    leaders = cluster.leaders(OFFSETS_TOPIC)
    found: list[str] = []
    i = 0
    while len(found) < count:
        candidate = f"{prefix}-{i}"
        if leaders[offsets_partition(candidate)] == node:
            found.append(candidate)
        i += 1
    return found


# Session timeout of the failover tests' active members (classic: the client's; KIP-848: the
# cluster's). A member is not dropped while its coordinator moves and its client is starved.
MEMBER_SESSION_MS = 45_000


@contextmanager
def kafka_cluster(directory: Path) -> Iterator[KafkaCluster]:
    """A started 3-node cluster whose `__consumer_offsets` exists (created by a first coordinator
    lookup, so tests see its leaders); stopped and purged afterwards."""
    ports = [(free_port(), free_port(), free_port()) for _ in range(NODES)]
    env = {
        **os.environ,
        "KAFKA_NODES": str(NODES),
        "DEVSTACK_DIR": str(directory),
        "KAFKA_NODE_PORTS": " ".join(str(p[0]) for p in ports),
        "KAFKA_NODE_CONTROLLER_PORTS": " ".join(str(p[1]) for p in ports),
        "KAFKA_NODE_SASL_PORTS": " ".join(str(p[2]) for p in ports),
        "KAFKA_OFFSETS_PARTITIONS": str(OFFSETS_PARTITIONS),
        # KIP-848 members outlive a coordinator move on a loaded machine (classic ones: MEMBER_SESSION_MS)
        "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": str(MEMBER_SESSION_MS),
        "KAFKA_HEAP_OPTS": "-Xms128m -Xmx384m",
        # C1 only: a broker JVM starts in less CPU (three start at once on a loaded machine)
        "KAFKA_JVM_OPTS": "-XX:TieredStopAtLevel=1",
    }
    cluster = KafkaCluster(directory, env, {i + 1: f"127.0.0.1:{p[0]}" for i, p in enumerate(ports)})
    try:
        cluster.up()
        _create_offsets_topic(cluster)
        yield cluster
    finally:
        purge_private_kafka(env)


def _create_offsets_topic(cluster: KafkaCluster) -> None:
    # A coordinator lookup creates __consumer_offsets; committing needs nothing else.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cluster-warmup"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                consumer.committed([], timeout=5)
                leaders = cluster.leaders(OFFSETS_TOPIC)
                if len(leaders) == OFFSETS_PARTITIONS and all(v > 0 for v in leaders.values()):
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)
    finally:
        consumer.close()

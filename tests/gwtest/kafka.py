"""Real Kafka clients for tests: topics, producers and consumers that create real groups."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gwtest.env import tool_path
from gwtest.wait import wait_for


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topics(
    bootstrap: str, topics: Sequence[str], partitions: int = 2, config: Mapping[str, str] | None = None
) -> None:
    """`config`: topic configs (e.g. `max.message.bytes`)."""
    client = admin(bootstrap)  # keep a reference: the futures die with the client
    new = [
        NewTopic(t, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
        for t in topics
    ]
    futures = client.create_topics(new, operation_timeout=30)
    for future in futures.values():
        future.result(timeout=60)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode(), partition=i % partitions)
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not deliver all messages to {topic}")


@dataclass
class RunningConsumer:
    """A consumer that has joined its group; it stays a member until closed."""

    consumer: Consumer
    group: str
    topics: list[str]
    consumed: int = 0
    assigned: list[tuple[str, int]] = field(default_factory=list)

    def poll_some(self, seconds: float = 1.0) -> int:
        deadline = time.monotonic() + seconds
        count = 0
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                count += 1
        self.consumed += count
        return count

    def commit(self) -> None:
        """Commits what was consumed; nothing new to commit is not an error."""
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def close(self) -> None:
        self.consumer.close()


def consumer_config(
    bootstrap: str,
    group: str,
    protocol: str = "classic",
    *,
    session_timeout_ms: int = 10_000,
    heartbeat_interval_ms: int = 1_000,
) -> dict[str, Any]:
    """A group member's settings: manual commits from the earliest offset, classic or KIP-848.

    The session timeout and heartbeat apply to classic members (a KIP-848 member's come from the
    broker). The race campaign (bench/race_campaign.py) runs with 45 s: a member starved by a loaded
    machine must not be dropped by the broker while its client still believes it is in.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config["session.timeout.ms"] = session_timeout_ms
        config["heartbeat.interval.ms"] = heartbeat_interval_ms
    # A member a test keeps in its group (e.g. a module fixture's active consumer) is not polled
    # while the test runs; the default 5 min would drop it from a module that runs longer on a
    # loaded machine, and its group would turn Empty under the test.
    config["max.poll.interval.ms"] = 3_600_000
    return config


@contextmanager
def consumer_in_group(
    bootstrap: str,
    group: str,
    topics: Sequence[str],
    *,
    protocol: str = "classic",
    expected_messages: int = 0,
    timeout: float = 60.0,
    session_timeout_ms: int = 10_000,
) -> Iterator[RunningConsumer]:
    """Joins `group` (classic or KIP-848 `consumer` protocol), consumes and commits, stays a member."""
    consumer = Consumer(consumer_config(bootstrap, group, protocol, session_timeout_ms=session_timeout_ms))
    running = RunningConsumer(consumer=consumer, group=group, topics=list(topics))
    try:
        consumer.subscribe(list(topics))

        def joined() -> bool:
            running.poll_some(0.3)
            running.assigned = [(tp.topic, tp.partition) for tp in consumer.assignment()]
            return bool(running.assigned) and running.consumed >= expected_messages

        wait_for(joined, timeout=timeout, what=f"consumer to join {group} and read {expected_messages}")
        running.commit()
        yield running
    finally:
        consumer.close()


def topic_with_messages(bootstrap: str, name: str, messages: int = 10) -> str:
    """A new topic (2 partitions) with `messages` records; returns its name."""
    create_topics(bootstrap, [name])
    produce(bootstrap, name, messages)
    return name


def empty_group(
    bootstrap: str, group: str, topics: list[str], messages: int = 10, protocol: str = "classic"
) -> None:
    """A consumer group that consumed `messages` records, committed and left: Empty, with offsets."""
    with consumer_in_group(bootstrap, group, topics, protocol=protocol, expected_messages=messages):
        pass


_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def commit_offsets(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commits offsets without joining the group: this is how standalone (simple) groups are made."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                consumer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
                )
                return
            except KafkaException as exc:
                # A broker that just started is still loading its groups (COORDINATOR_LOAD_IN_PROGRESS):
                # ask again, as Kafka's own clients do with a retriable error.
                error = exc.args[0]
                retriable = error.retriable() or error.code() in _COORDINATOR_MOVING
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def kafka_tool(name: str, *args: str, timeout: float = 120) -> str:
    """Runs one of Kafka's own CLI tools (the oracle) and returns its stdout."""
    result = subprocess.run(
        [tool_path(name), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{name} {' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result.stdout


def describe_offsets_with_tool(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """Committed offsets per partition as `kafka-consumer-groups --describe` reports them."""
    out = kafka_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    return offsets_from_tool_table(out, "CURRENT-OFFSET")


# How Kafka's group tools say that a group named with `--describe --group` does not exist (the
# consumer and share tools print it and exit 0; the streams tool exits 1).
_GROUP_NOT_FOUND = ("GroupIdNotFoundException", "does not exist")


def state_row_from_tool_table(out: str, group: str) -> dict[str, str] | None:
    """Column -> value of `group`'s row in a Kafka group tool's `--describe --state` table (the
    `GROUP ... STATE ...` header; "COORDINATOR (ID)" and its "host:port (id)" split alike)."""
    header: list[str] | None = None
    for line in out.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] == "GROUP":
            header = cols
        elif header is not None and cols[0] == group and len(cols) == len(header):
            return dict(zip(header, cols, strict=True))
    return None


def describe_state_with_tool(
    run: Callable[..., str], bootstrap: str, group: str, *extra: str
) -> dict[str, str] | None:
    """One group's `--describe --group G --state` row through a Kafka group tool (`run` takes the
    tool's arguments), None when the group does not exist (or is Dead). Asked by name: the cost and
    the answer never depend on how many groups the shared broker holds, which `--list` would."""
    try:
        out = run("--bootstrap-server", bootstrap, "--describe", "--group", group, "--state", *extra)
    except RuntimeError as exc:
        if any(marker in str(exc) for marker in _GROUP_NOT_FOUND):
            return None
        raise
    row = state_row_from_tool_table(out, group)
    if row is None:
        if any(marker in out for marker in _GROUP_NOT_FOUND):
            return None
        raise AssertionError(f"no state row for {group} in the tool's output: {out!r}")
    return None if row["STATE"] == "Dead" else row


def consumer_group_with_tool(bootstrap: str, group: str) -> tuple[str, str] | None:
    """(type, state) of one group as `kafka-consumer-groups --describe --group G --state --verbose`
    reports it, None when it does not exist. The tool prints a group's type only with `--list`
    (every group of the broker); by name, its GROUP-EPOCH column tells the type: the tool fills it
    from ConsumerGroupDescribe, which answers for a `consumer` (KIP-848) group only, and prints "-"
    for a classic one (described with DescribeGroups)."""

    def run(*args: str) -> str:
        return kafka_tool("kafka-consumer-groups", *args)

    row = describe_state_with_tool(run, bootstrap, group, "--verbose")
    if row is None:
        return None
    epoch = row["GROUP-EPOCH"]
    if epoch != "-" and not epoch.isdigit():
        raise AssertionError(f"unexpected GROUP-EPOCH {epoch!r} for {group}: {row}")
    return ("consumer" if epoch.isdigit() else "classic"), row["STATE"]


def consumer_group_state_with_tool(bootstrap: str, group: str) -> str | None:
    """One group's state as `kafka-consumer-groups --describe --group G --state` reports it."""

    def run(*args: str) -> str:
        return kafka_tool("kafka-consumer-groups", *args)

    row = describe_state_with_tool(run, bootstrap, group)
    return None if row is None else row["STATE"]


def offsets_from_tool_table(out: str, column: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the number in `column` of a Kafka group tool's table (rows under each
    `GROUP ...` header line; "-" means none)."""
    offsets: dict[tuple[str, int], int] = {}
    header: list[str] | None = None
    for line in out.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] == "GROUP":
            header = cols
            continue
        if header is None or len(cols) < len(header):
            continue
        row = dict(zip(header, cols, strict=False))
        if row.get(column, "-") not in ("-", ""):
            offsets[(row["TOPIC"], int(row["PARTITION"]))] = int(row[column])
    return offsets


def first_offsets(
    bootstrap: str, group: str, topic: str, protocol: str, partitions: int = 2
) -> dict[int, int]:
    """Joins `group` as a real consumer and returns the offset of the first message it gets per
    partition (then leaves without committing)."""
    consumer = Consumer(consumer_config(bootstrap, group, protocol))
    firsts: dict[int, int] = {}
    try:
        consumer.subscribe([topic])

        def all_seen() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                firsts.setdefault(msg.partition(), msg.offset())
            return len(firsts) == partitions

        wait_for(all_seen, timeout=60, what=f"a message from every partition of {topic} in {group}")
    finally:
        consumer.close()
    return firsts


def set_scram_password(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    """Creates the SCRAM user or changes its password (AlterUserScramCredentials, KIP-554), the
    way an operator rotates a credential on the broker."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    kind = ScramMechanism[mechanism.replace("-", "_")]
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, 4096), password.encode())
    client = admin(bootstrap)  # keep a reference: the futures die with the client
    futures = client.alter_user_scram_credentials([upsert], request_timeout=30)
    for future in futures.values():
        future.result(60)

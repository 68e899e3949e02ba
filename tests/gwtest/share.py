"""Share groups (KIP-932) for tests: a real share consumer (confluent-kafka's `ShareConsumer`;
librdkafka 2.16 ships it as a preview) and Kafka's own `kafka-share-groups` as the oracle."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import ShareConsumer

from gwtest.env import tool_path
from gwtest.kafka import describe_state_with_tool, offsets_from_tool_table
from gwtest.wait import wait_for

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


def share_consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    # librdkafka logs one "Preview" warning per share consumer: keep test output quiet.
    return {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3}


@dataclass
class RunningShareConsumer:
    """A share consumer that joined its group; a member until closed. Records are acknowledged
    implicitly (on the next poll or on close), as a default share consumer does."""

    consumer: ShareConsumer
    group: str
    received: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, offset)

    def poll_some(self, seconds: float = 0.3) -> int:
        batch = self.consumer.poll(seconds)
        count = 0
        for message in batch if batch is not None else ():
            if message.error() is None:
                self.received.append((message.topic(), message.partition(), message.offset()))
                count += 1
        return count


@contextmanager
def share_consumer_in_group(
    bootstrap: str, group: str, topics: Sequence[str], *, timeout: float = 60.0
) -> Iterator[RunningShareConsumer]:
    """Joins the share group `group` and waits until the broker shows it as a Stable member."""
    consumer = ShareConsumer(share_consumer_config(bootstrap, group))
    running = RunningShareConsumer(consumer, group)
    try:
        consumer.subscribe(list(topics))

        def stable() -> bool:
            running.poll_some(0.2)
            return share_group_state(bootstrap, group) == ("Stable", 1)

        wait_for(stable, timeout=timeout, what=f"share consumer to join {group}")
        yield running
    finally:
        consumer.close()


def share_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """Start offsets through groupwarden's gateway (cheap, for waiting; the tool is the oracle)."""
    from groupwarden.adapters.kafka_connect import open_gateway

    with open_gateway(bootstrap) as gateway:
        answer = gateway.fetch_share_offsets([group])[group]
    return {(tp.topic, tp.partition): info.offset for tp, info in answer.offsets.items()}


def wait_initialised(running: RunningShareConsumer, bootstrap: str, topics: Sequence[str]) -> None:
    """Until the broker shows the group's share partitions of `topics` (2 each) initialised: that
    happens lazily, once a fetch finds records after the member got its assignment (a share group
    starts at the log end, share.auto.offset.reset=latest), so one record per partition is
    produced per attempt. Those records are consumed like any other."""
    from gwtest.kafka import produce

    wanted = {(t, p) for t in topics for p in (0, 1)}

    def initialised() -> bool:
        for topic in topics:
            produce(bootstrap, topic, 2)
        running.poll_some(0.5)
        return wanted <= share_offsets(bootstrap, running.group).keys()

    wait_for(initialised, timeout=60, what=f"share partitions of {running.group} initialised")


def share_group_state(bootstrap: str, group: str) -> tuple[str, int] | None:
    """(state, members) through groupwarden's own gateway (cheap; the tool is the oracle below),
    None when the group does not exist. Described by name (ShareGroupDescribe): never a ListGroups
    of the whole shared broker, whose cost grows with every group it holds."""
    from groupwarden.adapters.kafka_connect import open_gateway
    from groupwarden.cleanup.gateway import ListedGroup
    from groupwarden.core.snapshot import GroupState

    with open_gateway(bootstrap) as gateway:
        described = gateway.describe_groups([ListedGroup(group, "share", "share", GroupState.UNKNOWN)])[group]
        if described.state is GroupState.DEAD:  # GROUP_ID_NOT_FOUND
            return None
        if described.error is not None:
            raise AssertionError(f"ShareGroupDescribe of {group} failed: {described.error}")
        return described.state.value, described.member_count


def kafka_tool_or_class(name: str, main_class: str, *args: str, timeout: float = 120) -> str:
    """A Kafka tool by its devstack wrapper; a devstack started before the wrapper existed runs the
    same class through `kafka-run-class`."""
    wrapper = tool_path(name)
    if Path(wrapper).exists() or shutil.which(wrapper):
        command = [wrapper, *args]
    else:
        command = [tool_path("kafka-run-class"), main_class, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{name} {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def share_groups_tool(*args: str, timeout: float = 120) -> str:
    """`kafka-share-groups` (the oracle)."""
    return kafka_tool_or_class("kafka-share-groups", SHARE_GROUP_COMMAND, *args, timeout=timeout)


def share_offsets_with_tool(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """Start offsets per partition as `kafka-share-groups --describe --offsets` shows them
    ({} for a group that does not exist or has no initialised partitions)."""
    try:
        out = share_groups_tool("--bootstrap-server", bootstrap, "--describe", "--offsets", "--group", group)
    except RuntimeError as exc:
        if "does not exist" in str(exc):
            return {}
        raise
    return offsets_from_tool_table(out, "START-OFFSET")


def share_group_states_with_tool(bootstrap: str, *groups: str) -> dict[str, str]:
    """Group -> state of those of `groups` that exist, as `kafka-share-groups --describe --group G
    --state` shows them: one group at a time (the tool fails as a whole when one named group does
    not exist), never `--list`, which lists every share group of the shared broker."""
    states: dict[str, str] = {}
    for group in groups:
        row = describe_state_with_tool(share_groups_tool, bootstrap, group)
        if row is not None:
            states[group] = row["STATE"]
    return states


def first_share_offsets(bootstrap: str, group: str, topic: str, partitions: int = 2) -> dict[int, int]:
    """Joins share group `group` and returns the offset of the first record it gets per partition,
    then leaves releasing what it got (nothing acknowledged)."""
    from confluent_kafka import AcknowledgeType

    config = share_consumer_config(bootstrap, group) | {"share.acknowledgement.mode": "explicit"}
    consumer = ShareConsumer(config)
    firsts: dict[int, int] = {}
    try:
        consumer.subscribe([topic])

        def all_seen() -> bool:
            batch = consumer.poll(0.3)
            for message in batch if batch is not None else ():
                if message.error() is None:
                    firsts[message.partition()] = min(
                        firsts.get(message.partition(), 1 << 62), message.offset()
                    )
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
            return len(firsts) == partitions

        wait_for(all_seen, timeout=60, what=f"a record from every partition of {topic} in {group}")
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            consumer.close()
    return firsts

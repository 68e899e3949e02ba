"""Streams groups (KIP-1071) for tests: Kafka's own WordCountDemo (kafka-streams-examples, fetched
into the devstack cache by devstack/kafka.sh) run with `group.protocol=streams`, and
`kafka-streams-groups` as the oracle.

WordCountDemo reads the fixed topic `streams-plaintext-input` and writes word counts (Long values)
to `streams-wordcount-output`; tests share those topics and use words of their own.
"""

from __future__ import annotations

import os
import struct
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from gwtest.kafka import admin, create_topics, describe_state_with_tool
from gwtest.wait import wait_for

INPUT_TOPIC = "streams-plaintext-input"
OUTPUT_TOPIC = "streams-wordcount-output"
WORDCOUNT = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"


def streams_libs() -> Path:
    """GROUPWARDEN_KAFKA_STREAMS_LIBS (kafka.env), else `streams-libs` beside the broker's libs."""
    explicit = os.environ.get("GROUPWARDEN_KAFKA_STREAMS_LIBS")
    if explicit:
        return Path(explicit)
    libs = os.environ.get("GROUPWARDEN_KAFKA_LIBS")
    if libs:
        return Path(libs).with_name("streams-libs")
    version = os.environ.get("KAFKA_VERSION", "4.3.1")
    return Path.home() / ".cache" / "groupwarden" / f"kafka-{version}" / "streams-libs"


def ensure_wordcount_topics(bootstrap: str) -> None:
    existing = admin(bootstrap).list_topics(timeout=30).topics
    missing = [t for t in (INPUT_TOPIC, OUTPUT_TOPIC) if t not in existing]
    if missing:
        try:
            create_topics(bootstrap, missing)
        except Exception:  # another test created it meanwhile
            if not all(t in admin(bootstrap).list_topics(timeout=30).topics for t in missing):
                raise


def streams_state(bootstrap: str, app_id: str) -> tuple[str, int] | None:
    """(state, members) of a streams group through groupwarden's own gateway, None when it does not
    exist. Described by name (StreamsGroupDescribe): never a ListGroups of the whole shared broker."""
    from groupwarden.adapters.kafka_connect import open_gateway
    from groupwarden.cleanup.gateway import ListedGroup
    from groupwarden.core.snapshot import GroupState

    with open_gateway(bootstrap) as gateway:
        asked = ListedGroup(app_id, "streams", "streams", GroupState.UNKNOWN)
        described = gateway.describe_groups([asked])[app_id]
        if described.state is GroupState.DEAD:  # GROUP_ID_NOT_FOUND
            return None
        if described.error is not None:
            raise AssertionError(f"StreamsGroupDescribe of {app_id} failed: {described.error}")
        return described.state.value, described.member_count


@contextmanager
def wordcount_app(bootstrap: str, app_id: str, state_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A running WordCountDemo whose streams group is Stable; on exit it is closed (SIGTERM: the
    app's shutdown hook closes Kafka Streams, which leaves the group)."""
    libs = streams_libs()
    assert (libs / ".complete").exists(), (
        f"no Kafka Streams libs in {libs}: run devstack/kafka.sh streams-libs"
    )
    ensure_wordcount_topics(bootstrap)
    props = state_dir / f"{app_id}.properties"
    props.write_text(
        "\n".join(
            [
                f"application.id={app_id}",
                f"bootstrap.servers={bootstrap}",
                "group.protocol=streams",
                f"state.dir={state_dir / 'state'}",
                "commit.interval.ms=200",
                "cache.max.bytes.buffering=0",
            ]
        )
        + "\n"
    )
    log = (state_dir / f"{app_id}.log").open("wb")
    process = subprocess.Popen(
        [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{libs}/*",
            WORDCOUNT,
            str(props),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: process.poll() is None and streams_state(bootstrap, app_id) == ("Stable", 1),
            timeout=90,
            what=f"streams app {app_id} Stable",
        )
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def produce_lines(bootstrap: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        producer.produce(INPUT_TOPIC, value=line.encode(), partition=i % 2)
    if producer.flush(30) != 0:
        raise RuntimeError("could not deliver the input lines")


def unique_word() -> str:
    return f"w{uuid.uuid4().hex[:10]}"


def latest_count(bootstrap: str, word: str) -> int | None:
    """The last count WordCountDemo wrote for `word` (None if none yet)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"gw-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    found: int | None = None
    try:
        metadata = consumer.list_topics(OUTPUT_TOPIC, timeout=30).topics[OUTPUT_TOPIC]
        ends = {}
        for p in metadata.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(OUTPUT_TOPIC, p), timeout=30)
            ends[p] = high
        consumer.assign([TopicPartition(OUTPUT_TOPIC, p, 0) for p in ends])
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < len(ends):
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            if message.key() == word.encode() and message.value() is not None:
                found = struct.unpack(">q", message.value())[0]
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
    finally:
        consumer.close()
    return found


def streams_group_states_with_tool(bootstrap: str, *groups: str) -> dict[str, str]:
    """Group -> state of those of `groups` that exist, as `kafka-streams-groups --describe --group G
    --state` shows them: one group at a time, never `--list` (every streams group of the broker)."""
    from gwtest.share import kafka_tool_or_class

    def run(*args: str) -> str:
        return kafka_tool_or_class(
            "kafka-streams-groups", "org.apache.kafka.tools.streams.StreamsGroupCommand", *args
        )

    states: dict[str, str] = {}
    for group in groups:
        row = describe_state_with_tool(run, bootstrap, group)
        if row is not None:
            states[group] = row["STATE"]
    return states

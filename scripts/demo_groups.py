"""Creates the demo's consumer groups with real clients, and keeps the live service running.

demo_groups.py create RUN_ID   # stale CI groups, a service that dropped a topic, a standalone consumer,
                               # a forgotten share group and an abandoned Kafka Streams app
demo_groups.py serve RUN_ID    # the live service: stays in its group until killed
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = os.environ["KAFKA_BOOTSTRAP_SERVERS"]


def topics(run: str) -> dict[str, str]:
    return {name: f"demo-{name}-{run}" for name in ("orders", "payments", "audit")}


def join_and_commit(group: str, subscribe: list[str], protocol: str, stay: bool = False) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(subscribe)
    deadline = time.monotonic() + 60
    seen = 0
    while time.monotonic() < deadline and (not consumer.assignment() or seen < 4):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    if not stay:
        consumer.close()
    return consumer


def forgotten_share_group(group: str, topic: str) -> None:
    """A queue worker (KIP-932 share consumer) that read some records and was never started again:
    the broker never expires its share group."""
    consumer = ShareConsumer({"bootstrap.servers": BOOTSTRAP, "group.id": group, "log_level": 3})
    consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    deadline, seen = time.monotonic() + 60, 0
    while time.monotonic() < deadline and seen < 4:
        for i in range(2):  # a share group starts at the log end: records after it joined
            producer.produce(topic, value=b"job", partition=i)
        producer.flush(10)
        batch = consumer.poll(0.5)
        seen += len(batch) if batch is not None else 0
    consumer.close()


def abandoned_streams_app(app_id: str) -> None:
    """Kafka's WordCountDemo (group.protocol=streams) run until its streams group is Stable, then
    stopped for good: an abandoned app's group."""
    libs = Path(os.environ["GROUPWARDEN_KAFKA_STREAMS_LIBS"])
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    existing = admin.list_topics(timeout=30).topics
    wanted = [t for t in ("streams-plaintext-input", "streams-wordcount-output") if t not in existing]
    futures = admin.create_topics([NewTopic(t, 2, 1) for t in wanted]).values() if wanted else []
    for future in futures:
        with contextlib.suppress(Exception):  # created meanwhile by someone else
            future.result(60)
    state = Path(tempfile.mkdtemp(prefix="demo-streams-"))
    props = state / "wordcount.properties"
    props.write_text(
        f"application.id={app_id}\nbootstrap.servers={BOOTSTRAP}\ngroup.protocol=streams\n"
        f"state.dir={state}\ncommit.interval.ms=200\n"
    )
    app = subprocess.Popen(
        [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-cp",
            f"{libs}/*",
            "org.apache.kafka.streams.examples.wordcount.WordCountDemo",
            str(props),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _streams_state(app_id) != "Stable":
            time.sleep(1)
        producer = Producer({"bootstrap.servers": BOOTSTRAP})
        producer.produce("streams-plaintext-input", value=b"hello groupwarden")
        producer.flush(10)
        time.sleep(2)  # one commit interval and a bit: the app commits its offsets
    finally:
        app.terminate()
        app.wait(60)


def _streams_state(app_id: str) -> str | None:
    out = subprocess.run(
        [
            "kafka-run-class",
            "org.apache.kafka.tools.streams.StreamsGroupCommand",
            "--bootstrap-server",
            BOOTSTRAP,
            "--list",
            "--state",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == app_id:
            return cols[1]
    return None


def create(run: str) -> None:
    t = topics(run)
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for future in admin.create_topics([NewTopic(name, 2, 1) for name in t.values()]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    for name in t.values():
        for i in range(20):
            producer.produce(name, value=f"event-{i}".encode(), partition=i % 2)
    producer.flush(30)
    # CI jobs that ran once and left their groups behind (classic and KIP-848 protocols).
    for i, protocol in enumerate(["classic", "consumer", "classic"]):
        join_and_commit(f"ci-build-{run}-{i}", [t["orders"]], protocol)
    join_and_commit(f"ci-keep-{run}", [t["orders"]], "consumer")  # excluded by the policy
    # billing used to read orders and payments; its first version commits both.
    join_and_commit(f"svc-billing-{run}", [t["orders"], t["payments"]], "consumer")
    # A standalone consumer (assign + commit, no membership): a simple group.
    standalone = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"standalone-audit-{run}"})
    standalone.commit(offsets=[TopicPartition(t["audit"], p, 10) for p in (0, 1)], asynchronous=False)
    standalone.close()
    # KIP-932 and KIP-1071 (Kafka 4.2+): a forgotten queue worker and an abandoned streams app.
    forgotten_share_group(f"queue-worker-{run}", t["orders"])
    abandoned_streams_app(f"wordcount-{run}")
    print(f"created topics {sorted(t.values())} and groups for run {run}")


def serve(run: str) -> None:
    """billing v2 reads only orders and keeps running: its payments offsets are dead weight."""
    consumer = join_and_commit(f"svc-billing-{run}", [topics(run)["orders"]], "consumer", stay=True)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    print("svc-billing is running (orders only)", flush=True)
    while not stop:
        consumer.poll(0.5)
    consumer.close()


if __name__ == "__main__":
    {"create": create, "serve": serve}[sys.argv[1]](sys.argv[2])

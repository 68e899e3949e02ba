"""Creates the demo's consumer groups with real clients, and keeps the live service running.

demo_groups.py create RUN_ID   # stale CI groups, a service that dropped a topic, a standalone consumer
demo_groups.py serve RUN_ID    # the live service: stays in its group until killed
"""

from __future__ import annotations

import os
import signal
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
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

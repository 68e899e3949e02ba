"""The race campaign's share (KIP-932) and streams (KIP-1071) clients, recording for the oracle.

- `ShareMember`: a real share consumer (confluent-kafka's `ShareConsumer`) in explicit
  acknowledgement mode. Every batch a poll returns is acknowledged at once (ACCEPT, or RELEASE for
  a member that only looks) and sent with `commit_sync()` before the next poll, so each
  acknowledgement reaches the broker inside a known window: an ACCEPT batch is recorded as an
  `oracle.Commit` of the share-partition start offsets it moves to (one consumer per group reads
  the records in order, so the start offset becomes the last accepted offset + 1; the broker may
  report the batch's first offset until its next write, see `oracle.Commit.floor`). A poll that
  returned records proves the broker had assigned this member partitions: it is certainly a member
  from then until close() is called.
- `StreamsDriver`: ONE long-lived JVM (bench/race_streams/RaceStreamsDriver.java, compiled once with
  javac against the devstack's cached Kafka Streams jars and cached beside them) hosting many
  KafkaStreams instances with a stateless topology, controlled over stdin/stdout. It reports the
  start()/close() calls, state transitions, the active tasks' partitions when they change, every
  processed record and every commit the broker acknowledged (a ConsumerInterceptor's onCommit),
  each with its wall-clock time. A commit's window starts when the last record it covers was
  processed (it cannot be sent before) and ends at onCommit (after the broker's answer).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer

from bench import race_oracle as oracle
from gwtest.streams import (
    streams_libs,  # the jars the tests' streams apps use (race_campaign puts tests/ on the path)
)

JOIN_TIMEOUT = 30.0
DRIVER_SOURCE = Path(__file__).resolve().parent / "race_streams" / "RaceStreamsDriver.java"
DRIVER_CLASS = "RaceStreamsDriver"


class ShareMember:
    """One share consumer's membership of one share group, recorded."""

    def __init__(self, bootstrap: str, group: str, recorder: Any, accept: bool = True) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 3,  # librdkafka's "Preview" warning per share consumer
        }
        self.consumer = ShareConsumer(config)
        self.group = group
        self.accept = accept
        self.session = oracle.Session(group=group, client=uuid.uuid4().hex[:6], protocol="share")
        self.received: dict[tuple[str, int], int] = {}  # last offset received per partition
        self.closed = False
        self.recorder = recorder
        with recorder.lock:
            recorder.sessions.append(self.session)

    def subscribe(self, topics: Sequence[str]) -> None:
        start = time.time()
        self.consumer.subscribe(list(topics))
        self.session.subscribes.append((start, time.time(), frozenset(topics)))

    def poll(self, seconds: float) -> int:
        """Polls for up to `seconds`; acknowledges what came (and sends it) before returning.
        A member that only looks releases its first batch and polls no more: released records
        come straight back, and after `group.share.delivery.count.limit` deliveries the broker
        archives them, which moves the start offset like an acknowledgement would."""
        if not self.accept and self.received:
            time.sleep(max(0.0, seconds))  # still a member (librdkafka heartbeats in the background)
            return 0
        deadline = time.monotonic() + seconds
        got = 0
        while True:
            batch = self.consumer.poll(max(0.0, min(0.05, deadline - time.monotonic())))
            returned = time.time()
            messages = [m for m in batch or () if m.error() is None]
            if messages:
                got += len(messages)
                seen = frozenset((m.topic(), m.partition()) for m in messages)
                self.session.assignments.append((returned, seen))
                kind = AcknowledgeType.ACCEPT if self.accept else AcknowledgeType.RELEASE
                moved: dict[tuple[str, int], int] = {}
                first: dict[tuple[str, int], int] = {}
                for message in messages:
                    tp = (message.topic(), message.partition())
                    self.received[tp] = max(self.received.get(tp, -1), message.offset())
                    moved[tp] = max(moved.get(tp, -1), message.offset() + 1)
                    first[tp] = min(first.get(tp, message.offset()), message.offset())
                    self.consumer.acknowledge(message, kind)
                self._send(moved if self.accept else {}, first)
                if not self.accept:
                    return got
            if time.monotonic() >= deadline:
                return got

    def _send(self, moved: dict[tuple[str, int], int], first: dict[tuple[str, int], int]) -> None:
        start = time.time()
        accepted: set[tuple[str, int]] = set()
        unknown = False
        try:
            answer = self.consumer.commit_sync(30.0)
            accepted = {(tp.topic, tp.partition) for tp, error in (answer or {}).items() if error is None}
        except KafkaException:
            unknown = True
        if not self.accept:
            # Released: nothing moves, but the state exists with a start offset <= the first
            # record got (created at the log's end if this member re-created the group).
            self.recorder.add_commit(
                oracle.Commit(
                    self.group,
                    first,
                    self.session.subscribes[0][0],
                    time.time(),
                    frozenset(accepted & set(first)),
                    unknown,
                    {tp: 0 for tp in first},
                    progress=False,
                )
            )
        elif moved:
            self.recorder.add_commit(
                oracle.Commit(
                    self.group, moved, start, time.time(), frozenset(accepted & set(moved)), unknown, first
                )
            )

    def wait_records(self, partitions: Sequence[tuple[str, int]], produce: Callable[[], None] | None) -> None:
        """Polls until a record of every partition came (proof of the assignment); `produce`
        adds records each round (a share group starts at the log's end)."""
        deadline = time.monotonic() + JOIN_TIMEOUT
        while not set(partitions) <= self.received.keys():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.group}: share records of {sorted(partitions)} never came")
            if produce is not None:
                produce()
            self.poll(0.3)

    def wait_any_record(self, produce: Callable[[], None]) -> None:
        """Polls until a record comes. The records waiting since the setup come at once; a group
        deleted meanwhile is new again and starts at the log's end, so after a while `produce`
        adds records each round."""
        deadline = time.monotonic() + JOIN_TIMEOUT
        rounds = 0
        while not self.received:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.group}: no share record came")
            if rounds >= 5:
                produce()
            self.poll(0.1)
            rounds += 1

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.session.close_called = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.consumer.close()
        self.session.close_returned = time.time()


def produce_each(bootstrap: str, topics: Sequence[str], partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for topic in topics:
        for i in range(count * partitions):
            producer.produce(topic, value=b"r", partition=i % partitions)
    if producer.flush(30) != 0:
        raise RuntimeError("records not delivered")


# ---------------------------------------------------------------------------------------------
# Streams: one JVM, many KafkaStreams instances.


def compiled_driver(libs: Path) -> Path:
    """The driver's classes, compiled once per source and jar set into the groupwarden cache."""
    jars = sorted(p.name for p in libs.glob("*.jar"))
    digest = hashlib.sha256(DRIVER_SOURCE.read_bytes() + "\n".join(jars).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("GROUPWARDEN_CACHE", Path.home() / ".cache" / "groupwarden"))
    target = cache / "race-streams-driver" / digest
    if (target / f"{DRIVER_CLASS}.class").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        subprocess.run(
            ["javac", "-d", str(work), "-cp", f"{libs}/*", str(DRIVER_SOURCE)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        with contextlib.suppress(OSError):  # another campaign compiled it meanwhile
            work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


class StreamsApp:
    """One KafkaStreams instance of the driver (one member of the streams group `group`)."""

    def __init__(self, driver: StreamsDriver, group: str, recorder: Any) -> None:
        self.driver = driver
        self.group = group
        self.id = f"s{uuid.uuid4().hex[:10]}"
        self.session = oracle.Session(group=group, client=self.id, protocol="streams")
        self.recorder = recorder
        self.processed: dict[tuple[str, int], tuple[int, float]] = {}  # last offset, when
        self.committed: dict[tuple[str, int], int] = {}
        self.assigned = threading.Event()
        self.closed_event = threading.Event()
        self.closed = False
        self.running = False
        self.error: str | None = None
        self.topics: list[str] = []
        with recorder.lock:
            recorder.sessions.append(self.session)

    def start(self, topics: Sequence[str]) -> None:
        self.driver.start(self, topics)

    def on_event(self, event: dict[str, Any]) -> None:
        kind, t = event["ev"], event.get("t", 0.0)
        session = self.session
        if kind == "started":
            session.subscribes.append((event["called"], event["returned"], frozenset(self.topics)))
        elif kind == "state":
            if event["old"] == "RUNNING" and event["new"] != "RUNNING" and session.close_called == math.inf:
                # Out of RUNNING without close(): a rebalance or a fenced member; certain no longer.
                session.lost_at = min(session.lost_at, t)
            self.running = event["new"] == "RUNNING"
        elif kind == "assigned":
            tps = frozenset((tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in event["tps"])
            session.assignments.append((t, tps))
            if tps:
                self.assigned.set()
        elif kind == "processed":
            topic, partition = event["tp"].rsplit(":", 1)
            self.processed[(topic, int(partition))] = (event["offset"], t)
        elif kind == "committed":
            offsets = {}
            for key, offset in event["offsets"].items():
                topic, partition = key.rsplit(":", 1)
                offsets[(topic, int(partition))] = offset
            # It was sent after the last record it covers was processed (or after start()).
            starts = [
                self.processed[tp][1]
                for tp, offset in offsets.items()
                if tp in self.processed and self.processed[tp][0] == offset - 1
            ]
            start = max(starts) if starts else session.subscribes[0][0]
            self.committed.update(offsets)
            self.recorder.add_commit(oracle.Commit(self.group, offsets, start, t, frozenset(offsets)))
        elif kind == "closing":
            session.close_called = t
        elif kind == "closed":
            session.close_returned = t
            self.closed_event.set()
        elif kind == "error":
            self.error = event.get("message")

    def wait_assigned(self) -> None:
        if not self.assigned.wait(JOIN_TIMEOUT):
            raise TimeoutError(f"{self.group}: streams instance {self.id} got no tasks ({self.error})")

    def wait_committed(self, ends: dict[tuple[str, int], int]) -> None:
        deadline = time.monotonic() + JOIN_TIMEOUT
        while any(self.committed.get(tp, 0) < end for tp, end in ends.items() if end > 0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.group}: committed {self.committed}, log ends {ends}")
            time.sleep(0.02)

    def poll(self, seconds: float) -> None:
        """The instance runs on its own thread in the driver: a member's poll is only waiting."""
        time.sleep(max(0.0, seconds))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.driver.send(f"close {self.id}")
        if not self.closed_event.wait(60):
            raise TimeoutError(f"streams instance {self.id} did not close")


class StreamsDriver:
    """The JVM hosting the campaign's KafkaStreams instances."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        libs = streams_libs()
        if not (libs / ".complete").exists():
            raise RuntimeError(f"no Kafka Streams libs in {libs}: run devstack/kafka.sh streams-libs")
        classes = compiled_driver(libs)
        self.bootstrap = bootstrap
        self.state_dir = workdir / "streams-state"
        self.log = (workdir / "streams-driver.log").open("wb")
        self.apps: dict[str, StreamsApp] = {}
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [
                "java",
                "-Xmx384m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                f"{classes}:{libs}/*",
                DRIVER_CLASS,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
        )
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(60):
            raise RuntimeError("the streams driver did not start")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event["ev"] == "ready":
                self.ready.set()
                continue
            with self.lock:
                app = self.apps.get(event["id"])
            if app is not None:
                app.on_event(event)

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        with self.lock:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()

    def start(self, app: StreamsApp, topics: Sequence[str]) -> None:
        app.topics = list(topics)
        with self.lock:
            self.apps[app.id] = app
        self.send(f"start {app.id} {app.group} {self.bootstrap} {self.state_dir} {','.join(topics)}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("exit")
        try:
            self.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.log.close()

"""Race campaign: real clients join, leave, re-subscribe and commit while `apply` deletes
(docs/benchmarks.md, "Race campaign").

    PYTHONPATH=tests .venv/bin/python -m bench.race_campaign --trials 1000 --seed 1 \\
        [--bootstrap HOST:PORT] [--out F.jsonl] [--kinds classic,consumer,simple,share,streams]
        [--operator-every K] [--first N]

Each trial (its whole schedule is drawn from `Random(f"{seed}:{trial}")`, so a seed replays the same
trials; only the real systems' timing varies):
1. setup: 3-4 fresh groups of the campaign's prefix, each a classic or KIP-848 consumer group that
   consumed, committed and left (Empty), a live member that committed on topics A and B and then
   re-subscribed to A only ("drifted": B's offsets are unsubscribed), a simple group made by
   standalone commits, a share group (KIP-932) that acknowledged records and left or still runs, or
   a Kafka Streams app's group (KIP-1071) that processed, committed and stopped or still runs
   (`bench/race_share_streams.py`); then the 1 s retention of the policy passes;
2. race: `apply` (the CLI's code path: `commands.plan.plan_or_apply` with the real adapter, a
   ledger checkpoint and a write-ahead audit) starts at a random moment while each group's client
   does one thing at a random moment: rejoin (and maybe commit or acknowledge), re-subscribe to B,
   leave, commit as a member or standalone, restart a streams app (maybe processing records), or
   nothing. A third of the moments are tied to the apply itself:
   shortly after its gather began, or within 20 ms after its first DeleteGroups / OffsetDelete
   request was sent, i.e. while the request is in flight;
3. the oracle (`bench/race_oracle.py`) judges every deleted item from the clients' own record
   (assignment observations, subscribe/close calls, commit calls, each with its wall-clock window)
   against the request's send/receive window, compares the broker's final committed offsets
   (admin client OffsetFetch) with what the clients committed and the deletions reported, and the
   audit trail's outcomes with the gateway's answers; then the trial's groups are deleted.

Output: one JSON line per trial (`--out`), and a summary: trials, trials per hour, the outcome mix
and every wrongful verdict with its seed and trial number.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench import race_oracle as oracle
from bench import race_share_streams as share_streams
from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.gateway import KafkaError, KafkaGateway
from groupwarden.commands.plan import PlanOptions, plan_or_apply
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import TopicPartition
from groupwarden.deletion_trail import MemorySink
from groupwarden.testing.audit_keys import fixed_signer
from gwtest.kafka import consumer_config

RETENTION_S = 1.0
PARTITIONS = 2
JOIN_TIMEOUT = 30.0

log = logging.getLogger("race_campaign")


# ---------------------------------------------------------------------------------------------
# The schedule of a trial: a pure function of (seed, trial).


@dataclass(frozen=True)
class Trigger:
    """When a client acts: `at` seconds after the race starts, or `delay` seconds after the apply's
    gather began ("gather") / its first deletion request was sent ("delete")."""

    kind: str  # "at" | "gather" | "delete"
    delay: float


@dataclass(frozen=True)
class GroupSpec:
    name: str
    kind: str  # one of KINDS
    # "empty" | "drifted" | "simple" | "share-empty" | "share-running" | "streams-stopped" | "streams-running"
    scenario: str
    setup_topics: tuple[str, ...]  # "A", "B" ("T": the streams apps' topic)
    # "none" | "rejoin" | "rejoin-commit" | "admin-commit" | "resubscribe" | "leave" | "commit"
    # | share: "rejoin-ack" | streams: "restart" | "restart-records" | "stop"
    action: str
    trigger: Trigger
    rejoin_topics: tuple[str, ...] = ()
    stay: float = 0.0  # how long a rejoined member stays before it closes


@dataclass(frozen=True)
class TrialSpec:
    number: int
    groups: tuple[GroupSpec, ...]
    apply_at: float


# The kinds in the order the schedule draws them: `--kinds classic,consumer,simple` replays the
# campaigns recorded before share/streams groups were clients (seed 15, docs/benchmarks.md, "Race campaign").
KINDS = ("classic", "consumer", "simple", "share", "streams")


def draw_trial(seed: int, number: int, prefix: str, kinds: Sequence[str] = KINDS) -> TrialSpec:
    rng = random.Random(f"{seed}:{number}")
    groups = []
    for g in range(rng.randint(3, 4)):
        name = f"{prefix}-t{number}-g{g}"
        kind = rng.choice(list(kinds))
        if kind == "simple":
            scenario, setup = "simple", ("A", "B")
            action = rng.choices(["commit", "none"], [0.75, 0.25])[0]
        elif kind == "share":
            # Empty after consuming and acknowledging A; or running on A after it also read B
            # (B's share state: BrokerRequiresEmpty on Kafka 4.3.1, never deletable while it runs).
            scenario = rng.choices(["share-empty", "share-running"], [0.7, 0.3])[0]
            if scenario == "share-empty":
                setup = ("A",)
                action = rng.choices(["rejoin", "rejoin-ack", "none"], [0.35, 0.35, 0.3])[0]
            else:
                setup = ("A", "B")
                action = rng.choice(["none", "leave"])
        elif kind == "streams":
            # An app that processed T, committed and stopped (Empty); or one still running.
            scenario = rng.choices(["streams-stopped", "streams-running"], [0.7, 0.3])[0]
            setup = ("T",)
            if scenario == "streams-stopped":
                action = rng.choices(["restart", "restart-records", "none"], [0.3, 0.3, 0.4])[0]
            else:
                action = rng.choice(["none", "stop"])
        else:
            scenario = rng.choice(["empty", "drifted"])
            if scenario == "empty":
                setup = rng.choice([("A",), ("A", "B")])
                action = rng.choices(
                    ["rejoin", "rejoin-commit", "admin-commit", "none"], [0.3, 0.3, 0.2, 0.2]
                )[0]
            else:
                setup = ("A", "B")
                action = rng.choices(["resubscribe", "leave", "commit", "none"], [0.35, 0.2, 0.25, 0.2])[0]
        trigger_kind = rng.choices(["at", "gather", "delete"], [0.5, 0.2, 0.3])[0]
        delay = {
            "at": rng.uniform(0.0, 1.2),
            "gather": rng.uniform(0.0, 0.15),
            "delete": rng.uniform(0.0, 0.02),
        }[trigger_kind]
        groups.append(
            GroupSpec(
                name=name,
                kind=kind,
                scenario=scenario,
                setup_topics=setup,
                action=action,
                trigger=Trigger(trigger_kind, round(delay, 4)),
                rejoin_topics=rng.choice([("A",), ("A", "B")]),
                stay=round(rng.uniform(0.0, 0.8), 3),
            )
        )
    return TrialSpec(number, tuple(groups), apply_at=round(rng.uniform(0.0, 0.4), 4))


# ---------------------------------------------------------------------------------------------
# Recording clients.


class Recorder:
    """Everything the clients did, with wall-clock windows (one process, one clock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: list[oracle.Session] = []
        self.commits: list[oracle.Commit] = []

    def add_commit(self, commit: oracle.Commit) -> None:
        with self.lock:
            self.commits.append(commit)


# Long sessions: a member starved by a loaded machine must not be dropped by the broker while its
# client still believes it is in (the oracle would then see a phantom member).
MEMBER_SESSION_TIMEOUT_MS = 45_000
MEMBER_HEARTBEAT_INTERVAL_MS = 500


class Member:
    """A real group member (classic or KIP-848) that records what it observes."""

    def __init__(self, bootstrap: str, group: str, protocol: str, recorder: Recorder) -> None:
        self.consumer = Consumer(
            consumer_config(
                bootstrap,
                group,
                protocol,
                session_timeout_ms=MEMBER_SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=MEMBER_HEARTBEAT_INTERVAL_MS,
            )
        )
        self.session = oracle.Session(group=group, client=uuid.uuid4().hex[:6], protocol=protocol)
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.closed = False
        with recorder.lock:
            recorder.sessions.append(self.session)
        self.recorder = recorder

    def _lost(self, _consumer: Any, _partitions: Any) -> None:
        self.session.lost_at = min(self.session.lost_at, time.time())

    def subscribe(self, topics: Sequence[str]) -> None:
        start = time.time()
        self.consumer.subscribe(list(topics), on_lost=self._lost)
        self.session.subscribes.append((start, time.time(), frozenset(topics)))

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            self.consumer.poll(min(0.05, max(0.0, deadline - time.monotonic())))
            observed = frozenset((tp.topic, tp.partition) for tp in self.consumer.assignment())
            if observed != self.assignment:
                self.assignment = observed
                self.session.assignments.append((time.time(), observed))
            if time.monotonic() >= deadline:
                return

    def wait_assigned(self, topics: Sequence[str]) -> None:
        """Polls until the assignment is exactly the subscribed topics' partitions (one member)."""
        want = {(t, p) for t in topics for p in range(PARTITIONS)}
        deadline = time.monotonic() + JOIN_TIMEOUT
        while self.assignment != want:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.session.group}: assignment {sorted(self.assignment)} != {sorted(want)}"
                )
            self.poll(0.05)

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        _commit(self.consumer, self.session.group, offsets, self.recorder)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.session.close_called = time.time()
        self.consumer.close()
        self.session.close_returned = time.time()


def _commit(
    consumer: Consumer, group: str, offsets: Mapping[tuple[str, int], int], recorder: Recorder
) -> None:
    start = time.time()
    accepted: set[tuple[str, int]] = set()
    unknown = False
    try:
        answer = consumer.commit(
            offsets=[CkTopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
        accepted = {(tp.topic, tp.partition) for tp in answer or [] if tp.error is None}
    except KafkaException as exc:
        # A whole-request error (e.g. UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS)
        # is a definite refusal; a timeout or transport error leaves the result unknown.
        error = exc.args[0]
        unknown = error.retriable() or error.code() in (-185, -195)  # _TIMED_OUT, _TRANSPORT
    recorder.add_commit(
        oracle.Commit(group, dict(offsets), start, time.time(), frozenset(accepted), unknown=unknown)
    )


class Standalone:
    """Commits without joining (how simple groups are made, and an admin's offset reset)."""

    def __init__(self, bootstrap: str, group: str, recorder: Recorder) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self.group = group
        self.recorder = recorder

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        _commit(self.consumer, self.group, offsets, self.recorder)

    def close(self) -> None:
        self.consumer.close()


# ---------------------------------------------------------------------------------------------
# The gateway as the CLI uses it, with the windows of its requests recorded.


class TimedGateway:
    """The real adapter, timing the deletion requests, the reads and the decisions (and firing the
    triggers). Every call's end is kept: a decision's `now` was taken after the previous call."""

    def __init__(self, inner: KafkaGateway) -> None:
        self.inner = inner
        self.reset()

    def reset(self) -> None:
        self.deletions: list[oracle.Deletion] = []
        self.log_reads: list[float] = []
        self.share_reads: list[float] = []  # DescribeShareGroupOffsets: what sees acknowledgements
        # (earliest, latest) for each decision's `now`: the plan's, then each re-check's.
        self.checks: list[tuple[float, float]] = []
        self.last_end = time.time()
        self.gather_started = threading.Event()
        self.delete_sent = threading.Event()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        finally:
            self.last_end = time.time()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr
        return lambda *args: self._call(attr, *args)

    def list_groups(self) -> Any:
        # The plan's gather: its `now` was taken between the apply's start and this call.
        self.checks.append((self.last_end, time.time()))
        self.gather_started.set()
        return self._call(self.inner.list_groups)

    def describe_groups(self, groups: Sequence[Any]) -> Any:
        if self.log_reads:
            # After the plan's log read, a describe is a re-check's first call: it decides with a
            # `now` taken after the previous call ended.
            self.checks.append((self.last_end, time.time()))
        return self._call(self.inner.describe_groups, groups)

    def read_offsets_log(self, start_positions: Mapping[int, int]) -> Any:
        # Taken before the adapter asks for the log's end: a commit acknowledged before this moment
        # is in the part of the log this gather reads.
        self.log_reads.append(time.time())
        return self._call(lambda: list(self.inner.read_offsets_log(start_positions)))

    def fetch_offsets(self, group_ids: Sequence[str]) -> Any:
        # The re-check's OffsetFetch: a commit that moved an offset before this is visible to it.
        self.log_reads.append(time.time())
        return self._call(self.inner.fetch_offsets, group_ids)

    def fetch_share_offsets(self, group_ids: Sequence[str]) -> Any:
        # Share-partition start offsets (the gather's, the re-check's): an acknowledgement
        # answered before this is visible to it.
        self.share_reads.append(time.time())
        return self._call(self.inner.fetch_share_offsets, group_ids)

    def delete_groups(
        self, group_ids: Sequence[str], before_send: Any = None
    ) -> Mapping[str, KafkaError | None]:
        self.delete_sent.set()
        start = time.time()
        answers = self._call(self.inner.delete_groups, group_ids, before_send)
        end = time.time()
        for group in group_ids:
            error = answers.get(group, KafkaError("NO_ANSWER"))
            self.deletions.append(
                oracle.Deletion("groups", group, (), start, end, error.name if error else None)
            )
        return answers

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], before_send: Any = None
    ) -> Any:
        self.delete_sent.set()
        start = time.time()
        group_error, per_partition = self._call(self.inner.delete_offsets, group_id, partitions, before_send)
        end = time.time()
        tps = tuple((p.topic, p.partition) for p in partitions)
        errors = {(p.topic, p.partition): (e.name if e else None) for p, e in per_partition.items()}
        self.deletions.append(
            oracle.Deletion(
                "offsets", group_id, tps, start, end, group_error.name if group_error else None, errors
            )
        )
        return group_error, per_partition

    def delete_offsets_many(self, requests: Sequence[Any], before_send: Any = None) -> Any:
        """A step's offset deletions, all in flight at once: each recorded with the batch's window
        (a request went out and was answered somewhere inside it)."""
        self.delete_sent.set()
        start = time.time()
        answers = self._call(self.inner.delete_offsets_many, requests, before_send)
        end = time.time()
        for group_id, partitions in requests:
            group_error, per_partition = answers.get(group_id, (KafkaError("NO_ANSWER"), {}))
            tps = tuple((p.topic, p.partition) for p in partitions)
            errors = {(p.topic, p.partition): (e.name if e else None) for p, e in per_partition.items()}
            self.deletions.append(
                oracle.Deletion(
                    "offsets", group_id, tps, start, end, group_error.name if group_error else None, errors
                )
            )
        return answers

    def close(self) -> None:
        """The CLI closes its gateway after a run; the campaign keeps one for all trials."""


# ---------------------------------------------------------------------------------------------
# One trial.


@dataclass
class Campaign:
    bootstrap: str
    seed: int
    prefix: str
    topics: dict[str, str]
    gateway: TimedGateway
    ledger_dir: Path
    admin: AdminClient
    results: list[dict[str, Any]] = field(default_factory=list)
    operator: Any = None  # race_operator.OperatorDriver when some trials are the operator's
    operator_every: int = 0
    kinds: tuple[str, ...] = KINDS
    streams: share_streams.StreamsDriver | None = None  # one JVM for every streams app
    watermarks: Any = None  # a Consumer for the log ends of T (the streams apps' setup)

    def group_types(self) -> list[str]:
        """The policy's groupTypes: the default three, plus share/streams when they are clients
        (a policy names them explicitly, docs/engine.md)."""
        return ["classic", "consumer", "simple"] + [k for k in ("share", "streams") if k in self.kinds]

    def by_operator(self, number: int) -> bool:
        return self.operator is not None and number % self.operator_every == self.operator_every - 1

    def policy(self) -> ConsumerGroupPolicy:
        retention = f"{int(RETENTION_S)}s"
        return parse_policy(
            {
                "apiVersion": "groupwarden.io/v1beta1",
                "kind": "ConsumerGroupPolicy",
                "metadata": {"name": "race-campaign", "namespace": "bench"},
                "spec": {
                    "kafka": {"bootstrapServers": self.bootstrap},
                    "selector": {"include": [f"{self.prefix}-*"], "groupTypes": self.group_types()},
                    "rules": {
                        "emptyGroupRetention": retention,
                        "unsubscribedOffsetRetention": retention,
                        "simpleGroupOffsetRetention": retention,
                    },
                    "mode": "Enforce",
                    "limits": {"maxDeletionRatio": 1.0},
                },
            }
        )

    def partitions(self, topics: Sequence[str]) -> list[tuple[str, int]]:
        return [(self.topics[t], p) for t in topics for p in range(PARTITIONS)]


def _offsets(
    partitions: Sequence[tuple[str, int]], rng: random.Random, base: int
) -> dict[tuple[str, int], int]:
    return {tp: base + rng.randint(0, 9) for tp in partitions}


def run_trial(campaign: Campaign, spec: TrialSpec) -> dict[str, Any]:
    recorder = Recorder()
    rng = random.Random(f"{campaign.seed}:{spec.number}:offsets")
    members: dict[str, Any] = {}  # Member, ShareMember or StreamsApp: poll(), close(), closed
    standalones: dict[str, Standalone] = {}
    try:
        _setup(campaign, spec, recorder, rng, members, standalones)
        return _race_and_judge(campaign, spec, recorder, rng, members, standalones)
    finally:
        for member in members.values():
            with contextlib.suppress(Exception):
                member.close()
        for standalone in standalones.values():
            with contextlib.suppress(Exception):
                standalone.close()
        _delete_trial_groups(campaign, spec)


def _setup(
    campaign: Campaign,
    spec: TrialSpec,
    recorder: Recorder,
    rng: random.Random,
    members: dict[str, Any],
    standalones: dict[str, Standalone],
) -> None:
    """Every group ends the setup in its scenario's state; the setups run in parallel."""
    offsets = {g.name: _offsets(campaign.partitions(g.setup_topics), rng, 1) for g in spec.groups}

    def setup(group: GroupSpec) -> None:
        if group.kind == "share":
            _setup_share(campaign, group, recorder, members)
            return
        if group.kind == "streams":
            _setup_streams(campaign, group, recorder, members)
            return
        if group.scenario == "simple":
            standalone = Standalone(campaign.bootstrap, group.name, recorder)
            standalones[group.name] = standalone
            standalone.commit(offsets[group.name])
            return
        member = Member(campaign.bootstrap, group.name, group.kind, recorder)
        topics = [campaign.topics[t] for t in group.setup_topics]
        member.subscribe(topics)
        member.wait_assigned(topics)
        member.commit(offsets[group.name])
        if group.scenario == "empty":
            member.close()
        else:
            members[group.name] = member
            member.subscribe([campaign.topics["A"]])
            member.wait_assigned([campaign.topics["A"]])

    _in_parallel([lambda g=g: setup(g) for g in spec.groups])  # type: ignore[misc]
    observed_at = -math.inf
    if any(g.kind == "share" for g in spec.groups):
        # Records for the race's share consumers (a rejoining member gets these), then one plan
        # run: a share group's start offsets are dated by first observation (they are not in the
        # offsets log), so a run must have seen them a retention ago before one may delete it.
        share_streams.produce_each(campaign.bootstrap, [campaign.topics["A"]], PARTITIONS, 4)
        _observe(campaign)
        observed_at = time.time()
    # Standalone clients for the admin commits of the race (created now: not on the race's clock).
    for group in spec.groups:
        if group.action == "admin-commit":
            standalones[group.name] = Standalone(campaign.bootstrap, group.name, recorder)
    # The policy's retention must pass (commit times come from the broker's log) before the race.
    last = max(
        [c.end for c in recorder.commits]
        + [s.close_returned for s in recorder.sessions if s.close_returned < math.inf]
        + [observed_at]
    )
    _keep_polling(members.values(), last + RETENTION_S + 0.15 - time.time())


def _setup_share(campaign: Campaign, group: GroupSpec, recorder: Recorder, members: dict[str, Any]) -> None:
    """A share consumer reads and acknowledges records of every partition of its setup topics
    (produced as it polls: a share group starts at the log's end), then leaves (share-empty) or
    drops B and keeps running on A (share-running)."""
    member = share_streams.ShareMember(campaign.bootstrap, group.name, recorder)
    topics = [campaign.topics[t] for t in group.setup_topics]
    member.subscribe(topics)
    member.wait_records(
        campaign.partitions(group.setup_topics),
        lambda: share_streams.produce_each(campaign.bootstrap, topics, PARTITIONS, 1),
    )
    if group.scenario == "share-empty":
        member.close()
        return
    members[group.name] = member
    member.subscribe([campaign.topics["A"]])
    gateway = campaign.gateway.inner
    deadline = time.monotonic() + JOIN_TIMEOUT
    while True:  # until the broker has the new subscription (B unsubscribed)
        member.poll(0.05)
        listed = [g for g in gateway.list_groups() if g.group_id == group.name]
        described = gateway.describe_groups(listed).get(group.name) if listed else None
        if described is not None and described.subscribed_topics == frozenset({campaign.topics["A"]}):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{group.name}: the share group kept B ({described})")


def _setup_streams(campaign: Campaign, group: GroupSpec, recorder: Recorder, members: dict[str, Any]) -> None:
    """A stateless streams app processes T to its end and commits; it stops (streams-stopped,
    leaving the group) or keeps running (streams-running)."""
    assert campaign.streams is not None
    app = share_streams.StreamsApp(campaign.streams, group.name, recorder)
    app.start([campaign.topics["T"]])
    app.wait_assigned()
    app.wait_committed(_log_ends(campaign, "T"))
    if group.scenario == "streams-stopped":
        app.close()
    else:
        members[group.name] = app


def _log_ends(campaign: Campaign, topic: str) -> dict[tuple[str, int], int]:
    name = campaign.topics[topic]
    ends = {}
    for p in range(PARTITIONS):
        _low, high = campaign.watermarks.get_watermark_offsets(CkTopicPartition(name, p), timeout=30)
        ends[(name, p)] = high
    return ends


def _observe(campaign: Campaign) -> None:
    """`groupwarden plan` with the campaign's ledger cache (its first-observed times are kept)."""
    options = PlanOptions(ledger_cache=campaign.ledger_dir, output="json")
    with contextlib.redirect_stdout(io.StringIO()):
        plan_or_apply(options, [campaign.policy()], datetime.now(UTC), campaign.gateway, execute=False)


def _keep_polling(members: Any, seconds: float) -> None:
    deadline = time.monotonic() + max(0.0, seconds)
    members = list(members)
    while time.monotonic() < deadline:
        if not members:
            time.sleep(max(0.0, min(0.05, deadline - time.monotonic())))
        for member in members:
            member.poll(0.02)


def _in_parallel(calls: Sequence[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _race_and_judge(
    campaign: Campaign,
    spec: TrialSpec,
    recorder: Recorder,
    rng: random.Random,
    members: dict[str, Any],
    standalones: dict[str, Standalone],
) -> dict[str, Any]:
    gateway = campaign.gateway
    gateway.reset()
    applied = threading.Event()
    race_start = time.monotonic()
    race_offsets = {g.name: _offsets(campaign.partitions(("A", "B")), rng, 100) for g in spec.groups}

    def wait_trigger(group: GroupSpec, member: Member | None) -> None:
        trigger = group.trigger
        event = {"gather": gateway.gather_started, "delete": gateway.delete_sent}.get(trigger.kind)
        while True:
            if event is None and time.monotonic() - race_start >= trigger.delay:
                return
            if event is not None and (event.is_set() or applied.is_set()):
                break
            if member is not None:
                member.poll(0.005)
            else:
                time.sleep(0.002)
        deadline = time.monotonic() + trigger.delay
        while time.monotonic() < deadline:
            if member is not None:
                member.poll(min(0.005, deadline - time.monotonic()))
            else:
                time.sleep(0.001)

    def act(group: GroupSpec) -> None:
        member = members.get(group.name)
        wait_trigger(group, member)
        offsets = race_offsets[group.name]
        if group.kind == "share" and group.action in ("rejoin", "rejoin-ack"):
            # Back to the share group: it gets records (proof of membership) and acknowledges
            # them (rejoin-ack: the start offsets move) or only looks (rejoin: released).
            share = share_streams.ShareMember(
                campaign.bootstrap, group.name, recorder, accept=group.action == "rejoin-ack"
            )
            members[group.name + "#rejoin"] = share
            share.subscribe([campaign.topics["A"]])
            share.wait_any_record(
                lambda: share_streams.produce_each(campaign.bootstrap, [campaign.topics["A"]], PARTITIONS, 1)
            )
            share.poll(group.stay)
            share.close()
        elif group.kind == "streams" and group.action in ("restart", "restart-records"):
            if group.action == "restart-records":  # the restarted app has records to process
                share_streams.produce_each(campaign.bootstrap, [campaign.topics["T"]], PARTITIONS, 2)
            assert campaign.streams is not None
            app = share_streams.StreamsApp(campaign.streams, group.name, recorder)
            members[group.name + "#restart"] = app
            app.start([campaign.topics["T"]])
            app.wait_assigned()
            app.poll(group.stay)
            app.close()
        elif group.action in ("leave", "stop") and member is not None:
            member.close()
        elif group.action in ("rejoin", "rejoin-commit"):
            joined = Member(campaign.bootstrap, group.name, group.kind, recorder)
            members[group.name + "#rejoin"] = joined
            topics = [campaign.topics[t] for t in group.rejoin_topics]
            joined.subscribe(topics)
            joined.wait_assigned(topics)
            if group.action == "rejoin-commit":
                joined.commit({tp: o for tp, o in offsets.items() if tp[0] in topics})
            joined.poll(group.stay)
            joined.close()
        elif group.action == "admin-commit" or (group.action == "commit" and group.scenario == "simple"):
            standalones[group.name].commit(offsets)
        elif group.action == "resubscribe" and member is not None:
            topics = [campaign.topics["A"], campaign.topics["B"]]
            member.subscribe(topics)
            member.wait_assigned(topics)
        elif group.action == "leave" and member is not None:
            member.close()
        elif group.action == "commit" and member is not None:
            member.commit({tp: o for tp, o in offsets.items() if tp[0] == campaign.topics["B"]})
        # The live members keep polling (stay members) until the apply is over.
        while member is not None and not member.closed and not applied.is_set():
            member.poll(0.02)

    outputs: dict[str, Any] = {}

    def apply() -> None:
        while time.monotonic() - race_start < spec.apply_at:
            time.sleep(0.002)
        if campaign.by_operator(spec.number):
            plan, records, deletions, checks, created = campaign.operator.run(
                spec.number, [g.name for g in spec.groups], gateway.gather_started, gateway.delete_sent
            )
            gateway.deletions, gateway.checks, gateway.log_reads = deletions, checks, []
            outputs.update(now=created, exit=None, plan=plan, audit=records)
        else:
            outputs["now"] = time.time()
            outputs["exit"], outputs["plan"], outputs["audit"] = _apply(campaign)
        applied.set()

    try:
        _in_parallel([apply, *[lambda g=g: act(g) for g in spec.groups]])  # type: ignore[misc]
    finally:
        applied.set()
    for member in list(members.values()):
        member.close()
    return _judge(campaign, spec, recorder, outputs)


def _apply(campaign: Campaign) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """`groupwarden apply --yes -o json --ledger-cache DIR` on the campaign's policy (in process)."""
    options = PlanOptions(ledger_cache=campaign.ledger_dir, output="json", confirmed=True)
    audit = MemorySink()
    out = io.StringIO()
    campaign.gateway.last_end = time.time()  # the plan's `now` is taken after this
    with contextlib.redirect_stdout(out):
        code = plan_or_apply(
            options,
            [campaign.policy()],
            datetime.now(UTC),
            campaign.gateway,
            execute=True,
            audit_sinks=[audit],
            signer=fixed_signer(),
        )
    text = out.getvalue()
    return code, (json.loads(text) if text.strip() else {}), audit.records


def _judge(
    campaign: Campaign, spec: TrialSpec, recorder: Recorder, outputs: Mapping[str, Any]
) -> dict[str, Any]:
    gateway = campaign.gateway
    plan = outputs.get("plan") or {}
    groups_to_delete = {a["group"] for a in plan.get("actions", []) if a.get("action") == "DeleteGroup"}
    offsets_to_delete = {
        a["group"]: frozenset((p["topic"], p["partition"]) for p in a.get("partitions", []))
        for a in plan.get("actions", [])
        if a.get("action") == "DeleteOffsets"
    }
    view = oracle.PlanView(
        now=outputs["now"],
        log_reads=tuple(gateway.log_reads),
        share_reads=tuple(gateway.share_reads),
        checks=tuple(gateway.checks),
        reads_known=not campaign.by_operator(spec.number),
        retention=RETENTION_S,
        groups_to_delete=frozenset(groups_to_delete),
        offsets_to_delete=offsets_to_delete,
    )
    names = [g.name for g in spec.groups]
    reported = {o["group"]: o["result"] for o in plan.get("outcomes", [])}
    share = [g.name for g in spec.groups if g.kind == "share"]
    verdicts = oracle.judge(
        names, view, recorder.sessions, recorder.commits, gateway.deletions, reported, share
    )
    broker = _broker_offsets(campaign, [n for n in names if n not in share])
    broker.update(_share_offsets(campaign, share))
    for name in names:
        expected = oracle.expected_offsets(name, recorder.commits, gateway.deletions, share=name in share)
        verdicts += oracle.compare_with_broker(name, expected, broker[name])
    verdicts += _audit_check(outputs.get("audit", []), gateway.deletions)
    wrongful = [v for v in verdicts if v.outcome in oracle.WRONGFUL]
    residual = [v for v in verdicts if v.outcome is oracle.Outcome.LOST_IN_RESIDUAL_WINDOW]
    return {
        "trial": spec.number,
        "seed": campaign.seed,
        "by": "operator" if campaign.by_operator(spec.number) else "apply",
        "exit": outputs.get("exit"),
        "groups": [
            {
                "name": g.name,
                "kind": g.kind,
                "scenario": g.scenario,
                "action": g.action,
                "trigger": g.trigger.kind,
            }
            for g in spec.groups
        ],
        "outcomes": dict(oracle.tally(verdicts)),
        "wrongful": [v.__dict__ | {"outcome": v.outcome.value} for v in wrongful],
        "residual": [v.__dict__ | {"outcome": v.outcome.value} for v in residual],
        "verdicts": [[v.group.rsplit("-", 1)[-1], v.item, v.outcome.value, v.detail] for v in verdicts],
        # Milliseconds after the plan's `now`: where the log read and the deletion requests fell.
        "timeline_ms": {
            "log_reads": [round((t - view.now) * 1000, 1) for t in view.log_reads],
            "share_reads": [round((t - view.now) * 1000, 1) for t in view.share_reads],
            "requests": [
                [
                    d.kind,
                    d.group.rsplit("-", 1)[-1],
                    round((d.start - view.now) * 1000, 1),
                    round((d.end - view.now) * 1000, 1),
                ]
                for d in gateway.deletions
            ],
        },
    }


def _broker_offsets(campaign: Campaign, groups: Sequence[str]) -> dict[str, dict[tuple[str, int], int]]:
    """The broker's committed offsets per group (OffsetFetch through confluent-kafka's admin client,
    independent of groupwarden's adapter)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    found: dict[str, dict[tuple[str, int], int]] = {}
    for group in groups:
        future = campaign.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        answer = future.result(timeout=30)
        found[group] = {
            (tp.topic, tp.partition): tp.offset
            for tp in answer.topic_partitions or []
            if tp.offset >= 0 and tp.error is None
        }
    return found


def _share_offsets(campaign: Campaign, groups: Sequence[str]) -> dict[str, dict[tuple[str, int], int]]:
    """The broker's share-partition start offsets per group (DescribeShareGroupOffsets; confluent-
    kafka has no admin call for it, so groupwarden's adapter reads them: the same answer
    `kafka-share-groups --describe --offsets` shows, tests/integration/test_share_groups.py)."""
    if not groups:
        return {}
    answers = campaign.gateway.inner.fetch_share_offsets(list(groups))
    found: dict[str, dict[tuple[str, int], int]] = {}
    for group in groups:
        answer = answers.get(group)
        if answer is None or answer.error is not None:
            if answer is not None and answer.error.name != "GROUP_ID_NOT_FOUND":
                raise RuntimeError(f"{group}: share offsets unreadable: {answer.error}")
            found[group] = {}
        else:
            found[group] = {(tp.topic, tp.partition): info.offset for tp, info in answer.offsets.items()}
    return found


def _result_of(error: str | None) -> str:
    if error is None:
        return "Deleted"
    if error in oracle.BECAME_ACTIVE:
        return "SkippedBecameActive"
    return "NotFound" if error in oracle.NOT_FOUND else "Failed"


def _audit_check(
    records: Sequence[Mapping[str, Any]], deletions: Sequence[oracle.Deletion]
) -> list[oracle.Verdict]:
    """Every request the gateway made has an intent written before it, and every outcome in the
    audit trail says what the broker answered (per group, or per partition)."""
    found: list[oracle.Verdict] = []

    def mismatch(group: str, detail: str) -> None:
        found.append(oracle.Verdict(group, "audit", oracle.Outcome.AUDIT_MISMATCH, detail))

    answers = {(d.kind, d.group): d for d in deletions}
    intents = {(r["action"], r["group"]) for r in records if r.get("type") == "intent"}
    outcomes = {(r["action"], r["group"]): r for r in records if r.get("type") == "outcome"}
    for deletion in deletions:
        action = "DeleteGroup" if deletion.kind == "groups" else "DeleteOffsets"
        if (action, deletion.group) not in intents:
            mismatch(deletion.group, f"{action} sent without an intent record")
        if (action, deletion.group) not in outcomes:
            mismatch(deletion.group, f"{action} without an outcome record")
    for (action, group), record in outcomes.items():
        deletion = answers.get(("groups" if action == "DeleteGroup" else "offsets", group))
        if deletion is None:
            mismatch(group, f"outcome {record['result']} for a request never sent")
        elif deletion.kind == "groups" or deletion.error is not None:
            if record["result"] != _result_of(deletion.error):
                mismatch(group, f"trail says {record['result']}, broker answered {deletion.error}")
        else:
            for partition in record.get("partitions", []):
                tp = (partition["topic"], partition["partition"])
                want = _result_of(deletion.partition_errors.get(tp, "NO_ANSWER"))
                if partition["result"] != want:
                    mismatch(group, f"trail says {partition['result']} for {tp}, broker: {want}")
    return found


def _delete_trial_groups(campaign: Campaign, spec: TrialSpec) -> None:
    """The trial's groups go at its end (retried while a member's leave is still in flight), so the
    next trial's apply sees only its own groups."""
    names = [g.name for g in spec.groups]
    deadline = time.monotonic() + 30
    while names and time.monotonic() < deadline:
        futures = campaign.admin.delete_consumer_groups(names, request_timeout=15)
        remaining = []
        for name, future in futures.items():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if "GROUP_ID_NOT_FOUND" not in str(exc) and "does not exist" not in str(exc).lower():
                    remaining.append(name)
        names = remaining
        if names:
            time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# The campaign.


def _prepare_topics(bootstrap: str, prefix: str) -> dict[str, str]:
    topics = {"A": f"{prefix}-a", "B": f"{prefix}-b", "T": f"{prefix}-t"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in topics.values()]
    )
    for future in futures.values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in topics.values():
        for i in range(20):
            producer.produce(topic, value=b"x", partition=i % PARTITIONS)
    producer.flush(30)
    return topics


@contextlib.contextmanager
def campaign_on(
    bootstrap: str, seed: int, prefix: str | None = None, kinds: Sequence[str] = KINDS
) -> Iterator[Campaign]:
    prefix = prefix or f"race-{seed}-{uuid.uuid4().hex[:6]}"
    topics = _prepare_topics(bootstrap, prefix)
    gateway = TimedGateway(open_gateway(bootstrap))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-watermarks"})
    with (
        tempfile.TemporaryDirectory(prefix="race-ledger-") as ledger_dir,
        tempfile.TemporaryDirectory(prefix="race-streams-") as streams_dir,
    ):
        os.chmod(ledger_dir, 0o700)
        campaign = Campaign(bootstrap, seed, prefix, topics, gateway, Path(ledger_dir), admin)
        campaign.kinds = tuple(kinds)
        campaign.watermarks = watermarks
        try:
            if "streams" in kinds:
                campaign.streams = share_streams.StreamsDriver(bootstrap, Path(streams_dir))
            yield campaign
        finally:
            if campaign.streams is not None:
                campaign.streams.close()
            watermarks.close()
            gateway.inner.close()
            admin.delete_topics(list(topics.values()))


def _trials(
    campaign: Campaign,
    seed: int,
    first: int,
    trials: int,
    out: Path | None,
    progress: Callable[[dict[str, Any]], None] | None,
    outcomes: Counter[str],
    wrongful: list[dict[str, Any]],
    residual: list[dict[str, Any]],
    errors: list[str],
    by: Counter[str],
) -> None:
    for number in range(first, first + trials):
        spec = draw_trial(seed, number, campaign.prefix, campaign.kinds)
        try:
            result = run_trial(campaign, spec)
        except Exception as exc:  # a client that could not join: reported, never a verdict
            result = {"trial": number, "seed": seed, "error": f"{type(exc).__name__}: {exc}"}
            errors.append(f"trial {number}: {result['error']}")
        outcomes.update(result.get("outcomes", {}))
        if "by" in result:
            by[result["by"]] += 1
        wrongful += result.get("wrongful", [])
        residual += result.get("residual", [])
        if out is not None:
            with out.open("a") as file:
                file.write(json.dumps(result) + "\n")
        if progress is not None:
            progress(result)


def run(
    trials: int,
    seed: int,
    bootstrap: str,
    first: int = 0,
    out: Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    without_recheck: bool = False,
    operator_every: int = 0,
    kinds: Sequence[str] = KINDS,
) -> dict[str, Any]:
    """Runs trials `first` .. `first + trials - 1` of `seed`; returns the summary.
    `without_recheck`: apply without the re-check before each step (cleanup/recheck.py), as before
    the campaign found the race, to show
    that the oracle finds the lost commits the re-check prevents."""
    if without_recheck:
        import groupwarden.commands.plan as plan_command

        class NoRecheck:
            def __init__(self, *_args: Any) -> None:
                pass

            def __call__(self, step: Any) -> tuple[Any, tuple[()]]:
                return step, ()

        plan_command.Recheck = NoRecheck  # type: ignore[misc,assignment]
    began = time.monotonic()
    outcomes: Counter[str] = Counter()
    wrongful: list[dict[str, Any]] = []
    residual: list[dict[str, Any]] = []
    errors: list[str] = []
    by: Counter[str] = Counter()
    with (
        campaign_on(bootstrap, seed, kinds=kinds) as campaign,
        tempfile.TemporaryDirectory(prefix="race-op-") as work,
    ):
        if operator_every:
            from bench import race_operator

            campaign.operator = race_operator.OperatorDriver(
                bootstrap, campaign.prefix, Path(work), campaign.group_types()
            )
            campaign.operator_every = operator_every
        try:
            _trials(campaign, seed, first, trials, out, progress, outcomes, wrongful, residual, errors, by)
        finally:
            if campaign.operator is not None:
                campaign.operator.close()
    elapsed = time.monotonic() - began
    return {
        "seed": seed,
        "kinds": list(kinds),
        "trials": trials,
        "first": first,
        "seconds": round(elapsed, 1),
        "trials_per_hour": round(trials / elapsed * 3600) if elapsed else None,
        "trials_by": dict(by),
        "outcomes": dict(sorted(outcomes.items())),
        "wrongful": wrongful,
        "lost_in_residual_window": residual,
        "errors": errors,
        "load_average": os.getloadavg(),
    }


def summarize(paths: Sequence[Path]) -> dict[str, Any]:
    """Totals over the per-trial JSON lines of one or more runs (the numbers of docs/benchmarks.md,
    "Race campaign"):
    the outcome mix, the wrongful and residual verdicts, and how long the windows were between
    groupwarden's last read before a request and the request (the residual window)."""
    trials, errors = 0, 0
    outcomes: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    by: Counter[str] = Counter()
    wrongful: list[Any] = []
    residual: list[Any] = []
    windows: list[float] = []
    for path in paths:
        for line in path.read_text().splitlines():
            result = json.loads(line)
            trials += 1
            if "error" in result:
                errors += 1
                continue
            by[result.get("by", "apply")] += 1
            outcomes.update(result["outcomes"])
            kind_of = {g["name"].rsplit("-", 1)[-1]: g["kind"] for g in result["groups"]}
            for verdict in result["verdicts"]:
                by_kind.setdefault(kind_of.get(verdict[0], "?"), Counter())[verdict[2]] += 1
            wrongful += result["wrongful"]
            residual += result.get("residual", [])
            timeline = result["timeline_ms"]
            for request in timeline["requests"]:
                # A share group's last read is of its start offsets (lines without them, written
                # before they were kept, leave its requests out).
                share = kind_of.get(request[1]) == "share"
                reads = timeline.get("share_reads", []) if share else timeline["log_reads"]
                before = [r for r in reads if r < request[2]]
                if before:
                    windows.append(request[2] - max(before))
    windows.sort()
    return {
        "trials": trials,
        "trials_by": dict(by),
        "errors": errors,
        "items": sum(outcomes.values()),
        "outcomes": dict(outcomes.most_common()),
        "outcomes_by_kind": {k: dict(c.most_common()) for k, c in sorted(by_kind.items())},
        "wrongful": wrongful,
        "lost_in_residual_window": residual,
        "last_read_to_request_ms": {
            "requests": len(windows),
            "median": windows[len(windows) // 2] if windows else None,
            "p99": windows[int(len(windows) * 0.99)] if windows else None,
            "max": windows[-1] if windows else None,
        },
    }


def _kinds(text: str, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        parser.error(f"--kinds: a list of distinct kinds among {', '.join(KINDS)}")
    return kinds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--summarize", type=Path, nargs="+", metavar="F.jsonl", help="print the totals of earlier runs"
    )
    parser.add_argument(
        "--first", type=int, default=0, help="number of the first trial (to split a campaign)"
    )
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092"))
    parser.add_argument("--out", type=Path, help="append one JSON line per trial")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="group kinds the schedule draws, in this order (default: all five; "
        "classic,consumer,simple replays the campaigns recorded before share/streams were clients)",
    )
    parser.add_argument(
        "--without-recheck", action="store_true", help="apply without the re-check before each step"
    )
    parser.add_argument(
        "--operator-every",
        type=int,
        default=0,
        metavar="K",
        help="every K-th trial is run by the operator as a process (needs KUBECONFIG), not by apply",
    )
    args = parser.parse_args(argv)
    if args.summarize:
        print(json.dumps(summarize(args.summarize), indent=2))
        return 0
    if args.trials is None or args.seed is None:
        parser.error("--trials and --seed are required")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("groupwarden.audit").setLevel(logging.WARNING)

    def progress(result: dict[str, Any]) -> None:
        mark = "WRONGFUL" if result.get("wrongful") else ("error" if "error" in result else "ok")
        print(
            f"trial {result['trial']}: {mark} {result.get('outcomes', result.get('error'))}", file=sys.stderr
        )

    summary = run(
        args.trials,
        args.seed,
        args.bootstrap,
        args.first,
        args.out,
        progress,
        args.without_recheck,
        args.operator_every,
        _kinds(args.kinds, parser),
    )
    print(json.dumps(summary, indent=2))
    return 1 if summary["wrongful"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The CLI's ledger checkpoint: the next run resumes where the last one stopped reading; anything
foreign, damaged or of another cluster is ignored, never trusted."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from groupwarden.cleanup.checkpoint import FORMAT, LedgerCheckpoint
from groupwarden.cli import build_parser
from groupwarden.commands.plan import PlanOptions, plan_or_apply
from groupwarden.core.policy import load_policy_file
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.offsets_log import (
    OffsetsLedger,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    UnknownRecordKey,
)
from groupwarden.testing.fake_kafka import FakeKafka
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytestmark = pytest.mark.unit

POLICY = {
    "apiVersion": "groupwarden.io/v1beta1",
    "kind": "ConsumerGroupPolicy",
    "metadata": {"name": "ci", "namespace": "team"},
    "spec": {
        "kafka": {"bootstrapServers": "fake:9092"},
        "selector": {"include": ["ci-*"]},
        "rules": {"simpleGroupOffsetRetention": "1d"},
    },
}


def plan(tmp_path: Path, fake: FakeKafka, *extra: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    options = PlanOptions.from_args(
        build_parser().parse_args(["plan", "-f", str(policy), "-o", "json", *extra])
    )
    code = plan_or_apply(options, load_policy_file(policy), datetime.now(UTC), fake, execute=False)
    assert code == 0


def cluster() -> FakeKafka:
    fake = FakeKafka(topics=["t"])
    for i in range(30):
        fake.add_group(f"ci-{i}", GroupKind.SIMPLE, offsets={("t", 0): i})
        fake.add_group(f"prod-{i}", GroupKind.SIMPLE, offsets={("t", 0): i})
    return fake


def test_the_next_run_reads_only_the_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake, cache = cluster(), tmp_path / "cache"
    plan(tmp_path, fake, "--ledger-cache", str(cache))
    first = LedgerCheckpoint(cache).load(fake.cluster)
    assert first.ledger is not None and first.scope is not None
    assert first.ledger.group_count == 30  # only the selected groups are kept
    applied = first.ledger.records + first.ledger.duplicates
    fake.commit("ci-0", {("t", 0): 99})
    plan(tmp_path, fake, "--ledger-cache", str(cache))
    second = LedgerCheckpoint(cache).load(fake.cluster)
    assert second.ledger is not None
    # One new record was applied; nothing was read twice.
    assert second.ledger.records == first.ledger.records + 1
    assert second.ledger.records + second.ledger.duplicates == applied + 1
    capsys.readouterr()


def test_a_foreign_or_damaged_checkpoint_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, cache = cluster(), tmp_path / "cache"
    plan(tmp_path, fake, "--ledger-cache", str(cache))
    path = LedgerCheckpoint(cache).path(fake.cluster)
    path.chmod(0o666)  # writable by others: could have been replaced by anyone
    assert LedgerCheckpoint(cache).load(fake.cluster).ledger is None
    path.chmod(0o600)
    path.write_bytes(b"not a pickle")
    assert LedgerCheckpoint(cache).load(fake.cluster).ledger is None
    plan(tmp_path, fake, "--ledger-cache", str(cache))  # a damaged file costs a full read, no error
    assert LedgerCheckpoint(cache).load(fake.cluster).ledger is not None
    assert LedgerCheckpoint(cache).load("another-cluster").ledger is None
    capsys.readouterr()


def test_no_ledger_cache_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan(tmp_path, cluster(), "--no-ledger-cache")
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "groupwarden").exists()
    out = capsys.readouterr().out
    assert json.loads(out)["summary"]["groupsMatched"] == 30


def plan_at(tmp_path: Path, fake: FakeKafka, now: datetime, *extra: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    argv = ["plan", "-f", str(policy), "-o", "json", "--no-offsets-log", *extra]
    options = PlanOptions.from_args(build_parser().parse_args(argv))
    assert plan_or_apply(options, load_policy_file(policy), now, fake, execute=False) == 0


def test_cached_first_observed_clocks_restart_after_a_longer_silence_than_the_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, cache = cluster(), tmp_path / "cache"
    fake.add_group("ci-idle", GroupKind.CLASSIC, protocol_type="consumer", offsets={("t", 0): 1})
    t0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)

    def empty_since(now: datetime) -> datetime | None:
        return LedgerCheckpoint(cache).load(fake.cluster, False, now=now).observed.empty_since.get("ci-idle")

    flags = ("--ledger-cache", str(cache))
    plan_at(tmp_path, fake, t0, *flags)
    plan_at(tmp_path, fake, t0 + timedelta(minutes=20), *flags)
    assert empty_since(t0 + timedelta(minutes=21)) == t0  # confirmed 1 minute ago: kept
    plan_at(tmp_path, fake, t0 + timedelta(minutes=51), *flags)  # 31 minutes unwatched: restarts
    assert empty_since(t0 + timedelta(minutes=52)) == t0 + timedelta(minutes=51)
    # A bound set above the time between runs (cron every hour) keeps the clock.
    plan_at(tmp_path, fake, t0 + timedelta(minutes=111), *flags, "--observed-max-gap", "2h")
    assert empty_since(t0 + timedelta(minutes=112)) == t0 + timedelta(minutes=51)
    capsys.readouterr()


def test_a_checkpoint_that_does_not_say_when_its_clocks_were_confirmed_restarts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, cache = cluster(), tmp_path / "cache"
    fake.add_group("ci-idle", GroupKind.CLASSIC, protocol_type="consumer", offsets={("t", 0): 1})
    t0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    plan_at(tmp_path, fake, t0, "--ledger-cache", str(cache))
    checkpoint = LedgerCheckpoint(cache)
    memory = checkpoint.load(fake.cluster, False, now=t0)
    assert memory.observed.empty_since["ci-idle"] == t0
    checkpoint.save(fake.cluster, memory)  # as a version before the rule saved it: no time
    assert checkpoint.load(fake.cluster, False, now=t0).observed.empty_since == {}
    capsys.readouterr()


def plan_selecting(tmp_path: Path, fake: FakeKafka, include: list[str], *extra: str) -> None:
    spec = {**POLICY["spec"], "selector": {"include": include}}  # type: ignore[dict-item]
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({**POLICY, "spec": spec}))
    options = PlanOptions.from_args(
        build_parser().parse_args(["plan", "-f", str(policy), "-o", "json", *extra])
    )
    code = plan_or_apply(options, load_policy_file(policy), datetime.now(UTC), fake, execute=False)
    assert code == 0


def test_a_run_that_widens_the_scope_saves_it_and_the_next_run_reads_only_the_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Widening replays the log from its start; the partitions whose log did not grow since the
    checkpoint end their replay with the read (they have no record past the old position): the
    checkpoint of the wide scope is saved, never refused as "in the middle of widening"."""
    fake, cache = cluster(), tmp_path / "cache"
    flags = ("--ledger-cache", str(cache))
    plan_selecting(tmp_path, fake, ["ci-*"], *flags)
    fake.commit("prod-1", {("t", 0): 50})  # one partition grows, the others do not
    with caplog.at_level(logging.WARNING, logger="groupwarden.cleanup.checkpoint"):
        plan_selecting(tmp_path, fake, ["ci-*", "prod-*"], *flags)
    assert "could not save" not in caplog.text
    widened = LedgerCheckpoint(cache).load(fake.cluster)
    assert widened.ledger is not None and widened.scope is not None
    assert widened.scope.signatures == frozenset({(("ci-*", "prod-*"), ())})
    assert widened.ledger.group_count == 60
    assert widened.ledger.offset("prod-1", TopicPartition("t", 0)) is not None
    applied = widened.ledger.records + widened.ledger.duplicates
    fake.commit("prod-2", {("t", 0): 77})
    plan_selecting(tmp_path, fake, ["ci-*", "prod-*"], *flags)
    resumed = LedgerCheckpoint(cache).load(fake.cluster)
    assert resumed.ledger is not None
    # Only the new record was read: no second replay of the log.
    assert resumed.ledger.records + resumed.ledger.duplicates == applied + 1
    found = resumed.ledger.offset("prod-2", TopicPartition("t", 0))
    assert found is not None and found.offset == 77
    capsys.readouterr()


@pytest.mark.parametrize("kind", [GroupKind.CLASSIC, GroupKind.CONSUMER])
def test_a_ledger_of_groups_with_subscriptions_is_saved_and_loaded_whole(
    tmp_path: Path, kind: GroupKind, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Subscriptions are frozensets; CPython's pickler without a memo (`fast`, which the checkpoint
    uses: a memo holds an entry per object) fails on more than a few dozen of them (KeyError), and on
    one shared twice (ValueError). Every run then read the whole log again."""
    fake = FakeKafka(topics=["t", "u"])
    for i in range(120):
        fake.add_group(f"ci-{i}", kind, subscribed=["t", "u"] if i % 2 else [f"t{i}"], offsets={("t", 0): i})
    cache = tmp_path / "cache"
    with caplog.at_level(logging.WARNING, logger="groupwarden"):
        plan(tmp_path, fake, "--ledger-cache", str(cache))
    assert not [r for r in caplog.records if "could not save" in r.getMessage()]
    loaded = LedgerCheckpoint(cache).load(fake.cluster)
    assert loaded.ledger is not None and loaded.ledger.group_count == 120
    assert loaded.ledger.subscribed_topics("ci-1") == frozenset({"t", "u"})
    assert loaded.ledger.subscribed_topics("ci-2") == frozenset({"t2"})
    capsys.readouterr()


# Every class a checkpoint's pickle names, by module: the ledger's state of every kind of group.
PICKLED_CLASSES = {
    ("collections", "Counter"),
    ("datetime", "datetime"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("groupwarden.offsets_log._state", "ClassicState"),
    ("groupwarden.offsets_log._state", "ConsumerState"),
    ("groupwarden.offsets_log._state", "ModernState"),
    ("groupwarden.offsets_log._state", "ReplayedGroup"),
    ("groupwarden.offsets_log.ledger", "OffsetsLedger"),
    ("groupwarden.offsets_log.views", "LedgerClassicMember"),
    ("groupwarden.offsets_log.views", "LedgerConsumerMember"),
    ("groupwarden.offsets_log.views", "LedgerStreamsTopology"),
}


def test_the_classes_a_checkpoint_pickles_stay_where_they_are() -> None:
    """A checkpoint is a pickle: it names the module of every class in it, and a class that moves
    makes the checkpoints already written fail to load (a warning and a full read of the log).
    Who moves one bumps `checkpoint.FORMAT`, so that old checkpoints are refused cleanly, and
    updates `PICKLED_CLASSES`."""
    ledger = OffsetsLedger()
    ledger.apply_many(synthetic_log(6_000, 120, partitions=1))  # classic, KIP-848 and simple groups
    # share and streams groups (their metadata and member records), a streams topology
    for offset, (rtype, group, member) in enumerate(
        [(11, "share", None), (10, "share", "s1"), (17, "streams", None), (19, "streams", "t1")]
    ):
        ledger.apply(encode_key(UnknownRecordKey(rtype, group, member)), b"\x00\x00", 1_000, 1, offset)
    topology = encode_value(StreamsGroupTopologyValue(1, (StreamsSubtopology("0", ("words",)),)))
    ledger.apply(encode_key(StreamsGroupTopologyKey("streams")), topology, 1_000, 1, 4)
    kinds = {view.kind for g in ledger.groups() if (view := ledger.group(g)) is not None}
    assert kinds == set(GroupKind) - {GroupKind.UNKNOWN}
    document = {"format": FORMAT, "ledger": ledger, "caught_up_at": datetime.now(UTC)}
    named: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            named.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO(pickle.dumps(document, protocol=pickle.HIGHEST_PROTOCOL))).load()
    assert named == PICKLED_CLASSES
    assert FORMAT == "groupwarden-ledger-checkpoint/2"

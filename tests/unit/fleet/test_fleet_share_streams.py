"""The fleet audit on share (KIP-932) and streams (KIP-1071) groups, without a JVM: the worker
replays their member/metadata records with the core ledger, the driver gives them their state and
Empty-since from the log, plans them with the CLI's engine, counts them per type in the what-if
(with their come-backs) and shows them in the report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from groupwarden.core.decide_many import decide_many
from groupwarden.core.plan import ActionKind
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.render import plan_to_json
from groupwarden.core.snapshot import GroupKind, GroupState, TimestampSource, TopicPartition
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.partition_audit import audit_partitions
from groupwarden.fleet.report import histograms_from_answers
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log import LogRecord, OffsetsLedger, UnknownRecordKey, log_time
from groupwarden.offsets_log.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    StreamsTopicInfo,
)
from groupwarden.offsets_log.share_state import ShareStart, ShareStarts
from groupwarden.offsets_log.snapshot import snapshot_from_ledger
from groupwarden.testing.fleet_oracle import collect_reference, decide_reference
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value
from gwtest.fleet_records import partition_table

HOUR = 3_600_000
T0 = 1_700_000_000_000
NOW = datetime.fromtimestamp(T0 / 1000, tz=UTC) + timedelta(days=2)
NOW_MS = T0 + 48 * HOUR
SHARE_MEMBER, SHARE_METADATA, STREAMS_METADATA, STREAMS_MEMBER = 10, 11, 17, 19
VALUE = b"\x00\x00"  # the ledger reads these records' presence, never their values


class Log:
    """One `__consumer_offsets` partition written in order."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []

    def add(self, key: bytes, value: bytes | None, at_ms: int) -> None:
        self.records.append((key, value, at_ms, 0, len(self.records)))

    def member(self, rtype: int, group: str, member: str, live: bool, at_ms: int) -> None:
        self.add(encode_key(UnknownRecordKey(rtype, group, member)), VALUE if live else None, at_ms)

    def metadata(self, rtype: int, group: str, at_ms: int) -> None:
        self.add(encode_key(UnknownRecordKey(rtype, group)), VALUE, at_ms)

    def topology(self, group: str, at_ms: int) -> None:
        """A WordCountDemo-like topology: words -> repartition -> counts store."""
        store, repartition = f"{group}-counts-store-changelog", f"{group}-counts-store-repartition"
        value = StreamsGroupTopologyValue(
            1,
            (
                StreamsSubtopology("0", ("words",), repartition_sink_topics=(repartition,)),
                StreamsSubtopology(
                    "1",
                    state_changelog_topics=(StreamsTopicInfo(store),),
                    repartition_source_topics=(StreamsTopicInfo(repartition),),
                ),
            ),
        )
        self.add(encode_key(StreamsGroupTopologyKey(group)), encode_value(value), at_ms)

    def commit(self, group: str, topic: str, at_ms: int) -> None:
        key = encode_key(OffsetCommitKey(group, topic, 0))
        self.add(key, encode_value(OffsetCommitValue(42, 0, "", at_ms)), at_ms)


def share_streams_log() -> list[LogRecord]:
    log = Log()
    # share-gone: one member joined at T0 and left 1 h later; never came back.
    log.metadata(SHARE_METADATA, "share-gone", T0)
    log.member(SHARE_MEMBER, "share-gone", "m1", True, T0)
    log.member(SHARE_MEMBER, "share-gone", "m1", False, T0 + HOUR)
    log.metadata(SHARE_METADATA, "share-gone", T0 + HOUR)
    # share-busy: a member is still there.
    log.metadata(SHARE_METADATA, "share-busy", T0)
    log.member(SHARE_MEMBER, "share-busy", "m1", True, T0)
    # share-back: left at T0, came back 5 h later, left again at T0 + 6 h.
    log.metadata(SHARE_METADATA, "share-back", T0)
    log.member(SHARE_MEMBER, "share-back", "m1", True, T0 - HOUR)
    log.member(SHARE_MEMBER, "share-back", "m1", False, T0)
    log.member(SHARE_MEMBER, "share-back", "m2", True, T0 + 5 * HOUR)
    log.member(SHARE_MEMBER, "share-back", "m2", False, T0 + 6 * HOUR)
    # streams-gone: an app that committed and stopped 1 h after T0.
    log.metadata(STREAMS_METADATA, "streams-gone", T0)
    log.member(STREAMS_MEMBER, "streams-gone", "a1", True, T0)
    log.topology("streams-gone", T0)
    log.commit("streams-gone", "words", T0 + HOUR // 2)
    log.member(STREAMS_MEMBER, "streams-gone", "a1", False, T0 + HOUR)
    # streams-busy: still running.
    log.metadata(STREAMS_METADATA, "streams-busy", T0)
    log.member(STREAMS_MEMBER, "streams-busy", "a1", True, T0)
    log.topology("streams-busy", T0)
    log.commit("streams-busy", "words", T0 + HOUR)
    log.commit("streams-busy", "streams-busy-counts-store-repartition", T0)  # a source: stays
    log.commit("streams-busy", "old-input", T0)  # read by an earlier topology: unsubscribed
    # a classic-less offsets-only group, for contrast (simple)
    log.commit("simple-old", "words", T0)
    return log.records


def policy(*kinds: str, unsubscribed: bool = False) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "modern", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092"},
                "selector": {"include": ["*"], "groupTypes": list(kinds)},
                "rules": {"emptyGroupRetention": "1h"}
                | ({"unsubscribedOffsetRetention": "1h"} if unsubscribed else {}),
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def audited(  # type: ignore[no-untyped-def]
    policies: list[ConsumerGroupPolicy], retentions: list[timedelta], share_starts: ShareStarts | None = None
):
    records = share_streams_log()
    rows = audit_partitions(partition_table("east", records[::-1])).to_pylist()
    source = ClusterSource("east", "cluster-east", share_starts=share_starts)
    [audit] = collect_reference(rows, [source])
    decide_reference([audit], policies, NOW, retentions)
    return audit, records


def test_states_and_empty_since_come_from_the_log() -> None:
    audit, _ = audited([policy("share", "streams")], [])
    assert audit.snapshot is not None
    facts = {g.group_id: g for g in audit.snapshot.groups}
    assert {g: (f.kind, f.state, f.member_count) for g, f in facts.items() if g != "simple-old"} == {
        "share-gone": (GroupKind.SHARE, GroupState.EMPTY, 0),
        "share-busy": (GroupKind.SHARE, GroupState.STABLE, 1),
        "share-back": (GroupKind.SHARE, GroupState.EMPTY, 0),
        "streams-gone": (GroupKind.STREAMS, GroupState.EMPTY, 0),
        "streams-busy": (GroupKind.STREAMS, GroupState.STABLE, 1),
    }
    # Streams: Empty-since from the member tombstone, offsets from the log.
    gone = facts["streams-gone"]
    assert gone.empty_since is not None and gone.empty_since.source is TimestampSource.OFFSETS_LOG
    assert gone.empty_since.at == datetime.fromtimestamp((T0 + HOUR) / 1000, tz=UTC)
    assert [o.partition.topic for o in gone.offsets] == ["words"]
    # Share: the start offsets' change time is not in this log: first observed now, as `plan` does
    # on a first run (the later of that and Empty-since).
    share = facts["share-gone"]
    assert share.empty_since is not None
    assert (share.empty_since.at, share.empty_since.source) == (NOW, TimestampSource.OBSERVED)
    # The ledger rows keep the share group's own Empty-since from the log (histogram, tables).
    views = {view.group_id: view for view, _ in audit.answers}
    assert views["share-gone"].empty_since_ms == T0 + HOUR
    assert views["share-busy"].member_count == 1


def test_plan_is_the_clis_engine_on_the_same_ledger() -> None:
    policies = [policy("share", "streams"), policy("classic", "consumer", "simple")]
    policies[1] = policies[1].model_copy(
        update={"metadata": policies[1].metadata.model_copy(update={"name": "legacy"})}
    )
    audit, records = audited(policies, [])
    ledger = OffsetsLedger()
    ledger.apply_many(records)
    expected = decide_many(policies, snapshot_from_ledger(ledger, NOW, cluster_id="cluster-east"), NOW)
    assert [plan_to_json(p) for p in audit.plans] == [plan_to_json(p) for p in expected]
    modern, legacy = audit.plans
    # Only the stopped streams app goes on a first run; share groups wait for their start offsets.
    assert [(a.kind, a.group_id, a.group_kind) for a in modern.actions] == [
        (ActionKind.DELETE_GROUP, "streams-gone", GroupKind.STREAMS)
    ]
    # A policy written before share/streams were supported still lists them as untouched.
    unsupported = {s.group_id for s in legacy.skipped if s.reason_code.value == "UnsupportedGroupType"}
    assert unsupported == {"share-gone", "share-busy", "share-back", "streams-gone", "streams-busy"}


def test_what_if_counts_share_and_streams_groups_per_type_with_their_comebacks() -> None:
    audit, _ = audited([policy("share", "streams")], [timedelta(hours=1), timedelta(hours=10)])
    rows = {format(r.retention): r for r in audit.what_if}
    short, long = rows["1:00:00"], rows["10:00:00"]
    # 1 h: share-gone (Empty 47 h), share-back (Empty 42 h) and streams-gone (Empty 47 h).
    assert (short.groups, dict(short.groups_by_kind)) == (3, {"share": 2, "streams": 1})
    assert (long.groups, dict(long.groups_by_kind)) == (3, {"share": 2, "streams": 1})
    # share-back came back after 5 h Empty: at risk under 1 h, not under 10 h.
    assert [c.group for c in audit.comebacks] == ["share-back"]
    assert (short.comeback_groups, long.comeback_groups) == (1, 0)


def test_report_and_summary_show_the_new_types(tmp_path: Path) -> None:
    audit, _ = audited([policy("share", "streams")], [timedelta(hours=1)])
    histograms = histograms_from_answers([audit], NOW)
    idle = {(r["kind"], r["bucket"]): r["count"] for r in histograms["idle"]}
    assert sum(n for (kind, _), n in idle.items() if kind == "share") == 2
    assert sum(n for (kind, _), n in idle.items() if kind == "streams") == 1
    summary = write_outputs(tmp_path, [audit], NOW, {"master": "test"}, histograms=histograms)
    [cluster] = summary["clusters"]
    assert cluster["groupsByKind"] == {"share": 3, "simple": 1, "streams": 2}
    assert cluster["whatIf"][0]["groupsByKind"] == {"share": 2, "streams": 1}
    html = (tmp_path / "report.html").read_text()
    assert "<th>share</th>" in html and "<th>streams</th>" in html
    assert "__share_group_state" in html  # what the log cannot tell is said
    assert "share 2, streams 1" in html  # the what-if table per type


def test_streams_topology_subscribes_and_names_internal_topics() -> None:
    audit, records = audited([policy("streams", unsubscribed=True)], [])
    assert audit.snapshot is not None
    facts = {g.group_id: g for g in audit.snapshot.groups}
    busy = facts["streams-busy"]
    # The broker's rule: the topology's source topics, internal repartition topics included.
    assert busy.subscribed_topics == frozenset({"words", "streams-busy-counts-store-repartition"})
    [plan] = audit.plans
    by_group = {a.group_id: a for a in plan.actions}
    assert by_group["streams-busy"].kind is ActionKind.DELETE_OFFSETS
    assert [p.topic for p in by_group["streams-busy"].partitions] == ["old-input"]
    assert by_group["streams-gone"].internal_topics == (
        "streams-gone-counts-store-changelog",
        "streams-gone-counts-store-repartition",
    )
    document = plan_to_json(plan)
    named = {a["group"]: a.get("internalTopics") for a in document["actions"]}
    assert named == {
        "streams-busy": None,  # DeleteOffsets: the group and its topics stay
        "streams-gone": ["streams-gone-counts-store-changelog", "streams-gone-counts-store-repartition"],
    }
    ledger = OffsetsLedger()
    ledger.apply_many(records)
    expected = decide_many(
        [policy("streams", unsubscribed=True)],
        snapshot_from_ledger(ledger, NOW, cluster_id="cluster-east"),
        NOW,
    )
    assert [plan_to_json(p) for p in audit.plans] == [plan_to_json(p) for p in expected]


def test_with_share_group_state_read_share_groups_are_dated_by_their_start_offsets() -> None:
    jobs = TopicPartition("jobs", 0)
    starts: ShareStarts = {
        "share-gone": (ShareStart(jobs, 40, T0 + 2 * HOUR),),  # moved after its Empty-since
        "share-back": (ShareStart(jobs, 7, NOW_MS - HOUR // 2),),  # altered 30 min ago
        "share-busy": None,  # a topic without a known name: first observed
    }
    audit, _ = audited([policy("share")], [timedelta(hours=1)], starts)
    assert audit.snapshot is not None
    facts = {g.group_id: g for g in audit.snapshot.groups}
    gone = facts["share-gone"]
    assert gone.empty_since is not None and gone.empty_since.source is TimestampSource.OFFSETS_LOG
    assert [(o.partition, o.offset, o.committed_at) for o in gone.offsets] == [
        (jobs, 40, log_time(T0 + 2 * HOUR))
    ]
    [plan] = audit.plans
    # share-gone: the later of Empty-since and the start-offset change, 46 h ago; share-back's
    # start offset changed 30 min ago: not yet.
    [action] = plan.actions
    assert (action.group_id, action.eligible_since) == ("share-gone", log_time(T0 + 2 * HOUR).at)
    assert action.timestamp_source is TimestampSource.OFFSETS_LOG
    # The what-if uses the same dating (no first-observed assumption is needed).
    [row] = audit.what_if
    assert dict(row.groups_by_kind) == {"share": 1} and row.offsets_in_groups == 1

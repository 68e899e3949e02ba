"""The ledger's per-group answers as plain rows (dicts of str/int/list/None) and back.

A distributed job (the Spark fleet audit) rebuilds one `OffsetsLedger` per `__consumer_offsets`
partition on its workers and ships each group's state to the driver as a row; the driver turns the
row back into exactly the `LedgerGroup` and `LedgerOffset` values the ledger itself answers, so the
same snapshot builder and `decide` run on them. The row layout is the Parquet/Arrow schema of the
audit's `groups` table (`GROUP_ROW_FIELDS`), so nothing else has to know the ledger's internals.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.offsets_log.views import (
    LedgerClassicMember,
    LedgerConsumerMember,
    LedgerGroup,
    LedgerOffset,
    LedgerStreamsTopology,
)

Row = dict[str, Any]

# Field order of a group row (the Arrow schema in `groupwarden.fleet.schema` follows it).
GROUP_ROW_FIELDS = (
    "group",
    "kind",
    "protocol_type",
    "generation",
    "protocol",
    "current_state_timestamp_ms",
    "group_epoch",
    "member_count",
    "classic_members",
    "consumer_members",
    "regex_topics",
    "empty_since_ms",
    "subscribed_topics",
    "offset_count",
    "offsets",
    "streams_topology",
)


# Field order of an offset row (`offset_row`).
OFFSET_ROW_FIELDS = (
    "topic",
    "partition",
    "offset",
    "commit_time_ms",
    "expire_time_ms",
    "leader_epoch",
    "metadata",
    "topic_id",
)
# The fields of a group row that describe its members (lists of them) and a streams topology.
MEMBER_FIELDS = ("classic_members", "consumer_members", "regex_topics", "streams_topology")


def _topics(names: frozenset[str] | None) -> list[str] | None:
    return None if names is None else sorted(names)


def _frozen(names: list[str] | None) -> frozenset[str] | None:
    return None if names is None else frozenset(names)


def offset_row(tp: TopicPartition, lo: LedgerOffset) -> Row:
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "offset": lo.offset,
        "commit_time_ms": lo.commit_time_ms,
        "expire_time_ms": lo.expire_time_ms,
        "leader_epoch": lo.leader_epoch,
        "metadata": lo.metadata,
        "topic_id": None if lo.topic_id is None else str(lo.topic_id),
    }


def member_rows(view: LedgerGroup) -> Row:
    """The fields of a group row that describe its members and its streams topology
    (`MEMBER_FIELDS`), built without the rest of the row (the fleet audit's group rows take them
    only for the groups a policy selects)."""
    return {
        "classic_members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topics": _topics(m.subscribed_topics),
            }
            for m in view.classic_members  # member order is the log's: kept as is
        ],
        "consumer_members": [
            {"member_id": m.member_id, "topic_names": _topics(m.topic_names), "regex": m.regex}
            for _, m in sorted(view.consumer_members.items())
        ],
        "regex_topics": [
            {"regex": regex, "topics": _topics(topics)} for regex, topics in sorted(view.regex_topics.items())
        ],
        "streams_topology": _topology_row(view.streams_topology),
    }


def state_row(view: LedgerGroup) -> Row:
    """The fields of a group row that say what the log knows of the group itself: its kind,
    protocol, generation or epoch, member count, Empty-since time and subscription; not its
    members (`member_rows`), offsets or topology. The fleet audit's task rows take these for every
    group of a unit (fleet/task_rows.py), the members only for the groups a policy selects."""
    return {
        "group": view.group_id,
        "kind": view.kind.value,
        "protocol_type": view.protocol_type,
        "generation": view.generation,
        "protocol": view.protocol,
        "current_state_timestamp_ms": view.current_state_timestamp_ms,
        "group_epoch": view.group_epoch,
        "member_count": view.member_count,
        "empty_since_ms": view.empty_since_ms,
        "subscribed_topics": _topics(view.subscribed_topics),
    }


def group_row(view: LedgerGroup, offsets: Mapping[TopicPartition, LedgerOffset]) -> Row:
    """One group of a ledger as a row (lists sorted, so equal states give equal rows), its fields
    in `GROUP_ROW_FIELDS` order."""
    fields = state_row(view) | member_rows(view)
    fields["offset_count"] = view.offset_count
    fields["offsets"] = [offset_row(tp, lo) for tp, lo in sorted(offsets.items())]
    return {name: fields[name] for name in GROUP_ROW_FIELDS}


def _topology_row(topology: LedgerStreamsTopology | None) -> Row | None:
    if topology is None:
        return None
    return {
        "epoch": topology.epoch,
        "source_topics": _topics(topology.source_topics),
        "repartition_topics": _topics(topology.repartition_topics),
        "changelog_topics": _topics(topology.changelog_topics),
    }


def topology_from_row(row: Mapping[str, Any] | None) -> LedgerStreamsTopology | None:
    if row is None:
        return None
    return LedgerStreamsTopology(
        row["epoch"],
        _frozen(row["source_topics"]),
        _frozen(row["repartition_topics"]),
        _frozen(row["changelog_topics"]),
    )


def group_from_row(row: Mapping[str, Any]) -> tuple[LedgerGroup, dict[TopicPartition, LedgerOffset]]:
    """The inverse of `group_row`: the same `LedgerGroup` and offsets the ledger answered."""
    classic_members = row["classic_members"] or ()
    consumer_members = row["consumer_members"] or ()
    view = LedgerGroup(
        group_id=row["group"],
        kind=GroupKind(row["kind"]),
        protocol_type=row["protocol_type"],
        generation=row["generation"],
        protocol=row["protocol"],
        current_state_timestamp_ms=row["current_state_timestamp_ms"],
        group_epoch=row["group_epoch"],
        classic_members=tuple(
            LedgerClassicMember(
                m["member_id"],
                m["group_instance_id"],
                m["client_id"],
                m["client_host"],
                _frozen(m["subscribed_topics"]),
            )
            for m in classic_members
        ),
        consumer_members={
            m["member_id"]: LedgerConsumerMember(m["member_id"], _frozen(m["topic_names"]), m["regex"])
            for m in consumer_members
        },
        regex_topics={r["regex"]: _frozen(r["topics"]) for r in row["regex_topics"] or ()},
        empty_since_ms=row["empty_since_ms"],
        subscribed_topics=_frozen(row["subscribed_topics"]),
        offset_count=row["offset_count"],
        # Share/streams members are only counted: the rest of `member_count` (kept as is).
        modern_member_count=(row["member_count"] or 0) - len(classic_members) - len(consumer_members),
        streams_topology=topology_from_row(row.get("streams_topology")),
    )
    offsets = {
        TopicPartition(o["topic"], o["partition"]): LedgerOffset(
            o["offset"],
            o["commit_time_ms"],
            o["expire_time_ms"],
            o["leader_epoch"],
            o["metadata"],
            None if o["topic_id"] is None else uuid.UUID(o["topic_id"]),
        )
        for o in row["offsets"] or ()
    }
    return view, offsets

"""Streams groups (KIP-1071) on the wire: StreamsGroupDescribe (API 89), which kafka-python 3.x
does not ship, and its answer turned into a `DescribedGroup`.

Never classic DescribeGroups: before v6 it answers "Dead" with error 0 for a streams group. A
streams group's offsets are ordinary committed offsets (OffsetFetch, OffsetDelete, DeleteGroups and
`__consumer_offsets` as for consumer groups).

"Subscribed" for a streams group is what the broker itself checks before an OffsetDelete
(`StreamsGroup.isSubscribedToTopic`: the current topology's source topics, the internal repartition
topics it reads included). A group whose topology is not initialised has an unknown subscription.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage

from groupwarden.adapters.client_errors import error_from_code
from groupwarden.cleanup.gateway import DescribedGroup, KafkaError
from groupwarden.core.snapshot import GroupKind, GroupState

_SCHEMAS = "groupwarden.adapters.kafka_schemas"
STREAMS_PROTOCOL = "streams"


class StreamsGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """StreamsGroupDescribe (API 89, v0): `group_ids`, `include_authorized_operations`."""


class StreamsGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """Groups[error_code, group_id, group_state, topology[epoch, subtopologies[source_topics, ...]],
    members[...]]."""


def describe_request(group_ids: list[str]) -> Any:
    return StreamsGroupDescribeRequest(group_ids=group_ids, include_authorized_operations=False)


def source_topics(topology: Any) -> frozenset[str] | None:
    """The topics the topology reads (source and repartition source topics); None if unknown."""
    if topology is None or topology.subtopologies is None:
        return None
    names: set[str] = set()
    for sub in topology.subtopologies:
        names.update(sub.source_topics or ())
        names.update(t.name for t in sub.repartition_source_topics or ())
    return frozenset(names)


def internal_topics(topology: Any) -> frozenset[str] | None:
    """The app's internal topics: repartition (source and sink) and state changelog topics."""
    if topology is None or topology.subtopologies is None:
        return None
    names: set[str] = set()
    for sub in topology.subtopologies:
        names.update(t.name for t in sub.repartition_source_topics or ())
        names.update(sub.repartition_sink_topics or ())
        names.update(t.name for t in sub.state_changelog_topics or ())
    return frozenset(names)


def streams_group(group: Any) -> DescribedGroup | KafkaError:
    """One StreamsGroupDescribe answer. States: Empty, NotReady, Assigning, Reconciling, Stable,
    Dead; NotReady (internal topics missing) parses as Unknown, so nothing is planned for it."""
    error = error_from_code(group.error_code, group.error_message)
    if error is not None:
        return error
    members = list(group.members)
    return DescribedGroup(
        group_id=group.group_id,
        kind=GroupKind.STREAMS,
        state=GroupState.parse(group.group_state),
        protocol_type=STREAMS_PROTOCOL,
        member_count=len(members),
        subscribed_topics=source_topics(group.topology),
        internal_topics=internal_topics(group.topology),
    )

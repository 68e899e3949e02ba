"""Share groups (KIP-932) on the wire: the protocol classes kafka-python 3.x does not ship, and
their answers turned into the gateway port's values.

- ShareGroupDescribe (API 77): state, members and their subscriptions. Never classic
  DescribeGroups: before v6 it answers "Dead" with error 0 for a share group, which reads like a
  group that is gone.
- DescribeShareGroupOffsets (API 90): the share-partition start offsets. Share state lives in
  `__share_group_state`, not in `__consumer_offsets`, and OffsetFetch answers GROUP_ID_NOT_FOUND.
- DeleteShareGroupOffsets (API 92): a group's state for whole topics (no partition list).
- AlterShareGroupOffsets (API 91): sets start offsets of an Empty share group, creating the group
  when it does not exist (restore).

The schemas live in `groupwarden.adapters.kafka_schemas`, written from the Kafka protocol
definition; declaring a response class registers it for its API key.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage

from groupwarden.adapters.client_errors import error_from_code
from groupwarden.cleanup.gateway import CommittedOffsetInfo, DescribedGroup, GroupOffsets, KafkaError
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition

_SCHEMAS = "groupwarden.adapters.kafka_schemas"
SHARE_PROTOCOL = "share"


class ShareGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """ShareGroupDescribe (API 77, v1): `group_ids`, `include_authorized_operations`."""


class ShareGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """Groups[error_code, error_message, group_id, group_state, ..., members[..., subscribed_topic_names,
    assignment]]."""


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """DescribeShareGroupOffsets (API 90, v0): groups[group_id, topics (null: all)]."""


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """Groups[group_id, topics[topic_name, partitions[partition_index, start_offset, ...]], error_code]."""


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """DeleteShareGroupOffsets (API 92, v0): group_id, topics[topic_name]."""


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """error_code, error_message, responses[topic_name, error_code, error_message]."""


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """AlterShareGroupOffsets (API 91, v0): group_id, topics[topic_name, partitions[partition_index,
    start_offset]]."""


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """error_code, error_message, responses[topic_name, partitions[partition_index, error_code]]."""


def describe_request(group_ids: list[str]) -> Any:
    return ShareGroupDescribeRequest(group_ids=group_ids, include_authorized_operations=False)


def share_group(group: Any) -> DescribedGroup | KafkaError:
    """One ShareGroupDescribe answer. Subscriptions: every member's SubscribedTopicNames plus the
    topics of its current assignment (share groups have no regex subscriptions)."""
    error = error_from_code(group.error_code, group.error_message)
    if error is not None:
        return error
    members = list(group.members)
    names: set[str] = set()
    for member in members:
        names.update(member.subscribed_topic_names or ())
        if member.assignment is not None:
            names.update(tp.topic_name for tp in member.assignment.topic_partitions or () if tp.topic_name)
    return DescribedGroup(
        group_id=group.group_id,
        kind=GroupKind.SHARE,
        state=GroupState.parse(group.group_state),
        protocol_type=SHARE_PROTOCOL,
        member_count=len(members),
        subscribed_topics=frozenset(names),
    )


def offsets_request(group_ids: list[str]) -> Any:
    groups = [
        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=g, topics=None)
        for g in group_ids
    ]
    return DescribeShareGroupOffsetsRequest(groups=groups)


def parse_offsets(response: Any) -> dict[str, GroupOffsets | KafkaError]:
    """Start offsets per group. A partition whose share state was never initialised (start offset
    -1) holds nothing to keep or restore; a partition error makes the group's picture incomplete,
    so the group fails as a whole (as OffsetFetch answers do)."""
    answer: dict[str, GroupOffsets | KafkaError] = {}
    for group in response.groups:
        error = error_from_code(group.error_code, group.error_message)
        offsets: dict[TopicPartition, CommittedOffsetInfo] = {}
        topic_ids: dict[str, uuid.UUID] = {}
        for topic in group.topics if error is None else ():
            if topic.topic_id is not None:
                topic_ids[topic.topic_name] = topic.topic_id
            for p in topic.partitions:
                error = error or error_from_code(p.error_code, p.error_message)
                if p.start_offset < 0:
                    continue
                epoch = p.leader_epoch
                offsets[TopicPartition(topic.topic_name, p.partition_index)] = CommittedOffsetInfo(
                    offset=p.start_offset, leader_epoch=None if epoch is None or epoch < 0 else epoch
                )
        answer[group.group_id] = (
            error if error is not None else GroupOffsets(group.group_id, offsets, topic_ids=topic_ids)
        )
    return answer


def delete_offsets_request(group_id: str, topics: list[str]) -> Any:
    topic_cls = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    return DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[topic_cls(topic_name=t) for t in topics])


def parse_delete_offsets(response: Any) -> KafkaError | dict[str, KafkaError | None]:
    """A request-level error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...), else one result per topic."""
    error = error_from_code(response.error_code, response.error_message)
    if error is not None:
        return error
    return {t.topic_name: error_from_code(t.error_code, t.error_message) for t in response.responses}


def alter_offsets_request(group_id: str, offsets: Mapping[TopicPartition, int]) -> Any:
    topic_cls = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    partition_cls = topic_cls.AlterShareGroupOffsetsRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            partition_cls(partition_index=tp.partition, start_offset=offset)
        )
    topics = [topic_cls(topic_name=t, partitions=ps) for t, ps in by_topic.items()]
    return AlterShareGroupOffsetsRequest(group_id=group_id, topics=topics)


def parse_alter_offsets(response: Any) -> KafkaError | dict[TopicPartition, KafkaError | None]:
    error = error_from_code(response.error_code, response.error_message)
    if error is not None:
        return error
    return {
        TopicPartition(t.topic_name, p.partition_index): error_from_code(p.error_code, p.error_message)
        for t in response.responses
        for p in t.partitions
    }

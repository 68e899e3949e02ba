"""The I/O half of restore: read the groups' current state through the gateway, and commit offsets
as an admin (OffsetCommit with no member / generation -1, i.e. kafka-python's
`KafkaAdminClient.alter_group_offsets`, the same call as `kafka-consumer-groups --reset-offsets`).

The gateway port has no commit call (groupwarden itself never commits), so the commit uses
kafka-python directly with the gateway's connection settings. The broker accepts an admin commit
only while the group has no active members; otherwise it answers an error per partition.

Share groups (KIP-932) have no committed offsets: their share-partition start offsets are read with
DescribeShareGroupOffsets and put back with AlterShareGroupOffsets (the gateway's
`alter_share_offsets`), which the broker accepts only for an Empty share group and which
re-creates a deleted one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from groupwarden.adapters.client_config import confluent_config, kafka_python_config
from groupwarden.adapters.client_errors import client_errors_translated
from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.core.snapshot import GroupState, TopicPartition
from groupwarden.deletion_trail.records import RecordedOffset
from groupwarden.deletion_trail.restore import GroupNow

INACTIVE_STATES = frozenset({GroupState.EMPTY, GroupState.DEAD})


def current_state(
    gateway: KafkaGateway, group_ids: Sequence[str], share_groups: Collection[str] = ()
) -> dict[str, GroupNow]:
    """Existence, activity and committed offsets of `group_ids` (absent groups: not active, no
    offsets); for the ids in `share_groups` (recorded as share groups) the share-partition start
    offsets. A group whose description fails counts as active: restore never guesses."""
    wanted = set(group_ids)
    listed = [g for g in gateway.list_groups() if g.group_id in wanted]
    described = gateway.describe_groups(listed) if listed else {}
    share = sorted(wanted & set(share_groups))
    others = sorted(wanted - set(share))
    fetched = dict(gateway.fetch_offsets(others)) if others else {}
    if share:
        fetched.update(gateway.fetch_share_offsets(share))
    result: dict[str, GroupNow] = {}
    for group_id in sorted(wanted):
        listing = next((g for g in listed if g.group_id == group_id), None)
        offsets: dict[TopicPartition, int] = {}
        answer = fetched.get(group_id)
        if answer is not None and answer.error is None:
            offsets = {tp: info.offset for tp, info in answer.offsets.items() if info.offset >= 0}
        if listing is None:
            result[group_id] = GroupNow(bool(offsets), False, "absent", 0, offsets)
            continue
        description = described.get(group_id)
        if description is None or description.error is not None:
            error = description.error if description else "no answer"
            result[group_id] = GroupNow(True, True, f"undescribable ({error})", 0, offsets)
            continue
        active = description.member_count > 0 or description.state not in INACTIVE_STATES
        result[group_id] = GroupNow(True, active, description.state.value, description.member_count, offsets)
    return result


def alter_share_offsets(
    gateway: KafkaGateway, group_id: str, offsets: Sequence[RecordedOffset]
) -> Mapping[TopicPartition, str | None]:
    """AlterShareGroupOffsets of the recorded start offsets: per partition None (set) or the
    broker's error name (a group-level error, e.g. NON_EMPTY_GROUP, for every partition)."""
    group_error, answers = gateway.alter_share_offsets(group_id, {o.tp: o.offset for o in offsets})
    if group_error is not None:
        return {o.tp: group_error.name for o in offsets}
    return {o.tp: (None if answers.get(o.tp) is None else str(answers[o.tp])) for o in offsets}


def commit_offsets(
    settings: ConnectionSettings, group_id: str, offsets: Sequence[RecordedOffset]
) -> Mapping[TopicPartition, str | None]:
    """Admin OffsetCommit of `offsets` (with leader epoch and metadata) for `group_id`: per
    partition None (committed) or the broker's error name. Raises KafkaUnavailable (or a
    subclass) when the call fails as a whole (adapters/client_errors.py)."""
    from kafka import TopicPartition as KafkaTopicPartition  # client libraries load only here
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    with client_errors_translated(settings, "could not commit offsets on"):
        client = KafkaAdminClient(**kafka_python_config(settings))
        try:
            answer = client.alter_group_offsets(
                group_id,
                {
                    KafkaTopicPartition(o.topic, o.partition): OffsetAndMetadata(
                        o.offset, o.metadata, -1 if o.leader_epoch is None else o.leader_epoch
                    )
                    for o in offsets
                },
            )
        finally:
            client.close()
    results: dict[TopicPartition, str | None] = {}
    for o in offsets:
        error = answer.get(KafkaTopicPartition(o.topic, o.partition))
        name = getattr(error, "__name__", str(error)) if error is not None else "NO_ANSWER"
        results[o.tp] = None if name == "NoError" else name
    return results


def log_end_offsets(
    settings: ConnectionSettings, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """Each partition's current end offset (ListOffsets latest). Partitions the broker does not
    answer for (a deleted topic, no Describe) are left out: their end is unknown. Raises
    KafkaUnavailable (or a subclass) when the call fails as a whole."""
    from confluent_kafka import TopicPartition as CKTopicPartition  # client libraries load only here
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._listoffsets import OffsetSpec  # the class admin re-exports untyped

    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    ends: dict[TopicPartition, int] = {}
    with client_errors_translated(settings, "could not read the partitions' end offsets on"):
        config: dict[str, Any] = {**confluent_config(settings)}
        config["logger"] = logging.getLogger("groupwarden.librdkafka")
        admin = AdminClient(config)
        timeout = settings.api_timeout_ms / 1000
        futures = admin.list_offsets(
            {CKTopicPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in wanted},  # type: ignore[no-untyped-call]
            request_timeout=timeout,
        )
        for ck_tp, future in futures.items():
            try:
                answer = future.result(timeout=timeout + 5)
            except Exception:  # this partition unanswered (unknown topic, not authorized): unknown end
                continue
            ends[TopicPartition(ck_tp.topic, ck_tp.partition)] = int(answer.offset)
    return ends

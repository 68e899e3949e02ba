"""The I/O half of restore: read the groups' current state through the gateway, and commit offsets
as an admin (OffsetCommit with no member / generation -1, i.e. kafka-python's
`KafkaAdminClient.alter_group_offsets`, the same call as `kafka-consumer-groups --reset-offsets`).

The gateway port has no commit call (groupwarden itself never commits), so the commit uses
kafka-python directly with the gateway's connection settings. The broker accepts an admin commit
only while the group has no active members; otherwise it answers an error per partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from groupwarden.audit.records import RecordedOffset
from groupwarden.audit.restore import GroupNow
from groupwarden.cleanup.connection import ConnectionSettings
from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.core.snapshot import GroupState, TopicPartition

INACTIVE_STATES = frozenset({GroupState.EMPTY, GroupState.DEAD})


def current_state(gateway: KafkaGateway, group_ids: Sequence[str]) -> dict[str, GroupNow]:
    """Existence, activity and committed offsets of `group_ids` (absent groups: not active, no
    offsets). A group whose description fails counts as active: restore never guesses."""
    wanted = set(group_ids)
    listed = [g for g in gateway.list_groups() if g.group_id in wanted]
    described = gateway.describe_groups(listed) if listed else {}
    fetched = gateway.fetch_offsets(sorted(wanted)) if wanted else {}
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


def commit_offsets(
    settings: ConnectionSettings, group_id: str, offsets: Sequence[RecordedOffset]
) -> Mapping[TopicPartition, str | None]:
    """Admin OffsetCommit of `offsets` (with leader epoch and metadata) for `group_id`: per
    partition None (committed) or the broker's error name. Raises on connection failures."""
    from kafka import TopicPartition as KafkaTopicPartition  # client libraries load only here
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    client = KafkaAdminClient(**settings.kafka_python_config())
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

"""A gateway that lists the groups once per cluster pass (tenant checks and the gather share it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from groupwarden.cleanup.gateway import (
    DescribedGroup,
    GroupOffsets,
    KafkaError,
    KafkaGateway,
    ListedGroup,
    OffsetDeleteAnswer,
    OffsetDeletion,
    SendGuard,
)
from groupwarden.connectivity.retry import RetryObserver
from groupwarden.core.snapshot import TopicPartition
from groupwarden.offsets_log.ledger import OffsetsLogRecord


class ListedOnce:
    """The gateway with its first ListGroups answer kept: the run lists once, for choosing the
    relevant peers and for the snapshot."""

    def __init__(self, gateway: KafkaGateway) -> None:
        self._gateway = gateway
        self._listed: Sequence[ListedGroup] | None = None

    def list_groups(self) -> Sequence[ListedGroup]:
        if self._listed is None:
            self._listed = self._gateway.list_groups()
        return self._listed

    def cluster_id(self) -> str:
        return self._gateway.cluster_id()

    def describe_groups(self, groups: Sequence[ListedGroup]) -> Mapping[str, DescribedGroup]:
        return self._gateway.describe_groups(groups)

    def fetch_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        return self._gateway.fetch_offsets(group_ids)

    def list_topics(self) -> frozenset[str]:
        return self._gateway.list_topics()

    def fetch_share_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        return self._gateway.fetch_share_offsets(group_ids)

    def delete_share_offsets(
        self, group_id: str, topics: Sequence[str], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[str, KafkaError | None]]:
        return self._gateway.delete_share_offsets(group_id, topics, before_send)

    def alter_share_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        return self._gateway.alter_share_offsets(group_id, offsets)

    def delete_groups(
        self, group_ids: Sequence[str], before_send: SendGuard | None = None
    ) -> Mapping[str, KafkaError | None]:
        return self._gateway.delete_groups(group_ids, before_send)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        return self._gateway.delete_offsets(group_id, partitions, before_send)

    def delete_offsets_many(
        self, requests: Sequence[OffsetDeletion], before_send: SendGuard | None = None
    ) -> Mapping[str, OffsetDeleteAnswer]:
        return self._gateway.delete_offsets_many(requests, before_send)

    def read_offsets_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        return self._gateway.read_offsets_log(start_positions)

    def read_share_state_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        return self._gateway.read_share_state_log(start_positions)

    def observe_retries(self, observer: RetryObserver | None) -> None:
        self._gateway.observe_retries(observer)

    def close(self) -> None:
        self._gateway.close()

"""`KafkaAdminGateway`: the `KafkaGateway` port on a real cluster.

Admin API calls go through kafka-python 3.x (`AdminSession`), batched per group coordinator:
DescribeGroups (classic), ConsumerGroupDescribe (KIP-848, our own protocol definition),
OffsetFetch v8+ (multi-group, KIP-709) and DeleteGroups (KIP-229) send one request per
coordinator and chunk of `max_groups_per_request` groups, not one per group; `request_counts`
shows it. `__consumer_offsets` is read with confluent-kafka (`OffsetsLogReader`, faster).

Per-item results: a group's broker error is returned in its answer and never fails the others.
Only a cluster we cannot reach or authenticate to at all raises (`KafkaUnavailable`,
`KafkaAuthenticationFailed`).
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest
from kafka.protocol.consumer import OffsetDeleteRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest

from groupwarden.adapters import consumer_group_describe as cgd
from groupwarden.adapters import share_groups, streams_groups
from groupwarden.adapters.client_errors import error_from_code, exception_text, is_retriable, is_transient
from groupwarden.adapters.kafka_admin_session import AdminSession, Outcome, SendGuard
from groupwarden.adapters.list_groups import ListGroupsRows, list_groups_request
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.gateway import (
    CommittedOffsetInfo,
    DescribedGroup,
    GroupOffsets,
    KafkaError,
    KafkaUnavailable,
    ListedGroup,
    OffsetDeleteAnswer,
    OffsetDeletion,
)
from groupwarden.connectivity.retry import RetryObserver
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.core.snapshot import TopicPartition
from groupwarden.offsets_log.ledger import OffsetsLogRecord
from groupwarden.offsets_log.share_state import SHARE_STATE_TOPIC

# OffsetDelete requests in flight per coordinator (one group each): below kafka-python's default
# max_in_flight_requests_per_connection (5), so a wave never fails its excess with NodeNotReady.
OFFSET_DELETES_IN_FLIGHT = 4
_NO_ANSWER = KafkaError("MISSING_FROM_RESPONSE", message="no answer for this group")


class KafkaAdminGateway:
    """The Kafka gateway on a real cluster. Connects lazily; `close()` releases the clients."""

    def __init__(self, settings: ConnectionSettings, *, max_groups_per_request: int = 1000) -> None:
        self.settings = settings
        diagnose = self._diagnose if settings.uses_sasl or settings.uses_ssl else None
        self._session = AdminSession(settings, max_groups_per_request, diagnose)
        self._reader: OffsetsLogReader | None = None
        self._share_state_reader: OffsetsLogReader | None = None

    def _diagnose(self) -> BaseException | None:
        timeout_s = min(5.0, self.settings.api_timeout_ms / 1000)
        return OffsetsLogReader(self.settings).diagnose(timeout_s)

    @property
    def request_counts(self) -> Counter[str]:
        """Admin requests sent, by API name (e.g. `DescribeGroups`, `OffsetFetch`)."""
        return self._session.request_counts

    def observe_retries(self, observer: RetryObserver | None) -> None:
        self._session.on_retry = observer
        for reader in (self._reader, self._share_state_reader):
            if reader is not None:
                reader.on_retry = observer

    def close(self) -> None:
        self._reader = self._share_state_reader = None
        self._session.close()

    def __enter__(self) -> KafkaAdminGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- cluster ---------------------------------------------------------------------------------

    def cluster_id(self) -> str:
        async def fetch() -> str:
            response = await self._session.send_retrying(
                lambda: MetadataRequest(topics=[], allow_auto_topic_creation=False)
            )
            return str(response.cluster_id or "")

        return self._session.run(fetch)

    def list_topics(self) -> frozenset[str]:
        return self._session.run(self._list_topics)

    async def _list_topics(self) -> frozenset[str]:
        # Topics we may not Describe are absent: the answer is "the topics we can see".
        response = await self._session.send_retrying(_all_topics_metadata)
        return frozenset(t.name for t in response.topics if t.error_code == 0 and t.name)

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        """Topic id -> name of the topics we can see (Metadata v10+, KIP-516): `__share_group_state`
        keys name topics by id."""
        return self._session.run(self._topic_names_by_id)

    async def _topic_names_by_id(self) -> dict[uuid.UUID, str]:
        response = await self._session.send_retrying(_all_topics_metadata)
        return {
            t.topic_id: t.name
            for t in response.topics
            if t.error_code == 0 and t.name and isinstance(getattr(t, "topic_id", None), uuid.UUID)
        }

    def list_groups(self) -> Sequence[ListedGroup]:
        """ListGroups from every broker (v5: group types, KIP-848; v4: states, KIP-518).

        A broker that cannot answer, or answers a retriable error (COORDINATOR_LOAD_IN_PROGRESS
        while it loads the groups it took over), is asked again with backoff until the deadline,
        metadata refreshed between tries; then the whole listing fails (KafkaUnavailable): the
        groups it coordinates would be missing. A listing counts only when every broker that
        metadata names answered in the same round: a node that failed over hands its groups to
        the others, whose earlier answers did not hold them yet. After such a failover, rounds
        are repeated until two agree (a new coordinator can answer before it lists its groups).

        Metadata is refreshed before the first round and after each one. The client's cached
        metadata is refreshed only every few minutes unless an error asks: a long-lived gateway
        (the operator's) would list only the nodes it knew, and a node that restarted and took its
        `__consumer_offsets` partitions back (no error reaches the client) would be left out with
        all its groups. A broker that appears during a round makes that round a failover one."""

        async def list_all() -> list[ListedGroup]:
            session = self._session
            deadline = session.deadline()
            failover = False
            listed: dict[str, ListedGroup] = {}  # every complete round since the failover
            previous: set[str] | None = None
            await session.refresh_metadata()
            while True:  # metadata is fresh here: refreshed after the last round (and by backoff)
                asked = self._broker_ids()
                seen, failures = await self._list_round(asked)
                await session.refresh_metadata()
                joined = not self._broker_ids() <= asked  # a node (re)joined while we listed
                failover = failover or joined
                if failures:
                    failover, previous = True, None
                    # A broker that refuses for good (e.g. not authorized) ends it at once.
                    broker, reason, retriable = min(failures, key=lambda failure: failure[2])
                    if not retriable or not await session.backoff(
                        deadline, f"ListGroups on broker {broker}", reason
                    ):
                        raise KafkaUnavailable(f"ListGroups failed on broker {broker}: {reason}")
                    continue
                if not failover:
                    return list(seen.values())
                # After a failover, the node that took a __consumer_offsets partition over may
                # answer before it has started loading it (no error, none of its groups): list
                # again until two complete rounds agree, keeping every group a round listed (a
                # group deleted meanwhile is described Dead and planned as nothing).
                listed.update(seen)
                if previous == set(seen) and not joined:
                    return list(listed.values())
                previous = None if joined else set(seen)
                if not await session.backoff(deadline, "ListGroups (confirming after a failover)", ""):
                    return list(listed.values())

        return self._session.run(list_all)

    def _broker_ids(self) -> set[Any]:
        return {b.node_id for b in self._session.manager.cluster.brokers()}

    async def _list_round(
        self, brokers: set[Any]
    ) -> tuple[dict[str, ListedGroup], list[tuple[Any, str, bool]]]:
        """One ListGroups to each of `brokers`: the groups, and (broker, reason, retriable) of each
        broker that did not answer with its list."""
        session = self._session
        sent = [(b, session.send(list_groups_request(states_filter=[], types_filter=[]), b)) for b in brokers]
        seen: dict[str, ListedGroup] = {}
        failures: list[tuple[Any, str, bool]] = []
        for broker, future in sent:
            try:
                answer: ListGroupsRows = await future
            except Errors.KafkaError as exc:
                reason = self.settings.redact(exception_text(exc))
                failures.append((broker, reason, is_transient(exc)))
                continue
            error = error_from_code(answer.error_code)
            if error is not None:
                failures.append((broker, str(error), is_retriable(error)))
                continue
            for group in answer.rows:
                seen[group.group_id] = group
        if not brokers:
            failures.append(("(none)", "metadata names no broker", True))
        return seen, failures

    # -- describe --------------------------------------------------------------------------------

    def describe_groups(self, groups: Sequence[ListedGroup]) -> Mapping[str, DescribedGroup]:
        return self._session.run(self._describe_groups, list(groups))

    async def _describe_groups(self, groups: list[ListedGroup]) -> dict[str, DescribedGroup]:
        listed = {g.group_id: g for g in groups}
        out: dict[str, DescribedGroup] = {}
        classic: list[str] = []
        consumer: list[str] = []
        share: list[str] = []
        streams: list[str] = []
        for group in groups:
            if group.group_type == "consumer":
                consumer.append(group.group_id)
            elif group.group_type == "share":
                share.append(group.group_id)
            elif group.group_type == "streams":
                streams.append(group.group_id)
            elif group.group_type in ("classic", ""):  # "" = a broker without ListGroups v5
                classic.append(group.group_id)
            else:
                out[group.group_id] = cgd.undescribed(group)  # unknown types: out of scope
        if streams:
            # StreamsGroupDescribe only: classic DescribeGroups v0-5 calls a streams group "Dead".
            for group_id, result in (await self._describe_streams(streams)).items():
                out[group_id] = (
                    cgd.failed(listed[group_id], result) if isinstance(result, KafkaError) else result
                )
        if share:
            # ShareGroupDescribe only: classic DescribeGroups v0-5 calls a share group "Dead".
            for group_id, result in (await self._describe_share(share)).items():
                out[group_id] = (
                    cgd.failed(listed[group_id], result) if isinstance(result, KafkaError) else result
                )
        topics: list[frozenset[str] | None] = []  # listed once, only when a regex needs it
        first = await self._describe_classic(classic) if classic else {}
        second = await self._describe_consumer(consumer, topics) if consumer else {}
        # A group can change protocol between ListGroups and the describe (online upgrade or
        # downgrade, KIP-848): each API answers GROUP_ID_NOT_FOUND for the other kind.
        retry_as_consumer = [g for g, r in first.items() if _not_found(r)]
        retry_as_classic = [g for g, r in second.items() if _not_found(r)]
        if retry_as_consumer:
            found = await self._describe_consumer(retry_as_consumer, topics)
            first.update({g: r for g, r in found.items() if not _not_found(r)})
        if retry_as_classic:
            found = await self._describe_classic(retry_as_classic)
            second.update({g: r for g, r in found.items() if not _not_found(r)})
        for group_id, result in {**first, **second}.items():
            out[group_id] = cgd.failed(listed[group_id], result) if isinstance(result, KafkaError) else result
        return out

    async def _describe_classic(self, group_ids: list[str]) -> dict[str, Outcome[DescribedGroup]]:
        def build(ids: list[str]) -> Any:
            return DescribeGroupsRequest(groups=ids, include_authorized_operations=False)

        def parse(response: Any) -> dict[str, Outcome[DescribedGroup]]:
            return {g.group_id: cgd.classic_group(g) for g in response.groups}

        return await self._session.per_coordinator(group_ids, build, parse)

    async def _describe_share(self, group_ids: list[str]) -> dict[str, Outcome[DescribedGroup]]:
        def parse(response: Any) -> dict[str, Outcome[DescribedGroup]]:
            return {g.group_id: share_groups.share_group(g) for g in response.groups}

        return await self._session.per_coordinator(group_ids, share_groups.describe_request, parse)

    async def _describe_streams(self, group_ids: list[str]) -> dict[str, Outcome[DescribedGroup]]:
        def parse(response: Any) -> dict[str, Outcome[DescribedGroup]]:
            return {g.group_id: streams_groups.streams_group(g) for g in response.groups}

        return await self._session.per_coordinator(group_ids, streams_groups.describe_request, parse)

    async def _describe_consumer(
        self, group_ids: list[str], topics: list[frozenset[str] | None]
    ) -> dict[str, Outcome[DescribedGroup]]:
        def build(ids: list[str]) -> Any:
            return cgd.ConsumerGroupDescribeRequest(group_ids=ids, include_authorized_operations=False)

        def parse(response: Any) -> dict[str, Outcome[Any]]:
            return {g.group_id: error_from_code(g.error_code, g.error_message) or g for g in response.groups}

        raw = await self._session.per_coordinator(group_ids, build, parse)
        if not topics and any(cgd.has_regex(r) for r in raw.values() if not isinstance(r, KafkaError)):
            try:
                topics.append(await self._list_topics())
            except Errors.KafkaError:
                topics.append(None)  # regex groups then have an unknown subscription
        known = topics[0] if topics else None
        return {g: r if isinstance(r, KafkaError) else cgd.consumer_group(r, known) for g, r in raw.items()}

    # -- offsets ---------------------------------------------------------------------------------

    def fetch_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        def build(ids: list[str]) -> Any:
            groups = [OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None) for g in ids]
            # v8 is the first multi-group version (KIP-709); v10 answers with topic ids only.
            return OffsetFetchRequest(groups=groups, require_stable=False, min_version=8, max_version=9)

        async def fetch() -> dict[str, Outcome[GroupOffsets]]:
            return await self._session.per_coordinator(list(group_ids), build, _parse_offset_fetch)

        results = self._session.run(fetch)
        return {
            g: GroupOffsets(g, {}, error=r) if isinstance(r, KafkaError) else r for g, r in results.items()
        }

    def fetch_share_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        """Share-partition start offsets (DescribeShareGroupOffsets, API 90), batched per coordinator."""

        async def fetch() -> dict[str, Outcome[GroupOffsets]]:
            return await self._session.per_coordinator(
                list(group_ids), share_groups.offsets_request, share_groups.parse_offsets
            )

        results = self._session.run(fetch)
        return {
            g: GroupOffsets(g, {}, error=r) if isinstance(r, KafkaError) else r for g, r in results.items()
        }

    # -- deletes ---------------------------------------------------------------------------------

    def delete_groups(
        self, group_ids: Sequence[str], before_send: SendGuard | None = None
    ) -> Mapping[str, KafkaError | None]:
        """DeleteGroups (KIP-229): the broker deletes only Empty groups (else NON_EMPTY_GROUP).
        Retried through a failover, `before_send` asked before every send (`per_coordinator`)."""

        def build(ids: list[str]) -> Any:
            return DeleteGroupsRequest(groups_names=ids)

        def parse(response: Any) -> dict[str, Outcome[None]]:
            return {r.group_id: error_from_code(r.error_code) for r in response.results}

        async def delete() -> dict[str, Outcome[None]]:
            return await self._session.per_coordinator(
                list(group_ids), build, parse, before_send=before_send or _always_send
            )

        return self._session.run(delete)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        """OffsetDelete (KIP-496), one group per request (the API has no batch form). The broker
        refuses subscribed topics per partition (GROUP_SUBSCRIBED_TO_TOPIC) and non-consumer
        classic groups with members as a whole (NON_EMPTY_GROUP)."""
        return self.delete_offsets_many([(group_id, partitions)], before_send)[group_id]

    def delete_offsets_many(
        self, requests: Sequence[OffsetDeletion], before_send: SendGuard | None = None
    ) -> Mapping[str, OffsetDeleteAnswer]:
        """Each group's OffsetDelete (one group a request: the API has no batch form) in one
        `per_coordinator` call: OFFSET_DELETES_IN_FLIGHT requests in flight per coordinator,
        every send guarded by `before_send`, a group retried alone, never re-sent once its answer
        was lost."""
        partitions_of = {g: list(dict.fromkeys(ps)) for g, ps in requests}
        answers: dict[str, OffsetDeleteAnswer] = {g: (None, {}) for g, ps in partitions_of.items() if not ps}
        wanted = [g for g, ps in partitions_of.items() if ps]

        def build(chunk: list[str]) -> Any:
            (group_id,) = chunk
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in partitions_of[group_id]:
                by_topic[tp.topic].append(tp.partition)
            topic_cls = OffsetDeleteRequest.OffsetDeleteRequestTopic
            partition_cls = topic_cls.OffsetDeleteRequestPartition
            topics = [
                topic_cls(name=t, partitions=[partition_cls(partition_index=p) for p in ps])
                for t, ps in by_topic.items()
            ]
            return OffsetDeleteRequest(group_id=group_id, topics=topics)

        def parse(
            chunk: list[str], response: Any
        ) -> dict[str, Outcome[dict[TopicPartition, KafkaError | None]]]:
            (group_id,) = chunk
            error = error_from_code(response.error_code)
            if error is not None:
                return {group_id: error}
            return {
                group_id: {
                    TopicPartition(t.name, p.partition_index): error_from_code(p.error_code)
                    for t in response.topics
                    for p in t.partitions
                }
            }

        async def delete() -> dict[str, Outcome[dict[TopicPartition, KafkaError | None]]]:
            return await self._session.per_coordinator(
                wanted,
                build,
                None,
                before_send=before_send or _always_send,
                chunk_size=1,
                in_flight=OFFSET_DELETES_IN_FLIGHT,
                parse_chunk=parse,
            )

        results = self._session.run(delete) if wanted else {}
        missing = KafkaError("MISSING_FROM_RESPONSE", message="the broker did not answer for this partition")
        for group_id in wanted:
            answer = results.get(group_id, _NO_ANSWER)
            if isinstance(answer, KafkaError):
                answers[group_id] = (answer, {})
            else:
                answers[group_id] = (None, {tp: answer.get(tp, missing) for tp in partitions_of[group_id]})
        return answers

    def delete_share_offsets(
        self, group_id: str, topics: Sequence[str], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[str, KafkaError | None]]:
        """DeleteShareGroupOffsets (API 92): the group's share state of whole topics. The broker
        refuses a share group with members as a whole (NON_EMPTY_GROUP)."""
        wanted = list(dict.fromkeys(topics))
        if not wanted:
            return None, {}

        def parse(response: Any) -> dict[str, Outcome[dict[str, KafkaError | None]]]:
            return {group_id: share_groups.parse_delete_offsets(response)}

        async def delete() -> dict[str, Outcome[dict[str, KafkaError | None]]]:
            return await self._session.per_coordinator(
                [group_id],
                lambda _ids: share_groups.delete_offsets_request(group_id, wanted),
                parse,
                before_send=before_send or _always_send,
            )

        result = self._session.run(delete)[group_id]
        if isinstance(result, KafkaError):
            return result, {}
        missing = KafkaError("MISSING_FROM_RESPONSE", message="the broker did not answer for this topic")
        return None, {t: result.get(t, missing) for t in wanted}

    def alter_share_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        """AlterShareGroupOffsets (API 91): start offsets of an Empty share group (the broker
        creates the group if it does not exist; NON_EMPTY_GROUP while it has members)."""
        if not offsets:
            return None, {}

        def parse(response: Any) -> dict[str, Outcome[dict[TopicPartition, KafkaError | None]]]:
            return {group_id: share_groups.parse_alter_offsets(response)}

        async def alter() -> dict[str, Outcome[dict[TopicPartition, KafkaError | None]]]:
            return await self._session.per_coordinator(
                [group_id], lambda _ids: share_groups.alter_offsets_request(group_id, offsets), parse
            )

        result = self._session.run(alter)[group_id]
        if isinstance(result, KafkaError):
            return result, {}
        missing = KafkaError("MISSING_FROM_RESPONSE", message="the broker did not answer for this partition")
        return None, {tp: result.get(tp, missing) for tp in offsets}

    # -- __consumer_offsets ----------------------------------------------------------------------

    def read_offsets_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        """See `OffsetsLogReader.read`: read_committed, every partition, no group, bounded."""
        if self._reader is None:
            self._reader = OffsetsLogReader(self.settings)
            self._reader.on_retry = self._session.on_retry
        return self._reader.read(start_positions)

    def read_share_state_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        """`__share_group_state`, read exactly like `__consumer_offsets` (its own reader)."""
        if self._share_state_reader is None:
            self._share_state_reader = OffsetsLogReader(self.settings, topic=SHARE_STATE_TOPIC)
            self._share_state_reader.on_retry = self._session.on_retry
        return self._share_state_reader.read(start_positions)


def _parse_offset_fetch(response: Any) -> dict[str, Outcome[GroupOffsets]]:
    answer: dict[str, Outcome[GroupOffsets]] = {}
    top = error_from_code(response.error_code)
    for group in response.groups:
        error = top or error_from_code(group.error_code)
        offsets: dict[TopicPartition, CommittedOffsetInfo] = {}
        for topic in group.topics if error is None else ():
            for p in topic.partitions:
                # One unreadable partition makes the group's picture incomplete: report the group
                # as failed rather than plan on part of it.
                error = error or error_from_code(p.error_code)
                if p.committed_offset < 0:
                    continue  # no committed offset
                epoch = p.committed_leader_epoch
                offsets[TopicPartition(topic.name, p.partition_index)] = CommittedOffsetInfo(
                    offset=p.committed_offset,
                    leader_epoch=None if epoch is None or epoch < 0 else epoch,
                    metadata=p.metadata or "",
                )
        answer[group.group_id] = error if error is not None else GroupOffsets(group.group_id, offsets)
    return answer


def _all_topics_metadata() -> Any:
    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


def _always_send() -> str | None:
    """The guard of a destructive call whose caller has none (a shell run)."""
    return None


def _not_found(result: object) -> bool:
    return isinstance(result, KafkaError) and result.name == "GROUP_ID_NOT_FOUND"

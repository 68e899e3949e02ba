"""Describe answers -> `DescribedGroup`: classic DescribeGroups (API 15) and, for KIP-848 groups,
ConsumerGroupDescribe (API 69), which kafka-python 3.x does not ship.

kafka-python builds protocol classes from Kafka-style JSON message schemas; ours live in
`groupwarden.adapters.kafka_schemas` (written from the Kafka protocol definition). Declaring the
response class registers it for API key 69, so the connection decodes the answer for us.

Subscriptions, conservatively (the engine reads None as "unknown: never delete offsets"):
- classic `consumer` groups: union of the members' ConsumerProtocolSubscription topics, decoded by
  our codec (only the v0 prefix; trailing bytes ignored). The broker only sends member metadata in
  state Stable, so a rebalancing group's subscription is None. Other protocol types are opaque: None.
- simple groups (protocol type ""): no members, the empty set.
- KIP-848 groups: SubscribedTopicNames plus the topics of the current and target assignments. A
  member with a SubscribedTopicRegex: the broker resolves it with RE2/J against the topics that
  exist, asynchronously; we add every existing topic that Python's `re.fullmatch` matches (a
  superset of the broker's resolution in practice: topics created since the broker's last
  refresh count as subscribed). A regex Python cannot compile cleanly (RE2-only syntax such as
  `\\pL` or POSIX classes, which Python would warn about or misread) or an unknown topic list
  makes the group's subscription None. The broker still refuses OffsetDelete of subscribed topics
  (GROUP_SUBSCRIBED_TO_TOPIC, KIP-848), so a mismatch can only cost a skipped action, never data.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from kafka.protocol.api_message import ApiMessage

from groupwarden.adapters.client_errors import error_from_code
from groupwarden.cleanup.gateway import DescribedGroup, KafkaError, ListedGroup
from groupwarden.core.snapshot import GroupKind, GroupState
from groupwarden.offsets_log import parse_consumer_protocol_subscription

_SCHEMAS = "groupwarden.adapters.kafka_schemas"


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """ConsumerGroupDescribe (API 69, KIP-848): fields `group_ids`, `include_authorized_operations`."""


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    """Groups[error_code, error_message, group_id, group_state, ..., members[member_id, ...,
    subscribed_topic_names, subscribed_topic_regex, assignment, target_assignment]]."""


GROUP_KINDS = {
    "classic": GroupKind.CLASSIC,
    "consumer": GroupKind.CONSUMER,
    "share": GroupKind.SHARE,
    "streams": GroupKind.STREAMS,
}


def listed_kind(listed: ListedGroup) -> GroupKind:
    """The kind ListGroups implies (classic with an empty protocol type = simple group)."""
    kind = GROUP_KINDS.get(listed.group_type.lower(), GroupKind.CLASSIC if not listed.group_type else None)
    if kind is None:
        return GroupKind.UNKNOWN
    if kind is GroupKind.CLASSIC and listed.protocol_type == "":
        return GroupKind.SIMPLE
    return kind


def failed(listed: ListedGroup, error: KafkaError) -> DescribedGroup:
    """A group whose description failed: what ListGroups said, plus the error."""
    state = GroupState.DEAD if error.name == "GROUP_ID_NOT_FOUND" else listed.state
    return DescribedGroup(
        group_id=listed.group_id,
        kind=listed_kind(listed),
        state=state,
        protocol_type=listed.protocol_type,
        member_count=0,
        subscribed_topics=None,
        error=error,
    )


def undescribed(listed: ListedGroup) -> DescribedGroup:
    """Share/streams (out of scope) and unknown group types: never described, never touched."""
    return DescribedGroup(
        group_id=listed.group_id,
        kind=listed_kind(listed),
        state=listed.state,
        protocol_type=listed.protocol_type,
        member_count=0,
        subscribed_topics=None,
    )


def classic_group(group: Any) -> DescribedGroup | KafkaError:
    """One DescribeGroups answer (v0-v6). v6 reports unknown/KIP-848 groups as GROUP_ID_NOT_FOUND;
    v0-v5 as state Dead with no error, which we turn into the same error."""
    error = error_from_code(group.error_code, getattr(group, "error_message", None))
    if error is not None:
        return error
    state = GroupState.parse(group.group_state)
    if state is GroupState.DEAD:
        return KafkaError(name="GROUP_ID_NOT_FOUND", code=69, message="group is Dead")
    protocol_type = group.protocol_type or ""
    members = list(group.members)
    subscribed: frozenset[str] | None
    if protocol_type == "":
        subscribed = frozenset()
    elif protocol_type == "consumer":
        subscribed = _union(parse_consumer_protocol_subscription(m.member_metadata) for m in members)
    else:
        subscribed = None  # opaque protocol (connect, ...): never parsed, never acted on
    return DescribedGroup(
        group_id=group.group_id,
        kind=GroupKind.SIMPLE if protocol_type == "" else GroupKind.CLASSIC,
        state=state,
        protocol_type=protocol_type,
        member_count=len(members),
        subscribed_topics=subscribed,
    )


def consumer_group(group: Any, topics: frozenset[str] | None) -> DescribedGroup | KafkaError:
    """One ConsumerGroupDescribe answer. `topics` (existing topics) is only needed for regexes."""
    error = error_from_code(group.error_code, group.error_message)
    if error is not None:
        return error
    members = list(group.members)
    names: set[str] = set()
    unknown = False
    for member in members:
        names.update(member.subscribed_topic_names or ())
        for assignment in (member.assignment, member.target_assignment):
            if assignment is not None:
                names.update(tp.topic_name for tp in assignment.topic_partitions or () if tp.topic_name)
        regex = member.subscribed_topic_regex
        if regex:
            matched = regex_matches(regex, topics)
            if matched is None:
                unknown = True
            else:
                names.update(matched)
    state = GroupState.parse(group.group_state)
    return DescribedGroup(
        group_id=group.group_id,
        kind=GroupKind.CONSUMER,
        state=state,
        protocol_type="consumer",
        member_count=len(members),
        subscribed_topics=None if unknown else frozenset(names),
    )


def has_regex(group: Any) -> bool:
    return any(m.subscribed_topic_regex for m in group.members)


def regex_matches(regex: str, topics: Iterable[str] | None) -> frozenset[str] | None:
    """Existing topics the (RE2/J) regex fully matches; None when we cannot be sure."""
    if topics is None:
        return None
    compiled = _compile(regex)
    if compiled is None:
        return None
    return frozenset(t for t in topics if compiled.fullmatch(t))


@lru_cache(maxsize=1024)
def _compile(regex: str) -> re.Pattern[str] | None:
    # Any warning (e.g. FutureWarning "Possible nested set" for RE2's [[:alpha:]]) means Python
    # reads the pattern differently from RE2/J: treat as unknown rather than guess.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return re.compile(regex)
        except (re.error, Warning, RecursionError, OverflowError):
            return None


def _union(parts: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    topics: set[str] = set()
    for part in parts:
        if part is None:
            return None
        topics.update(part)
    return frozenset(topics)

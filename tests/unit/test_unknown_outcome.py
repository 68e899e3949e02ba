"""A deletion that was sent but never answered (connection reset, timeout) is `Unknown`, not
`Failed`: the broker may have executed it (pure classification; the real reset is proven through
Toxiproxy in tests/e2e/test_operator_proxy_faults.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from groupwarden.cleanup.execute import classify
from groupwarden.cleanup.gateway import KafkaError
from groupwarden.core.plan import (
    Action,
    ActionKind,
    ActionOutcome,
    PartitionOutcome,
    ResultKind,
    summarize_outcomes,
)
from groupwarden.core.policy import RuleName
from groupwarden.core.snapshot import GroupKind, TimestampSource, TopicPartition

pytestmark = pytest.mark.unit

LOST = KafkaError("KafkaConnectionError", retriable=True, message="socket disconnected", unanswered=True)


def test_an_unanswered_request_is_unknown_and_a_refusal_is_still_a_refusal() -> None:
    assert classify(LOST) is ResultKind.UNKNOWN
    assert classify(KafkaError("KafkaConnectionError", retriable=True)) is ResultKind.FAILED
    # A broker answer wins over the transport: these were answered.
    assert classify(KafkaError("NON_EMPTY_GROUP", 68, unanswered=True)) is ResultKind.SKIPPED_BECAME_ACTIVE
    assert classify(KafkaError("GROUP_ID_NOT_FOUND", 69, unanswered=True)) is ResultKind.NOT_FOUND


def test_unknown_is_never_hidden_by_other_partition_results_and_is_counted() -> None:
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    action = Action(
        ActionKind.DELETE_OFFSETS,
        "g",
        GroupKind.SIMPLE,
        RuleName.SIMPLE_GROUP_OFFSET_RETENTION,
        timedelta(hours=1),
        "why",
        datetime(2026, 11, 24, tzinfo=UTC),
        TimestampSource.OFFSETS_LOG,
        timedelta(hours=2),
        (tp0, tp1),
    )
    partitions = (
        PartitionOutcome(tp0, ResultKind.FAILED, "x"),
        PartitionOutcome(tp1, ResultKind.UNKNOWN, str(LOST)),
    )
    outcome = ActionOutcome.from_partitions(action, partitions, retriable=True)
    assert outcome.result is ResultKind.UNKNOWN and outcome.retriable
    summary = summarize_outcomes([outcome])
    assert summary.unknown == 1 and summary.has_failures and summary.offsets_deleted == 0

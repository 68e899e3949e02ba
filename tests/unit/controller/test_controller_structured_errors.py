"""The controller decides on the Kafka error itself (`KafkaError.name` / `is_authorization`), never on
the text users see: an authorization failure whose text lacks the protocol name is still one, and
a text that mentions it does not make an error one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from controller_harness import DAY_MS, make_harness, observe_quietly, policy_body, run_async

from groupwarden.cleanup.gateway import KafkaError
from groupwarden.core.plan import Action, ActionKind, ActionOutcome, PartitionOutcome, ResultKind
from groupwarden.core.policy import RuleName
from groupwarden.core.snapshot import GroupKind, TimestampSource, TopicPartition
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

RULES = {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d", "simpleGroupOffsetRetention": "1d"}
LIMITS = {"maxDeletionRatio": 1}
# An authorization failure under a client's class name: its text never says AUTHORIZATION_FAILED.
DENIED_QUIETLY = KafkaError("GroupAuthorizationFailedError", 30, message="the principal may not do this")
# Not an authorization failure, though its text mentions one.
MENTIONS_IT = KafkaError(
    "UNKNOWN_SERVER_ERROR", -1, message="a proxy logged GROUP_AUTHORIZATION_FAILED earlier"
)


def cluster() -> FakeKafka:
    fake = FakeKafka(topics={"orders"})
    old = fake.now_ms - 3 * DAY_MS
    fake.add_group("ci-old", offsets={("orders", 0): 5}, committed_at_ms=old, empty_since_ms=old)
    fake.add_group("svc", subscribed=["orders"], offsets={("orders", 0): 1})  # Stable: described
    return fake


def test_the_texts_used_by_these_tests_say_what_they_must() -> None:
    assert "AUTHORIZATION_FAILED" not in str(DENIED_QUIETLY) and DENIED_QUIETLY.is_authorization
    assert "AUTHORIZATION_FAILED" in str(MENTIONS_IT) and not MENTIONS_IT.is_authorization


@pytest.mark.parametrize(
    ("error", "reason", "event"),
    [
        (DENIED_QUIETLY, "AuthorizationFailed", "AuthorizationFailed"),
        (MENTIONS_IT, "PartialFailure", "ActionFailed"),
    ],
    ids=["authorization-without-the-word", "the-word-without-authorization"],
)
def test_a_failed_deletion_is_an_authorization_failure_by_its_error_not_its_text(
    tmp_path: Path, error: KafkaError, reason: str, event: str
) -> None:
    h = make_harness(tmp_path, cluster())
    h.fake.fail("ci-old", "delete_group", error)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce"))
        await h.reconcile("p")

    run_async(scenario)
    ready = h.condition("p")
    assert ready["reason"] == reason and str(error) in ready["message"]  # the text users see stays
    # The action's own event (the run-level AuthorizationFailed event names the group too).
    failed = [e for e in h.events.events if e.message.startswith("DeleteGroup of group ci-old")]
    assert [(e.type, e.reason) for e in failed] == [("Warning", event)]
    assert failed[0].message == f"DeleteGroup of group ci-old failed: {error}"


@pytest.mark.parametrize(
    ("error", "reason"),
    [(DENIED_QUIETLY, "AuthorizationFailed"), (MENTIONS_IT, "DryRun")],
    ids=["authorization-without-the-word", "the-word-without-authorization"],
)
def test_a_describe_failure_is_an_authorization_failure_by_its_error_not_its_text(
    tmp_path: Path, error: KafkaError, reason: str
) -> None:
    h = make_harness(tmp_path, cluster())
    h.fake.fail("svc", "describe", error)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        await h.reconcile("p")

    run_async(scenario)
    assert h.condition("p")["reason"] == reason
    if reason == "AuthorizationFailed":
        message = h.condition("p")["message"]
        assert message.startswith(f"the Kafka principal is not authorized: describing group svc: {error};")


def test_a_deleteoffsets_outcome_keeps_the_first_failed_partitions_error() -> None:
    action = Action(
        ActionKind.DELETE_OFFSETS,
        "g",
        GroupKind.CLASSIC,
        RuleName.UNSUBSCRIBED_OFFSET_RETENTION,
        timedelta(days=1),
        "unsubscribed",
        datetime(2026, 1, 1, tzinfo=UTC),
        TimestampSource.OBSERVED,
        timedelta(days=2),
        (TopicPartition("a", 0), TopicPartition("a", 1)),
    )
    denied = KafkaError("TOPIC_AUTHORIZATION_FAILED", 29)
    outcome = ActionOutcome.from_partitions(
        action,
        (
            PartitionOutcome(TopicPartition("a", 0), ResultKind.DELETED),
            PartitionOutcome(TopicPartition("a", 1), ResultKind.FAILED, str(denied), denied),
        ),
    )
    assert (outcome.result, outcome.error, outcome.kafka_error) == (ResultKind.FAILED, str(denied), denied)


def test_a_skip_says_who_refused_by_whether_kafka_answered_not_by_its_text(tmp_path: Path) -> None:
    """The broker's NON_EMPTY_GROUP (a KafkaError on the outcome) and the re-check's drop before any
    request (none) are told apart by the outcome's data."""
    h = make_harness(tmp_path, cluster())
    h.fake.fail("ci-old", "delete_group", KafkaError("NON_EMPTY_GROUP", 68))

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce"))
        await h.reconcile("p")

    run_async(scenario)
    skipped = [e for e in h.events.events if e.reason == "ActionSkipped"]
    assert [e.message for e in skipped] == [
        "Did not delete group ci-old: a consumer came back (NON_EMPTY_GROUP); nothing lost"
    ]


def test_a_share_group_refused_by_kafka_may_have_lost_its_start_offsets_and_says_so() -> None:
    """Kafka deletes a share group's state before the group: a NON_EMPTY_GROUP answer does not mean
    nothing was lost (docs/kafka-gateway.md). The re-check's drop (no request sent) still does."""
    from groupwarden.controller.events import SHARE_STATE_MAY_BE_GONE, outcome_events

    action = Action(
        ActionKind.DELETE_GROUP,
        "queue",
        GroupKind.SHARE,
        RuleName.EMPTY_GROUP_RETENTION,
        timedelta(days=1),
        "Empty",
        datetime(2026, 1, 1, tzinfo=UTC),
        TimestampSource.OBSERVED,
        timedelta(days=2),
    )
    refused = KafkaError("NON_EMPTY_GROUP", 68)
    by_kafka = ActionOutcome(action, ResultKind.SKIPPED_BECAME_ACTIVE, str(refused), kafka_error=refused)
    by_recheck = ActionOutcome(action, ResultKind.SKIPPED_BECAME_ACTIVE, "changed since the plan")
    [kafka_event] = outcome_events([by_kafka])
    [recheck_event] = outcome_events([by_recheck])
    assert kafka_event.message.endswith(SHARE_STATE_MAY_BE_GONE) and "nothing lost" not in kafka_event.message
    assert recheck_event.message.endswith("nothing lost")

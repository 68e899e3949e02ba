"""Streams groups (KIP-1071) on the real broker, with a real Kafka Streams application (Kafka's
WordCountDemo, `group.protocol=streams`) and `kafka-streams-groups` as the oracle.

A policy naming `streams` deletes an abandoned app's Empty group past retention while a running app
stays; `groupwarden restore` puts the committed offsets back and the restarted app resumes exactly
(its word count proves no record was processed twice); an app coming back between plan and delete
loses nothing; offsets of a topic the running app's topology no longer reads go, its source and
repartition topics' offsets stay. Policies that do not name `streams` never touch them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.execute import execute_plan
from groupwarden.core.engine import decide
from groupwarden.core.plan import ActionKind, ResultKind
from groupwarden.core.snapshot import GroupKind, TopicPartition
from gwtest.kafka import commit_offsets, create_topics, produce
from gwtest.plans import (
    default_policy_only_reports,
    enforce_policy,
    plan_past_retention,
    restore_with_cli,
    snapshot_of,
    typed_policy_deletes,
)
from gwtest.streams import (
    INPUT_TOPIC,
    latest_count,
    produce_lines,
    streams_group_states_with_tool,
    unique_word,
    wordcount_app,
)
from gwtest.wait import wait_for


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    with open_gateway(bootstrap) as gateway:
        answer = gateway.fetch_offsets([group])[group]
    assert answer.error is None, answer.error
    return {(tp.topic, tp.partition): info.offset for tp, info in answer.offsets.items()}


def abandoned_app(bootstrap: str, app_id: str, word: str, tmp_path: Path) -> dict[tuple[str, int], int]:
    """An app that counted `word` once, committed and stopped: its streams group is Empty."""
    with wordcount_app(bootstrap, app_id, tmp_path):
        produce_lines(bootstrap, [word])
        wait_for(lambda: latest_count(bootstrap, word) == 1, timeout=60, what=f"{app_id} counted {word}")
        wait_for(
            lambda: any(t == INPUT_TOPIC for t, _ in committed(bootstrap, app_id)),
            timeout=30,
            what=f"{app_id} committed",
        )
    wait_for(
        lambda: streams_group_states_with_tool(bootstrap, app_id).get(app_id) == "Empty",
        timeout=60,
        what="Empty",
    )
    return committed(bootstrap, app_id)


def test_abandoned_app_is_deleted_running_app_untouched_and_restore_resumes_exactly(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    prefix = unique_name("streams-cli")
    abandoned, running = f"{prefix}-abandoned", f"{prefix}-running"
    word = unique_word()
    recorded = abandoned_app(kafka_bootstrap, abandoned, word, tmp_path)

    with wordcount_app(kafka_bootstrap, running, tmp_path):
        default_policy_only_reports(
            tmp_path, kafka_bootstrap, prefix, {abandoned: "streams", running: "streams"}
        )
        intent, outcome = typed_policy_deletes(tmp_path, kafka_bootstrap, prefix, "streams", abandoned, 60)
        listed = streams_group_states_with_tool(kafka_bootstrap, abandoned, running)
        assert abandoned not in listed and listed[running] == "Stable"

    assert (intent["groupKind"], intent["protocolType"], outcome["result"]) == (
        "streams",
        "streams",
        "Deleted",
    )
    assert {(p["topic"], p["partition"]): p["offset"] for p in intent["partitions"]} == recorded

    restore_with_cli(tmp_path, kafka_bootstrap, abandoned)
    assert committed(kafka_bootstrap, abandoned) == recorded

    # The app comes back on the restored group: it counts only the new line. Had it started over
    # (auto.offset.reset=earliest), it would have counted the old line again: 3, not 2.
    with wordcount_app(kafka_bootstrap, abandoned, tmp_path):
        produce_lines(kafka_bootstrap, [word])
        wait_for(lambda: (latest_count(kafka_bootstrap, word) or 0) >= 2, timeout=60, what="the new count")
        wait_for(
            lambda: (
                committed(kafka_bootstrap, abandoned).get((INPUT_TOPIC, 0), 0) > recorded[(INPUT_TOPIC, 0)]
                or committed(kafka_bootstrap, abandoned).get((INPUT_TOPIC, 1), 0) > recorded[(INPUT_TOPIC, 1)]
            ),
            timeout=30,
            what="the app committed past the restored offsets",
        )
        assert latest_count(kafka_bootstrap, word) == 2


def test_an_app_back_between_plan_and_delete_loses_nothing(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app = unique_name("streams-race")
    recorded = abandoned_app(kafka_bootstrap, app, unique_word(), tmp_path)
    with open_gateway(kafka_bootstrap) as gateway:
        policy = enforce_policy(kafka_bootstrap, "streams", [app], emptyGroupRetention="1s")
        plan = plan_past_retention(gateway, policy, app)
        assert [(a.kind, a.group_kind) for a in plan.actions] == [
            (ActionKind.DELETE_GROUP, GroupKind.STREAMS)
        ]
        with wordcount_app(kafka_bootstrap, app, tmp_path):
            [outcome] = execute_plan(gateway, plan)
            assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE, outcome
            assert committed(kafka_bootstrap, app).items() >= recorded.items()


def test_offsets_of_a_topic_the_topology_no_longer_reads_go_while_the_app_runs(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app, old_topic = unique_name("streams-unsub"), unique_name("streams-old-input")
    recorded = abandoned_app(kafka_bootstrap, app, unique_word(), tmp_path)
    # An earlier topology of the app read `old_topic` (committed while the group was Empty).
    create_topics(kafka_bootstrap, [old_topic])
    produce(kafka_bootstrap, old_topic, 4)
    commit_offsets(kafka_bootstrap, app, {(old_topic, 0): 2, (old_topic, 1): 2})
    time.sleep(1.2)
    with open_gateway(kafka_bootstrap) as gateway, wordcount_app(kafka_bootstrap, app, tmp_path):
        now = datetime.now(UTC)
        snapshot = snapshot_of(gateway, app, now=now)
        [facts] = snapshot.groups
        assert INPUT_TOPIC in (facts.subscribed_topics or ()) and old_topic not in (
            facts.subscribed_topics or ()
        )
        plan = decide(
            enforce_policy(kafka_bootstrap, "streams", [app], unsubscribedOffsetRetention="1s"), snapshot, now
        )
        [action] = plan.actions
        assert action.kind is ActionKind.DELETE_OFFSETS
        assert {tp.topic for tp in action.partitions} == {old_topic}
        [outcome] = execute_plan(gateway, plan)
        assert outcome.result is ResultKind.DELETED, outcome
        # The broker's own rule agrees: a source topic of the current topology is refused.
        error, answers = gateway.delete_offsets(app, [TopicPartition(INPUT_TOPIC, 0)])
        assert error is None and answers[TopicPartition(INPUT_TOPIC, 0)].name == "GROUP_SUBSCRIBED_TO_TOPIC"  # type: ignore[union-attr]
        assert gateway.request_counts["StreamsGroupDescribe"] >= 1
        assert gateway.request_counts["DescribeGroups"] == 0  # never the classic describe for it
        after = committed(kafka_bootstrap, app)
        assert not any(t == old_topic for t, _ in after)
        assert {tp: o for tp, o in after.items() if tp in recorded}.keys() == recorded.keys()
        assert streams_group_states_with_tool(kafka_bootstrap, app)[app] == "Stable"

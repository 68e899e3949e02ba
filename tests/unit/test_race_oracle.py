"""The race campaign's oracle (bench/race_oracle.py) on synthetic client records: a verdict is drawn
only when the intervals decide it, and every overlap that does not is `ambiguous-window`."""

from __future__ import annotations

import math

from bench import race_oracle as oracle

Out = oracle.Outcome
A0, B0 = ("a", 0), ("b", 0)


def plan(**changes):  # type: ignore[no-untyped-def]
    fields = {
        "now": 100.0,
        "log_reads": (100.1,),
        "checks": ((99.9, 100.0),),
        "retention": 1.0,
        "groups_to_delete": frozenset({"g"}),
        "offsets_to_delete": {},
    }
    fields.update(changes)
    return oracle.PlanView(**fields)


def member(subscribed_at: float, assigned_at: float, close_at: float, topics=("a",)):  # type: ignore[no-untyped-def]
    session = oracle.Session("g", "c", "classic")
    session.subscribes.append((subscribed_at, subscribed_at + 0.001, frozenset(topics)))
    session.assignments.append((assigned_at, frozenset((t, 0) for t in topics)))
    session.close_called, session.close_returned = close_at, close_at + 0.05
    return session


def delete_group(start: float, end: float, error: str | None = None):  # type: ignore[no-untyped-def]
    return oracle.Deletion("groups", "g", (), start, end, error)


def verdict(sessions=(), commits=(), deletions=(), view=None):  # type: ignore[no-untyped-def]
    [found] = oracle.judge(["g"], view or plan(), list(sessions), list(commits), list(deletions))
    return found.outcome


def test_a_group_deleted_while_a_member_certainly_was_in_it_is_wrongful() -> None:
    assert (
        verdict([member(100.0, 100.2, 101.0)], deletions=[delete_group(100.5, 100.51)]) is Out.WRONGFUL_ACTIVE
    )


def test_a_member_joining_during_the_request_is_ambiguous_not_correct() -> None:
    # Subscribed before the answer came back, assignment seen after: the broker may have run the
    # deletion before or after the join.
    assert (
        verdict([member(100.5, 100.6, 101.0)], deletions=[delete_group(100.45, 100.52)])
        is Out.AMBIGUOUS_WINDOW
    )


def test_a_member_that_left_before_the_request_makes_it_correct_or_stale() -> None:
    left_before_plan = member(98.0, 98.1, 99.0)
    assert verdict([left_before_plan], deletions=[delete_group(100.5, 100.51)]) is Out.DELETED_CORRECTLY
    came_and_went_after_plan = member(100.2, 100.25, 100.3)
    assert (
        verdict([came_and_went_after_plan], deletions=[delete_group(100.5, 100.51)])
        is Out.DELETED_AFTER_ACTIVITY
    )


def test_refusals_are_classified_by_the_brokers_answer() -> None:
    assert verdict(deletions=[delete_group(100.5, 100.51, "NON_EMPTY_GROUP")]) is Out.SKIPPED_BECAME_ACTIVE
    assert verdict(deletions=[delete_group(100.5, 100.51, "GROUP_ID_NOT_FOUND")]) is Out.NOT_FOUND
    assert verdict() is Out.FAILED  # planned, no request and no reported result
    [found] = oracle.judge(["g"], plan(), [], [], [], {"g": "SkippedBecameActive"})
    assert found.outcome is Out.SKIPPED_CHANGED
    [found] = oracle.judge(["g"], plan(groups_to_delete=frozenset()), [], [], [])
    assert found.outcome is Out.NOT_ELIGIBLE


def commit(start: float, end: float, offsets=None, accepted=True):  # type: ignore[no-untyped-def]
    offsets = offsets or {A0: 7}
    return oracle.Commit("g", offsets, start, end, frozenset(offsets) if accepted else frozenset())


def test_lost_commits_are_judged_against_the_last_read_and_decision_before_the_request() -> None:
    deletion = [delete_group(100.5, 100.51)]
    # Acknowledged before the read that preceded the request: groupwarden could have seen it.
    view = plan(log_reads=(100.1, 100.4))
    assert verdict(commits=[commit(100.2, 100.21)], deletions=deletion, view=view) is Out.WRONGFUL_LOST_COMMIT
    # Made after that read and before the request: the window no client API can close.
    assert (
        verdict(commits=[commit(100.45, 100.46)], deletions=deletion, view=view)
        is Out.LOST_IN_RESIDUAL_WINDOW
    )
    # During the request itself: either order is possible.
    assert verdict(commits=[commit(100.49, 100.505)], deletions=deletion, view=view) is Out.AMBIGUOUS_WINDOW
    # Older than the retention at the decision: the policy's own business.
    assert verdict(commits=[commit(98.0, 98.01)], deletions=deletion, view=view) is Out.DELETED_CORRECTLY
    # Across the decision's cut-off (its `now` is only known as an interval): ambiguous.
    assert verdict(commits=[commit(98.95, 98.96)], deletions=deletion, view=view) is Out.AMBIGUOUS_WINDOW
    # A refused commit cannot be lost (the attempt still shows a client was active since the plan).
    refused = commit(100.2, 100.21, accepted=False)
    assert verdict(commits=[refused], deletions=deletion, view=view) is Out.DELETED_AFTER_ACTIVITY
    # A re-check decided again later: the same commit is then older than the retention.
    later = plan(log_reads=(100.1, 101.4), checks=((99.9, 100.0), (101.35, 101.36)))
    assert verdict(commits=[commit(100.2, 100.21)], deletions=[delete_group(101.5, 101.51)], view=later) is (
        Out.DELETED_CORRECTLY
    )


def test_offsets_of_a_topic_the_member_certainly_subscribed_are_wrongful() -> None:
    session = member(100.0, 100.2, 101.0, topics=("a", "b"))
    deletion = oracle.Deletion("offsets", "g", (B0,), 100.5, 100.51, None, {B0: None})
    view = plan(groups_to_delete=frozenset(), offsets_to_delete={"g": frozenset({B0})})
    [found] = oracle.judge(["g"], view, [session], [], [deletion])
    assert found.outcome is Out.WRONGFUL_ACTIVE
    refused = oracle.Deletion("offsets", "g", (B0,), 100.5, 100.51, None, {B0: "GROUP_SUBSCRIBED_TO_TOPIC"})
    [found] = oracle.judge(["g"], view, [session], [], [refused])
    assert found.outcome is Out.SKIPPED_BECAME_ACTIVE


def test_a_resubscribed_member_stops_being_subscribed_only_once_it_saw_the_new_assignment() -> None:
    session = member(10.0, 10.2, math.inf, topics=("a", "b"))
    session.subscribes.append((20.0, 20.001, frozenset({"a"})))
    session.assignments.append((20.1, frozenset()))  # classic: revoked before the rejoin
    session.assignments.append((20.3, frozenset({A0})))  # the new generation's assignment
    certain, possible = session.subscribed("b")
    assert certain == [oracle.Interval(10.2, 20.0)]
    assert possible == [oracle.Interval(10.0, 20.3)]


def test_the_expected_offsets_follow_the_last_write_and_flag_overlaps() -> None:
    commits = [commit(1.0, 1.1, {A0: 5, B0: 5}), commit(3.0, 3.1, {A0: 9})]
    deletions = [oracle.Deletion("offsets", "g", (A0, B0), 2.0, 2.1, None, {A0: None, B0: None})]
    assert oracle.expected_offsets("g", commits, deletions) == {A0: 9, B0: None}
    overlapping = [commit(1.0, 1.1, {A0: 5}), commit(2.05, 2.2, {A0: 9})]
    expected = oracle.expected_offsets("g", overlapping, deletions)
    assert expected[A0] is oracle.AMBIGUOUS
    assert oracle.compare_with_broker("g", {A0: 9, B0: None}, {A0: 9}) == []
    [mismatch] = oracle.compare_with_broker("g", {A0: 9, B0: None}, {A0: 9, B0: 5})
    assert mismatch.outcome is Out.BROKER_MISMATCH


# Share groups (KIP-932) and streams groups (KIP-1071): the clients' records as the campaign makes
# them (bench/race_share_streams.py), judged by the same intervals.


def share_member(subscribed_at: float, first_records_at: float, close_at: float):  # type: ignore[no-untyped-def]
    """A share consumer: a poll that returned records proves the broker had assigned it."""
    session = oracle.Session("g", "s", "share")
    session.subscribes.append((subscribed_at, subscribed_at + 0.001, frozenset({"a"})))
    session.assignments.append((first_records_at, frozenset({A0})))
    session.close_called, session.close_returned = close_at, close_at + 0.05
    return session


def acknowledged(start: float, end: float, start_offset: int = 12):  # type: ignore[no-untyped-def]
    """An ACCEPT batch sent with commit_sync(): the start offset it moves to, in its window."""
    return commit(start, end, {A0: start_offset})


def share_verdict(sessions=(), commits=(), deletions=(), view=None):  # type: ignore[no-untyped-def]
    [found] = oracle.judge(
        ["g"], view or plan(), list(sessions), list(commits), list(deletions), share_groups=["g"]
    )
    return found.outcome


def test_a_share_group_deleted_while_a_share_consumer_certainly_was_a_member_is_wrongful() -> None:
    deletion = [delete_group(100.5, 100.51)]
    assert share_verdict([share_member(100.0, 100.2, 101.0)], deletions=deletion) is Out.WRONGFUL_ACTIVE
    # Subscribed, but no record yet when the request ran: possibly a member only.
    assert share_verdict([share_member(100.4, 100.6, 101.0)], deletions=deletion) is Out.AMBIGUOUS_WINDOW
    assert share_verdict([share_member(98.0, 98.1, 99.0)], deletions=deletion) is Out.DELETED_CORRECTLY


def test_share_acknowledgements_are_judged_against_the_share_offset_reads_not_the_log_reads() -> None:
    deletion = [delete_group(100.5, 100.51)]
    # The log was read late (100.45) but the start offsets only at 100.1: an acknowledgement at
    # 100.2 was invisible to every share read before the request: the residual window.
    view = plan(log_reads=(100.1, 100.45), share_reads=(100.1,))
    assert share_verdict(commits=[acknowledged(100.2, 100.21)], deletions=deletion, view=view) is (
        Out.LOST_IN_RESIDUAL_WINDOW
    )
    # A share read after it (the re-check's DescribeShareGroupOffsets) could have seen it.
    view = plan(log_reads=(100.1,), share_reads=(100.1, 100.4))
    assert share_verdict(commits=[acknowledged(100.2, 100.21)], deletions=deletion, view=view) is (
        Out.WRONGFUL_LOST_COMMIT
    )
    # The same acknowledgement in a classic group would be judged by the log reads.
    assert verdict(commits=[acknowledged(100.2, 100.21)], deletions=deletion, view=view) is (
        Out.LOST_IN_RESIDUAL_WINDOW
    )
    # Acknowledged during the request: either order.
    assert share_verdict(commits=[acknowledged(100.49, 100.505)], deletions=deletion, view=view) is (
        Out.AMBIGUOUS_WINDOW
    )


def test_share_start_offsets_on_the_broker_follow_the_acknowledgements_and_the_deletion() -> None:
    setup = acknowledged(1.0, 1.1, 5)
    deleted = delete_group(2.0, 2.1)
    after = acknowledged(3.0, 3.1, 9)  # a share consumer came back to the (new) group
    expected = oracle.expected_offsets("g", [setup], [deleted])
    assert expected == {A0: None}
    assert oracle.compare_with_broker("g", expected, {}) == []
    expected = oracle.expected_offsets("g", [setup, after], [deleted])
    assert expected == {A0: 9}
    [mismatch] = oracle.compare_with_broker("g", expected, {A0: 5})
    assert mismatch.outcome is Out.BROKER_MISMATCH


def test_a_refused_delete_of_a_share_group_may_have_taken_its_state_a_counted_kafka_loss() -> None:
    # Kafka deletes a share group's state before the group; a member that joins in between keeps
    # the group (NON_EMPTY_GROUP) without its start offsets.
    setup = acknowledged(1.0, 1.1, 5)
    refused = delete_group(2.0, 2.1, "NON_EMPTY_GROUP")
    expected = oracle.expected_offsets("g", [setup], [refused], share=True)
    assert expected == {A0: oracle.MaybeDeleted(5)}
    assert oracle.compare_with_broker("g", expected, {A0: 5}) == []
    [lost] = oracle.compare_with_broker("g", expected, {})
    assert lost.outcome is Out.SHARE_STATE_LOST_TO_A_REFUSED_DELETE and lost.outcome not in oracle.WRONGFUL
    [mismatch] = oracle.compare_with_broker("g", expected, {A0: 7})  # any other value still is one
    assert mismatch.outcome is Out.BROKER_MISMATCH
    # Not for other groups (their DeleteGroups is one write), nor before the refused delete.
    assert oracle.expected_offsets("g", [setup], [refused]) == {A0: 5}
    later = acknowledged(3.0, 3.1, 9)
    assert oracle.expected_offsets("g", [setup, later], [refused], share=True) == {A0: 9}


def streams_instance(started_at: float, assigned_at: float, close_at: float, lost_at: float = math.inf):  # type: ignore[no-untyped-def]
    """A KafkaStreams instance: its active tasks observed = the broker assigned them."""
    session = oracle.Session("g", "i", "streams")
    session.subscribes.append((started_at, started_at + 0.02, frozenset({"t"})))
    session.assignments.append((assigned_at, frozenset({("t", 0), ("t", 1)})))
    session.close_called, session.close_returned = close_at, close_at + 0.1
    session.lost_at = lost_at
    return session


def test_a_streams_group_deleted_while_an_instance_certainly_had_tasks_is_wrongful() -> None:
    deletion = [delete_group(100.5, 100.51)]
    assert verdict([streams_instance(95.0, 100.2, 101.0)], deletions=deletion) is Out.WRONGFUL_ACTIVE
    # Started (it joins with its first heartbeat) but tasks not yet seen: possibly in.
    assert verdict([streams_instance(100.3, 106.0, 107.0)], deletions=deletion) is Out.AMBIGUOUS_WINDOW
    # Left RUNNING without close() (a rebalance, or fenced) before the request: certain no more.
    assert verdict([streams_instance(95.0, 96.0, 101.0, lost_at=100.4)], deletions=deletion) is (
        Out.AMBIGUOUS_WINDOW
    )


def test_streams_commits_after_the_plan_that_the_deletion_removed_are_lost_commits() -> None:
    deletion = [delete_group(100.5, 100.51)]
    view = plan(log_reads=(100.1, 100.4))
    # [the last covered record processed, onCommit]: acknowledged before the re-check's read.
    processed_then_committed = commit(100.2, 100.3, {("t", 0): 12})
    assert verdict(commits=[processed_then_committed], deletions=deletion, view=view) is (
        Out.WRONGFUL_LOST_COMMIT
    )
    assert verdict(commits=[commit(100.42, 100.44, {("t", 0): 12})], deletions=deletion, view=view) is (
        Out.LOST_IN_RESIDUAL_WINDOW
    )


def test_the_broker_may_report_a_share_start_offset_one_acknowledgement_behind() -> None:
    # Kafka 4.3.1 persists the start offset as it was before the acknowledgement it writes: after
    # accepting [7, 9] it reports 7 or 10, never less than 7 or more than 10.
    batch = oracle.Commit("g", {A0: 10}, 1.0, 1.1, frozenset({A0}), floor={A0: 7})
    expected = oracle.expected_offsets("g", [batch], [])
    assert expected == {A0: oracle.Between(7, 10)}
    assert oracle.compare_with_broker("g", expected, {A0: 7}) == []
    assert oracle.compare_with_broker("g", expected, {A0: 10}) == []
    for wrong in ({A0: 6}, {A0: 11}, {}):
        [mismatch] = oracle.compare_with_broker("g", expected, wrong)
        assert mismatch.outcome is Out.BROKER_MISMATCH


def test_a_share_consumer_that_only_released_loses_nothing_but_may_recreate_the_state() -> None:
    # It joined the deleted group (state created at the log's end) and released record 40.
    released = oracle.Commit("g", {A0: 40}, 3.0, 3.1, frozenset({A0}), floor={A0: 0}, progress=False)
    deletions = [delete_group(2.0, 2.1)]
    expected = oracle.expected_offsets("g", [released], deletions)
    assert oracle.compare_with_broker("g", expected, {A0: 40}) == []
    assert oracle.compare_with_broker("g", expected, {A0: 38}) == []
    [mismatch] = oracle.compare_with_broker("g", expected, {A0: 41})
    assert mismatch.outcome is Out.BROKER_MISMATCH
    # Released after the plan, then the group deleted: a member came and went, nothing was lost.
    before = oracle.Commit("g", {A0: 40}, 100.2, 100.21, frozenset({A0}), floor={A0: 0}, progress=False)
    assert share_verdict(commits=[before], deletions=[delete_group(100.5, 100.51)]) is (
        Out.DELETED_AFTER_ACTIVITY
    )

"""`decide_many` over parts of a cluster's groups (core/parts.py) equals `decide_many` on the whole
cluster: actions, counts, skips (every one, with its detail) and what-if rows, for any split of the
groups, overlapping policies, limits, breakers, DryRun and suspended policies (hypothesis); and
`what_if` equals one evaluation of the whole snapshot per retention."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest
from core_factories import NOW, group, logged, policy, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from test_core_engine_properties import _AGES as AGES
from test_core_engine_properties import GROUP_IDS, policies, snapshots

from groupwarden.core.decide_many import decide_many
from groupwarden.core.engine import evaluate
from groupwarden.core.parts import (
    count_part,
    decide_in_parts,
    keys_need_breakers,
    merge_counts,
    merge_what_if,
)
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupMatcher
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.whatif import PausedGroup, WhatIfRow, what_if, with_single_rule

pytestmark = pytest.mark.unit

_PARTS = st.integers(1, 4)
_SPLIT = st.lists(st.integers(0, 3), min_size=len(GROUP_IDS), max_size=len(GROUP_IDS))


def _policy_sets() -> st.SearchStrategy[list[ConsumerGroupPolicy]]:
    return (
        st.integers(1, 3).flatmap(lambda n: st.tuples(*(policies(name=f"p{i}") for i in range(n)))).map(list)
    )


def _split(snap: ClusterSnapshot, parts: int, where: list[int]) -> list[ClusterSnapshot]:
    part_of = {group_id: where[i] % parts for i, group_id in enumerate(GROUP_IDS)}
    return [
        replace(snap, groups=tuple(g for g in snap.groups if part_of[g.group_id] == index))
        for index in range(parts)
    ]


@settings(max_examples=120, deadline=None)
@given(_policy_sets(), snapshots, _PARTS, _SPLIT)
def test_decide_in_parts_equals_decide_many(
    chosen: list[ConsumerGroupPolicy], snap: ClusterSnapshot, parts: int, where: list[int]
) -> None:
    expected = decide_many(chosen, snap, NOW)
    split = _split(snap, parts, where)
    assert decide_in_parts(chosen, split, replace(snap, groups=()), NOW) == expected


@settings(max_examples=60, deadline=None)
@given(_policy_sets(), snapshots, _PARTS, _SPLIT)
def test_the_oldest_candidates_are_found_again_when_a_breaker_refuses_for_others(
    chosen: list[ConsumerGroupPolicy], snap: ClusterSnapshot, parts: int, where: list[int]
) -> None:
    """When step 2 runs (a tripped policy shares groups with one that did not trip), the plans are
    still `decide_many`'s; and when it does not, step 1's keys were the right ones."""
    split = _split(snap, parts, where)
    counts = merge_counts((count_part(chosen, part, NOW)[1] for part in split), len(chosen))
    assert counts.totals == merge_counts([count_part(chosen, snap, NOW)[1]], len(chosen)).totals
    assert counts.groups == len(snap.groups)
    if keys_need_breakers(chosen, counts):
        assert decide_in_parts(chosen, split, replace(snap, groups=()), NOW) == decide_many(chosen, snap, NOW)


_PAUSES = st.lists(
    st.builds(
        PausedGroup,
        st.sampled_from(GROUP_IDS),
        st.integers(0, 40 * 86400).map(lambda s: timedelta(seconds=s)),
    ),
    max_size=6,
)
_RETENTIONS = st.lists(
    st.sampled_from([timedelta(hours=1), timedelta(days=1), timedelta(days=7)]), max_size=3
)


@settings(max_examples=60, deadline=None)
@given(_policy_sets(), snapshots, _PARTS, _SPLIT, _PAUSES, _RETENTIONS)
def test_what_if_over_parts_adds_up(
    chosen: list[ConsumerGroupPolicy],
    snap: ClusterSnapshot,
    parts: int,
    where: list[int],
    paused: list[PausedGroup],
    retentions: list[timedelta],
) -> None:
    part_of = {group_id: where[i] % parts for i, group_id in enumerate(GROUP_IDS)}
    split = _split(snap, parts, where)
    rows = [
        what_if(chosen, part, NOW, retentions, [p for p in paused if part_of[p.group] == index])
        for index, part in enumerate(split)
    ]
    assert merge_what_if(rows) == what_if(chosen, snap, NOW, retentions, paused)


def test_a_breaker_that_trips_for_another_policy_moves_its_limit() -> None:
    """`other` trips its breaker and so refuses the oldest groups `mine` would delete: step 1's
    guess (no breaker tripped) would cut `mine`'s limit at a group it may not delete."""
    short = {"emptyGroupRetention": "1d"}
    mine = policy(short, name="mine", limits={"maxGroupDeletionsPerRun": 1})
    other = policy(short, name="other", include=["ci-*"], limits={"maxDeletionRatio": 0.1})
    snap = snapshot(
        group("ci-1", empty_since=logged(days=10)),
        group("ci-2", empty_since=logged(days=9)),
        group("x-1", empty_since=logged(days=3)),
        group("x-2", empty_since=logged(days=2)),
    )
    parts = [replace(snap, groups=snap.groups[:2]), replace(snap, groups=snap.groups[2:])]
    counts = merge_counts((count_part([mine, other], part, NOW)[1] for part in parts), 2)
    assert keys_need_breakers([mine, other], counts)
    plans = decide_in_parts([mine, other], parts, replace(snap, groups=()), NOW)
    assert plans == decide_many([mine, other], snap, NOW)
    assert [a.group_id for a in plans[0].actions] == ["x-1"]


def _what_if_one_evaluation_each(
    chosen: list[ConsumerGroupPolicy],
    snap: ClusterSnapshot,
    retentions: list[timedelta],
    paused: list[PausedGroup],
) -> list[WhatIfRow]:
    """The what-if as written before its evaluations were narrowed: one `evaluate` of the whole
    snapshot per policy, rule and retention (the reference)."""
    rows = []
    for p in chosen:
        matcher = GroupMatcher.from_selector(p.spec.selector)
        mine = [x for x in paused if matcher.matches_id(x.group)]
        for rule in p.spec.rules.enabled():
            for retention in retentions:
                evaluation = evaluate(with_single_rule(p, rule, retention), snap, NOW)
                longer = [x for x in mine if x.pause > retention]
                rows.append(
                    WhatIfRow(
                        cluster_id=snap.cluster_id,
                        policy=p.ref,
                        rule=rule,
                        retention=retention,
                        groups=evaluation.groups_eligible,
                        offsets=evaluation.offsets_eligible,
                        offsets_in_groups=sum(len(c.group.offsets) for c in evaluation.group_candidates),
                        comeback_groups=len({x.group for x in longer}),
                        comebacks=len(longer),
                        groups_by_kind=dict(
                            sorted(Counter(c.group.kind.value for c in evaluation.group_candidates).items())
                        ),
                    )
                )
    return rows


# Retentions on the ages of the generated snapshots (equal, just under, just over) and the usual.
_ANY_RETENTIONS = st.lists(
    st.one_of(
        st.sampled_from([timedelta(seconds=s) for s in AGES if s > 0]),
        st.sampled_from([timedelta(seconds=s - 1) for s in AGES if s > 1]),
        st.sampled_from([timedelta(seconds=s + 1) for s in AGES if s >= 0]),
        st.sampled_from([timedelta(hours=1), timedelta(days=1), timedelta(days=7)]),
    ),
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(_policy_sets(), snapshots, _PAUSES, _ANY_RETENTIONS)
def test_what_if_equals_one_evaluation_per_retention(
    chosen: list[ConsumerGroupPolicy],
    snap: ClusterSnapshot,
    paused: list[PausedGroup],
    retentions: list[timedelta],
) -> None:
    """`what_if` evaluates a longer retention only on the groups with a verdict at a shorter one:
    its rows equal one evaluation of the whole snapshot per retention (any order, repeats)."""
    assert what_if(chosen, snap, NOW, retentions, paused) == _what_if_one_evaluation_each(
        chosen, snap, retentions, paused
    )

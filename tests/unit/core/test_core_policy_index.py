"""PolicyIndex finds exactly the matchers a plain loop over all matchers finds; a matcher accepts
the ids its globs accept (fnmatch, exclude wins), and `matching_any` those any matcher accepts."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.core.policy import GroupSelector
from groupwarden.core.selection import GroupMatcher, GroupScope, PolicyIndex, literal_prefix, matching_any

pytestmark = pytest.mark.unit

ALPHABET = "ab-1"
globs = st.text(alphabet=ALPHABET + "*?", min_size=0, max_size=5).filter(bool)
ids = st.text(alphabet=ALPHABET, min_size=0, max_size=7)
selectors = st.builds(
    lambda inc, exc: GroupSelector(include=inc, exclude=exc),
    st.lists(globs, min_size=1, max_size=3),
    st.lists(globs, max_size=2),
)


@given(st.lists(selectors, min_size=1, max_size=6), st.lists(ids, max_size=30))
@settings(max_examples=300, deadline=None)
def test_the_index_matches_like_a_loop_over_every_matcher(
    chosen: list[GroupSelector], group_ids: list[str]
) -> None:
    matchers = [GroupMatcher.from_selector(s) for s in chosen]
    index = PolicyIndex(matchers)
    scope = GroupScope.of(chosen)
    for group_id in group_ids:
        expected = [i for i, m in enumerate(matchers) if m.matches_id(group_id)]
        assert index.matching(group_id) == expected
        assert scope.accepts(group_id) == bool(expected)


def test_literal_prefix() -> None:
    assert literal_prefix("ci-*") == "ci-"
    assert literal_prefix("*") == ""
    assert literal_prefix("a[bc]d") == "a"
    assert literal_prefix("exact") == "exact"


def test_a_scope_covers_the_scopes_of_its_subsets_only() -> None:
    a, b = GroupSelector(include=["ci-*"]), GroupSelector(include=["perf-*"], exclude=["perf-keep"])
    both, only_a = GroupScope.of([a, b]), GroupScope.of([a])
    assert both.covers(only_a) and not only_a.covers(both)
    assert GroupScope.of([b, a]) == both and hash(GroupScope.of([b, a])) == hash(both)
    opaque = GroupScope.matching(lambda g: True)
    assert not both.covers(opaque) and opaque.covers(opaque)


@given(st.lists(selectors, max_size=4), st.lists(ids, max_size=30))
@settings(max_examples=300, deadline=None)
def test_matchers_accept_what_their_globs_accept(chosen: list[GroupSelector], group_ids: list[str]) -> None:
    matchers = [GroupMatcher.from_selector(s) for s in chosen]
    selects = matching_any(iter(matchers))  # any iterable: kept as a tuple
    for group_id in group_ids:
        expected = [
            any(fnmatch.fnmatchcase(group_id, g) for g in s.include)
            and not any(fnmatch.fnmatchcase(group_id, g) for g in s.exclude)
            for s in chosen
        ]
        assert [m.matches_id(group_id) for m in matchers] == expected
        assert selects(group_id) is any(expected)

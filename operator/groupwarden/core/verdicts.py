"""Verdicts that outlive a pass: a group whose facts did not change keeps its verdict until a time
threshold is crossed.

A rule's verdict on a group depends on the group's facts and on `now` only through comparisons of
`now` with a timestamp of the group plus a retention (`age >= retention`, `committed_at <=
now - retention`). So for the same facts, the verdict decided at `t0` holds for every `now` in
[t0, next_change), where `next_change` is the earliest `timestamp + retention` after `t0`. Facts
are compared by identity: the gather reuses a group's `GroupFacts` object only when nothing about
the group changed (cleanup/gather.py), so identity means "the same facts".

Reasons are written at plan time (`GroupDeletionCandidate.explain(now)`), so a kept candidate says
the age of its own plan. At 100k groups this turns a later pass's judging from 100k rule runs into
100k dictionary lookups; within one pass it also shares verdicts between policies with the same
rules.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from datetime import datetime, timedelta

from groupwarden.core.policy import RuleName
from groupwarden.core.rules import Verdict, judge_group
from groupwarden.core.snapshot import GroupFacts

# (facts the verdict was decided on, decided at, valid until (None: for ever), verdict)
_Entry = tuple[GroupFacts, datetime, datetime | None, Verdict]


def next_change(
    group: GroupFacts, retentions: Mapping[RuleName, timedelta], now: datetime
) -> datetime | None:
    """The earliest time after `now` at which any rule could judge these facts differently: some
    commit or Empty-since time of the group plus some retention (None: no such time). Earlier
    than needed is fine (a verdict is only recomputed), never later."""
    times = [o.committed_at.at for o in group.offsets if o.committed_at is not None]
    if group.empty_since is not None:
        times.append(group.empty_since.at)
    earliest: datetime | None = None
    for retention in set(retentions.values()):
        for at in times:
            try:
                threshold = at + retention
            except OverflowError:
                # Past datetime's range (a time the log dates in year 9999, see `log_time`): never
                # reached, no change from it.
                continue
            if threshold > now and (earliest is None or threshold < earliest):
                earliest = threshold
    return earliest


class VerdictCache:
    """Verdicts per (group id, rules), kept for the groups judged in the last pass.

    `judge` during a pass; `end_pass` afterwards drops the entries of groups that pass did not
    judge (deleted or no longer selected), so memory follows the selected groups."""

    __slots__ = ("_current", "_previous", "_rule_sets")

    def __init__(self) -> None:
        self._previous: dict[tuple[str, int], _Entry] = {}
        self._current: dict[tuple[str, int], _Entry] = {}
        # One small number per distinct set of rules: a key of (group id, int) hashes fast (a
        # tuple of enums and timedeltas would be hashed again at every lookup).
        self._rule_sets: dict[Hashable, int] = {}

    def rules_token(self, rules_key: Hashable) -> int:
        return self._rule_sets.setdefault(rules_key, len(self._rule_sets))

    def judge(
        self, group: GroupFacts, rules: dict[RuleName, timedelta], rules_token: int, now: datetime
    ) -> Verdict:
        """The rules' verdict on `group` at `now` (`rules_token`: from `rules_token(rules key)`)."""
        key = (group.group_id, rules_token)
        entry = self._current.get(key)
        if entry is None:
            entry = self._previous.get(key)
        if entry is not None:
            facts, decided_at, until, verdict = entry
            if facts is group and decided_at <= now and (until is None or now < until):
                self._current[key] = entry
                return verdict
        verdict = judge_group(group, rules, now)
        self._current[key] = (group, now, next_change(group, rules, now), verdict)
        return verdict

    def end_pass(self) -> None:
        self._previous, self._current = self._current, {}

    def __len__(self) -> int:
        return len(self._previous) + len(self._current)

"""Retention what-if: what each rule of a policy would make eligible under candidate retentions.

Pure: the same `evaluate` the plan uses, on a copy of the policy in which one rule is set to the
candidate retention and the others are off, so each count belongs to one rule. Counts are
eligibility (before per-run limits and the breaker): what the policy would delete over its runs.
The come-back risk pairs each candidate with the groups of the log history that came back after
being Empty longer than it (`groupwarden.offsets_log.history`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from groupwarden.core.engine import Evaluation, evaluate
from groupwarden.core.policy import ConsumerGroupPolicy, PolicyRef, RetentionRules, RuleName
from groupwarden.core.selection import GroupMatcher
from groupwarden.core.snapshot import ClusterSnapshot, GroupFacts

_FIELD_BY_RULE = {
    RuleName.EMPTY_GROUP_RETENTION: "empty_group_retention",
    RuleName.UNSUBSCRIBED_OFFSET_RETENTION: "unsubscribed_offset_retention",
    RuleName.SIMPLE_GROUP_OFFSET_RETENTION: "simple_group_offset_retention",
}


@dataclass(frozen=True)
class PausedGroup:
    """A group that was Empty for `pause` and then came back (from the log history)."""

    group: str
    pause: timedelta


@dataclass(frozen=True)
class WhatIfRow:
    cluster_id: str
    policy: PolicyRef
    rule: RuleName
    retention: timedelta
    groups: int  # groups eligible for DeleteGroups
    offsets: int  # partitions eligible for OffsetDelete (groups kept)
    offsets_in_groups: int  # committed offsets that go with the eligible groups
    comeback_groups: int  # selected groups that came back after a longer pause than `retention`
    comebacks: int  # such come-back events
    # `groups` per group type (GroupKind value), e.g. {"classic": 3, "share": 1}
    groups_by_kind: Mapping[str, int] = field(default_factory=dict)


def with_single_rule(
    policy: ConsumerGroupPolicy, rule: RuleName, retention: timedelta
) -> ConsumerGroupPolicy:
    """A copy of `policy` whose only rule is `rule` at `retention` (everything else unchanged)."""
    rules = RetentionRules.model_validate({_FIELD_BY_RULE[rule]: retention})
    spec = policy.spec.model_copy(update={"rules": rules})
    return policy.model_copy(update={"spec": spec})


def what_if(
    policies: Sequence[ConsumerGroupPolicy],
    snapshot: ClusterSnapshot,
    now: datetime,
    retentions: Sequence[timedelta],
    paused: Iterable[PausedGroup] = (),
) -> list[WhatIfRow]:
    """One row per policy x enabled rule x candidate retention.

    Each rule is evaluated at the candidate retentions from the shortest up, and at a longer one
    only on the groups that had a verdict (a candidate or a skip) at the shorter one: a verdict's
    dependence on the retention is `age >= retention` (or `committed at <= now - retention`), so
    a group with no verdict at some retention has none at any longer one (`judge_group`: skips
    do not depend on the retention, and candidates only shrink as it grows). The counts are
    those of `evaluate` on the whole snapshot at every retention
    (tests/unit/core/test_core_whatif.py checks it over arbitrary snapshots)."""
    history = list(paused)
    rows: list[WhatIfRow] = []
    ascending = sorted(range(len(retentions)), key=lambda i: retentions[i])
    for policy in policies:
        matcher = GroupMatcher.from_selector(policy.spec.selector)
        selected_history = [p for p in history if matcher.matches_id(p.group)]
        for rule in policy.spec.rules.enabled():
            found: dict[int, WhatIfRow] = {}
            judged: list[GroupFacts] | None = None  # None: every group of the snapshot
            for index in ascending:
                retention = retentions[index]
                single = with_single_rule(policy, rule, retention)
                evaluation = evaluate(single, snapshot, now, judged)
                found[index] = _row(snapshot, policy, rule, retention, evaluation, selected_history)
                with_verdict = {c.group.group_id for c in evaluation.group_candidates}
                with_verdict.update(c.group.group_id for c in evaluation.offset_candidates)
                with_verdict.update(s.group_id for s in evaluation.skipped)
                judged = [
                    g for g in (snapshot.groups if judged is None else judged) if g.group_id in with_verdict
                ]
            rows.extend(found[index] for index in range(len(retentions)))
    return rows


def _row(
    snapshot: ClusterSnapshot,
    policy: ConsumerGroupPolicy,
    rule: RuleName,
    retention: timedelta,
    evaluation: Evaluation,
    selected_history: Sequence[PausedGroup],
) -> WhatIfRow:
    longer = [p for p in selected_history if p.pause > retention]
    return WhatIfRow(
        cluster_id=snapshot.cluster_id,
        policy=policy.ref,
        rule=rule,
        retention=retention,
        groups=evaluation.groups_eligible,
        offsets=evaluation.offsets_eligible,
        offsets_in_groups=sum(len(c.group.offsets) for c in evaluation.group_candidates),
        comeback_groups=len({p.group for p in longer}),
        comebacks=len(longer),
        groups_by_kind=dict(sorted(Counter(c.group.kind.value for c in evaluation.group_candidates).items())),
    )

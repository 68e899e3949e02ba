"""The snapshot as it is after some deletions: what a fresh gather would see once they happened.

A cluster pass decides for every policy of a cluster on one snapshot, then executes the Enforce
plans one after another. Two overlapping Enforce policies can both plan the same deletion; the
second policy is decided again on the snapshot without what the first deleted, exactly as if it
had gathered after it (so nothing is deleted twice and nothing is reported twice).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from groupwarden.core.plan import ActionKind, ActionOutcome, ResultKind
from groupwarden.core.snapshot import ClusterSnapshot, TopicPartition

# UNKNOWN (sent, unanswered) counts as gone within the pass: a later policy does not send the
# same deletion again; the next pass reads what the broker really has.
_GONE = frozenset({ResultKind.DELETED, ResultKind.NOT_FOUND, ResultKind.UNKNOWN})


def without_deleted(snapshot: ClusterSnapshot, outcomes: Iterable[ActionOutcome]) -> ClusterSnapshot:
    """`snapshot` minus the groups and committed offsets that `outcomes` deleted (or found gone)."""
    groups_gone: set[str] = set()
    offsets_gone: dict[str, set[TopicPartition]] = {}
    for outcome in outcomes:
        action = outcome.action
        if action.kind is ActionKind.DELETE_GROUP:
            if outcome.result in _GONE:
                groups_gone.add(action.group_id)
        elif outcome.partitions:
            deleted = {p.partition for p in outcome.partitions if p.result in _GONE}
            offsets_gone.setdefault(action.group_id, set()).update(deleted)
        elif outcome.result in _GONE:
            offsets_gone.setdefault(action.group_id, set()).update(action.partitions)
    if not groups_gone and not any(offsets_gone.values()):
        return snapshot
    groups = []
    for group in snapshot.groups:
        if group.group_id in groups_gone:
            continue
        gone = offsets_gone.get(group.group_id)
        if gone:
            group = replace(group, offsets=tuple(o for o in group.offsets if o.partition not in gone))
        groups.append(group)
    return replace(snapshot, groups=tuple(groups))

"""Which groups a policy selects: include/exclude globs on the group id, plus group kinds."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from groupwarden.core.policy import GroupSelector
from groupwarden.core.snapshot import GroupFacts, GroupKind

# Only these kinds can ever be acted on; share/streams groups are out of scope (KIP-932, KIP-1071)
# and an unknown kind is never guessed at.
SELECTABLE_KINDS: frozenset[GroupKind] = frozenset({GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE})


def _compile(patterns: list[str]) -> tuple[re.Pattern[str], ...]:
    # fnmatch.translate + re: the same matching as fnmatch.fnmatchcase (case-sensitive on every OS),
    # compiled once per policy because a cluster can hold tens of thousands of groups.
    return tuple(re.compile(fnmatch.translate(pattern)) for pattern in patterns)


@dataclass(frozen=True)
class GroupMatcher:
    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]
    kinds: frozenset[GroupKind]

    @classmethod
    def from_selector(cls, selector: GroupSelector) -> GroupMatcher:
        kinds = frozenset(GroupKind(t.value) for t in selector.group_types) & SELECTABLE_KINDS
        return cls(_compile(selector.include), _compile(selector.exclude), kinds)

    def matches_id(self, group_id: str) -> bool:
        """Include matches and no exclude matches (exclude always wins)."""
        if not any(p.match(group_id) for p in self.include):
            return False
        return not any(p.match(group_id) for p in self.exclude)

    def selects(self, group: GroupFacts) -> bool:
        """The group is governed by the policy: id matches and its kind is one the policy selects."""
        return group.kind in self.kinds and self.matches_id(group.group_id)

"""Which groups a policy selects: include/exclude globs on the group id, plus group kinds."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from groupwarden.core.policy import GroupSelector
from groupwarden.core.snapshot import GroupFacts, GroupKind

# Only these kinds can ever be acted on (share and streams groups only when a policy names them);
# an unknown kind is never guessed at.
SELECTABLE_KINDS: frozenset[GroupKind] = frozenset(
    {GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE, GroupKind.SHARE, GroupKind.STREAMS}
)


def _compile(patterns: list[str]) -> tuple[re.Pattern[str], ...]:
    # fnmatch.translate + re: the same matching as fnmatch.fnmatchcase (case-sensitive on every OS),
    # compiled once per policy because a cluster can hold tens of thousands of groups.
    return tuple(re.compile(fnmatch.translate(pattern)) for pattern in patterns)


_WILDCARDS = re.compile(r"[*?\[]")


def literal_prefix(glob: str) -> str:
    """The text before a glob's first wildcard: every id it matches starts with it."""
    found = _WILDCARDS.search(glob)
    return glob if found is None else glob[: found.start()]


@dataclass(frozen=True)
class GroupMatcher:
    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]
    kinds: frozenset[GroupKind]
    # The literal prefix of each include glob (for `PolicyIndex`).
    include_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_selector(cls, selector: GroupSelector) -> GroupMatcher:
        kinds = frozenset(GroupKind(t.value) for t in selector.group_types) & SELECTABLE_KINDS
        prefixes = tuple(literal_prefix(g) for g in selector.include)
        return cls(_compile(selector.include), _compile(selector.exclude), kinds, prefixes)

    def matches_id(self, group_id: str) -> bool:
        """Include matches and no exclude matches (exclude always wins). Plain loops: the fleet
        audit asks once per group of a fleet, and a generator per call costs about as much as a
        glob's match."""
        for include in self.include:
            if include.match(group_id):
                break
        else:
            return False
        for exclude in self.exclude:  # noqa: SIM110 (no generator: see the docstring)
            if exclude.match(group_id):
                return False
        return True

    def selects(self, group: GroupFacts) -> bool:
        """The group is governed by the policy: id matches and its kind is one the policy selects."""
        return group.kind in self.kinds and self.matches_id(group.group_id)


def matching_any(matchers: Iterable[GroupMatcher]) -> Callable[[str], bool]:
    """Whether any of `matchers` accepts a group id (`matches_id`), with a plain loop (see there)."""
    frozen = tuple(matchers)

    def matches_any(group_id: str) -> bool:
        for matcher in frozen:  # noqa: SIM110 (no generator: see `GroupMatcher.matches_id`)
            if matcher.matches_id(group_id):
                return True
        return False

    return matches_any


Signature = tuple[tuple[str, ...], tuple[str, ...]]


class GroupScope:
    """The group ids that at least one of a set of selectors matches: what the offsets-log ledger
    of a cluster keeps and what a gather describes.

    Built from selectors it has an identity (their include/exclude globs), so a ledger kept for one
    policy set can tell whether it already covers another. One combined regex of every include
    glob rejects most ids of a big cluster in one match, whatever the number of policies.
    Built from a plain predicate (`matching`) it covers only itself.
    """

    __slots__ = ("_any_include", "_matchers", "_predicate", "signatures")

    def __init__(
        self,
        signatures: frozenset[Signature] | None,
        matchers: tuple[GroupMatcher, ...] = (),
        predicate: Callable[[str], bool] | None = None,
    ) -> None:
        self.signatures = signatures
        self._matchers = matchers
        self._predicate = predicate
        patterns = [p.pattern for m in matchers for p in m.include]
        self._any_include = re.compile("|".join(patterns)) if patterns else None

    @classmethod
    def of(cls, selectors: Iterable[GroupSelector]) -> GroupScope:
        chosen = {(tuple(s.include), tuple(s.exclude)): s for s in selectors}
        matchers = tuple(GroupMatcher.from_selector(s) for s in chosen.values())
        return cls(frozenset(chosen), matchers)

    @classmethod
    def matching(cls, predicate: Callable[[str], bool]) -> GroupScope:
        return cls(None, predicate=predicate)

    def accepts(self, group_id: str) -> bool:
        if self._predicate is not None:
            return self._predicate(group_id)
        if self._any_include is None or self._any_include.match(group_id) is None:
            return False
        return any(m.matches_id(group_id) for m in self._matchers)

    def covers(self, other: GroupScope) -> bool:
        """Every id `other` accepts, this scope accepts too (judged by the selectors' globs)."""
        if other is self:
            return True
        if self.signatures is None or other.signatures is None:
            return False
        return other.signatures <= self.signatures

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupScope):
            return NotImplemented
        if self.signatures is None or other.signatures is None:
            return self is other
        return self.signatures == other.signatures

    def __hash__(self) -> int:
        return hash(self.signatures) if self.signatures is not None else id(self)


class PolicyIndex:
    """Which of several matchers match a group id, at a cost that grows with the id and with the
    matchers that can match it, not with the number of matchers: include globs are indexed by
    their literal prefix (`ci-*` -> "ci-"), so 50 policies on one cluster do not mean 50 regex
    matches per group."""

    __slots__ = ("_by_prefix", "_lengths", "_matchers")

    def __init__(self, matchers: Sequence[GroupMatcher]) -> None:
        self._matchers = tuple(matchers)
        by_prefix: dict[str, list[int]] = {}
        for index, matcher in enumerate(matchers):
            for prefix in matcher.include_prefixes:
                indexes = by_prefix.setdefault(prefix, [])
                if index not in indexes:
                    indexes.append(index)
        self._by_prefix = by_prefix
        self._lengths = sorted({len(p) for p in by_prefix})

    def matching(self, group_id: str) -> list[int]:
        """Indexes (ascending) of the matchers whose include and exclude globs accept the id."""
        matchers = self._matchers
        if len(matchers) == 1:
            # the prefixes only narrow down whom to ask: with one matcher, ask it
            return [0] if matchers[0].matches_id(group_id) else []
        by_prefix = self._by_prefix
        candidates: set[int] = set()
        for length in self._lengths:
            if length > len(group_id):
                break
            found = by_prefix.get(group_id[:length])
            if found is not None:
                candidates.update(found)
        return sorted(i for i in candidates if matchers[i].matches_id(group_id))

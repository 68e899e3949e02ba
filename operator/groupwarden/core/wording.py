"""Counts in the sentences users read (status, events, the CLI's tables): `1 group`, `2 groups`,
`0 offsets`, and a clause about skipped items only when something was skipped."""

from __future__ import annotations

from groupwarden.core.plan import OutcomeSummary


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 group`, `0 groups`, `2 groups` (`plural` for nouns that do not take an `s`)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural if plural is not None else noun + 's'}"


def groups_and_offsets(groups: int, offsets: int) -> str:
    return f"{counted(groups, 'group')} and {counted(offsets, 'offset')}"


def deleted_before_that(done: OutcomeSummary) -> str:
    """The clause of a stopped run that says what its earlier steps deleted ("" when nothing)."""
    if not (done.groups_deleted or done.offsets_deleted):
        return ""
    return f"; deleted {groups_and_offsets(done.groups_deleted, done.offsets_deleted)} before that"

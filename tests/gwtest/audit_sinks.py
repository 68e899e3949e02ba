"""Audit sinks for tests of what a refused record stops."""

from __future__ import annotations

from typing import Any

from groupwarden.deletion_trail import TrailEntry


class RefusingSink:
    """Refuses the records of some groups, as a topic refuses a record over its size limit, and
    keeps the others: the same sink would have taken a later policy's records."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.records: list[dict[str, Any]] = []

    def write(self, entry: TrailEntry) -> None:
        if entry.record["group"] in self.refused:
            raise OSError(90, "Message too long")
        self.records.append(entry.record)

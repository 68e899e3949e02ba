"""What the audit found on one cluster (`ClusterAudit`): its groups and come-backs as the ledger
answered them, how far back its log reaches, and the plans and what-if rows decided on them; what
the driver writes (`outputs`, `report`).

The tasks decide (`fleet.decide`, `task_decide`); the reference path that decides every group in
one process with the core, the oracle of the tests and benchmarks, is
`groupwarden.testing.fleet_oracle`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from groupwarden.core.plan import Plan
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.whatif import WhatIfRow
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log.history import Comeback
from groupwarden.offsets_log.snapshot import LedgerAnswer


@dataclass(frozen=True)
class LogReach:
    """What the log of one cluster held: how far back the audit can see."""

    records: int = 0
    tombstones: int = 0
    replayed: int = 0
    corrupt: int = 0
    unknown: int = 0
    partitions: int = 0
    earliest_ms: int | None = None
    latest_ms: int | None = None

    @classmethod
    def of_partitions(cls, rows: Sequence[Mapping[str, Any]]) -> LogReach:
        """The reach of a cluster's log from its tasks' counter rows (`row_kind` "partition"
        of `TASK_ROW_SCHEMA`, as dicts): one per `__consumer_offsets` partition."""
        earliest = [r["earliest_ms"] for r in rows if r["earliest_ms"] is not None and r["earliest_ms"] >= 0]
        latest = [r["latest_ms"] for r in rows if r["latest_ms"] is not None and r["latest_ms"] >= 0]
        return cls(
            records=sum(int(r["records"] or 0) for r in rows),
            tombstones=sum(int(r["tombstones"] or 0) for r in rows),
            replayed=sum(int(r["replayed"] or 0) for r in rows),
            corrupt=sum(int(r["corrupt"] or 0) for r in rows),
            unknown=sum(int(r["unknown"] or 0) for r in rows),
            partitions=len(rows),
            earliest_ms=min(earliest) if earliest else None,
            latest_ms=max(latest) if latest else None,
        )


@dataclass
class ClusterAudit:
    source: ClusterSource
    answers: list[LedgerAnswer] = field(default_factory=list)
    comebacks: list[Comeback] = field(default_factory=list)
    reach: LogReach = field(default_factory=LogReach)
    positions: dict[int, int] = field(default_factory=dict)
    snapshot: ClusterSnapshot | None = None
    plans: list[Plan] = field(default_factory=list)
    what_if: list[WhatIfRow] = field(default_factory=list)
    # Totals over every group of the cluster (computed where the data is, not from `answers`,
    # which holds only the groups some policy selects).
    groups_by_kind: dict[str, int] = field(default_factory=dict)
    offset_count: int = 0
    comeback_count: int = 0
    # Idle-age histogram inputs: (kind, idle seconds at `now`, measured from) per selected group
    idle: list[tuple[str, float, str]] = field(default_factory=list)
    # The groups some policy selects (the snapshot's groups)
    groups_selected: int = 0
    # Decided in the tasks (`fleet.decide`): the plans' skips are in the `skips` table, not in
    # `plans` (their counts are: per plan, by reason here); the topics of the offsets the plans'
    # DeleteGroup actions remove (the report's reclaimed offsets).
    skips_in_table: bool = False
    skips_by_reason: list[dict[str, int]] = field(default_factory=list)
    reclaimed: Counter[str] | None = None

    def totals_from_answers(self) -> None:
        """Totals when `answers` holds every group (the in-memory path and unit tests)."""
        kinds: dict[str, int] = {}
        for view, _ in self.answers:
            kinds[view.kind.value] = kinds.get(view.kind.value, 0) + 1
        self.groups_by_kind = dict(sorted(kinds.items()))
        self.offset_count = sum(len(offsets) for _, offsets in self.answers)
        self.comeback_count = len(self.comebacks)

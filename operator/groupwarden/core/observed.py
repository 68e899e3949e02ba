"""First-observed times: the fallback when `__consumer_offsets` cannot be read.

The Admin API returns no timestamps, so without the offsets log groupwarden starts its own clocks
the first time it sees a fact: a group being Empty, or a committed offset having a given value.
A first observation is never earlier than the truth, so these times can only delay a deletion.

One known limit (documented in docs/engine.md): a consumer that re-commits an *unchanged* offset
is indistinguishable from no commit at all through the Admin API, so the observed clock for that
partition runs from when its value last changed. The broker's own clock restarts on every commit;
plans say `timestampSource: observed` so a person can tell the two apart.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groupwarden.core.snapshot import SourcedTime, TimestampSource, TopicPartition
from groupwarden.core.timestamps import require_aware, to_rfc3339


@dataclass
class ObservedTimes:
    """Mutable memory of first observations (one per cluster); serialisable to JSON."""

    # group -> when it was first seen Empty (cleared when seen non-Empty)
    empty_since: dict[str, datetime] = field(default_factory=dict)
    # (group, partition) -> (offset value, when that value was first seen)
    offsets: dict[tuple[str, TopicPartition], tuple[int, datetime]] = field(default_factory=dict)

    def observe_group_state(self, group_id: str, is_empty: bool, now: datetime) -> SourcedTime | None:
        """Records the group's state; returns when it was first seen Empty (None if not Empty)."""
        require_aware(now, "now")
        if not is_empty:
            self.empty_since.pop(group_id, None)
            return None
        since = self.empty_since.setdefault(group_id, now)
        return SourcedTime(since, TimestampSource.OBSERVED)

    def observe_offset(
        self, group_id: str, partition: TopicPartition, offset: int, now: datetime
    ) -> SourcedTime:
        """Records a committed offset; returns when this value was first seen."""
        require_aware(now, "now")
        key = (group_id, partition)
        seen = self.offsets.get(key)
        if seen is None or seen[0] != offset:
            seen = (offset, now)
            self.offsets[key] = seen
        return SourcedTime(seen[1], TimestampSource.OBSERVED)

    def forget_missing(
        self, present: Container[str], partitions_of: Callable[[str], Iterable[TopicPartition]]
    ) -> None:
        """Drops memories of groups/partitions that no longer exist (bounded memory): `present`
        holds the existing group ids, `partitions_of(group)` its partitions with a committed offset
        (asked only for remembered groups)."""
        for group_id in [g for g in self.empty_since if g not in present]:
            del self.empty_since[group_id]
        partitions: dict[str, set[TopicPartition]] = {}
        for key in list(self.offsets):
            group_id = key[0]
            if group_id not in partitions:
                partitions[group_id] = set(partitions_of(group_id)) if group_id in present else set()
            if key[1] not in partitions[group_id]:
                del self.offsets[key]

    def to_json(self) -> dict[str, Any]:
        return {
            "emptySince": {g: to_rfc3339(t) for g, t in sorted(self.empty_since.items())},
            "offsets": [
                {
                    "group": g,
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": o,
                    "since": to_rfc3339(t),
                }
                for (g, tp), (o, t) in sorted(self.offsets.items())
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObservedTimes:
        store = cls()
        for group_id, text in dict(data.get("emptySince", {})).items():
            store.empty_since[str(group_id)] = _parse_time(text)
        for row in data.get("offsets", []):
            tp = TopicPartition(str(row["topic"]), int(row["partition"]))
            store.offsets[(str(row["group"]), tp)] = (int(row["offset"]), _parse_time(row["since"]))
        return store


def _parse_time(text: object) -> datetime:
    parsed = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return require_aware(parsed, "observed time")

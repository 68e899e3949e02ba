"""First-observed times: the fallback when `__consumer_offsets` cannot be read.

The Admin API returns no timestamps, so without the offsets log groupwarden starts its own clocks
the first time it sees a fact: a group being Empty, or a committed offset having a given value.
A first observation is never earlier than the truth, so these times can only delay a deletion.

One known limit (documented in docs/engine.md): a consumer that re-commits an *unchanged* offset
is indistinguishable from no commit at all through the Admin API, so the observed clock for that
partition runs from when its value last changed. The broker's own clock restarts on every commit;
plans say `timestampSource: observed` so a person can tell the two apart.

The memory can outlive the process (the operator's observation store, the CLI's checkpoint), and
then it is only as good as the watch that kept it: an entry keeps a clock only while it was
CONFIRMED (seen in the same state / with the same value) no longer than `max_gap` before the watch
resumed. Across a longer gap the group may have been active and Empty again unseen, so its clock
restarts (`drop_unconfirmed`): a remembered time can delay a deletion, never bring one forward.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from groupwarden.core.snapshot import SourcedTime, TimestampSource, TopicPartition
from groupwarden.core.timestamps import require_aware, to_rfc3339

# How long an entry may go unconfirmed (the process stopped, the standby not yet leader, a CLI not
# run) and keep its clock: 3 x the default policy interval (10m). A rolling upgrade or a failover
# (a Lease duration + a pass) fits many times; a longer silence restarts the clocks.
DEFAULT_MAX_GAP: Final = timedelta(minutes=30)


@dataclass
class ObservedTimes:
    """Mutable memory of first observations (one per cluster); serialisable to JSON."""

    # group -> when it was first seen Empty (cleared when seen non-Empty)
    empty_since: dict[str, datetime] = field(default_factory=dict)
    # (group, partition) -> (offset value, when that value was first seen)
    offsets: dict[tuple[str, TopicPartition], tuple[int, datetime]] = field(default_factory=dict)
    # Groups whose entries changed since the last `take_changes` (what a store must write: the
    # group's entries now, or a tombstone when it has none left).
    changed: set[str] = field(default_factory=set, compare=False, repr=False)

    def observe_group_state(self, group_id: str, is_empty: bool, now: datetime) -> SourcedTime | None:
        """Records the group's state; returns when it was first seen Empty (None if not Empty)."""
        require_aware(now, "now")
        if not is_empty:
            self.forget_empty(group_id)
            return None
        since = self.empty_since.get(group_id)
        if since is None:
            since = self.empty_since[group_id] = now
            self.changed.add(group_id)
        return SourcedTime(since, TimestampSource.OBSERVED)

    def forget_empty(self, group_id: str) -> None:
        """The group is not Empty (or its Empty-since is known otherwise): no clock for it."""
        if self.empty_since.pop(group_id, None) is not None:
            self.changed.add(group_id)

    def forget_offset(self, group_id: str, partition: TopicPartition) -> None:
        """The offset's time is known otherwise (the log): no clock for it."""
        if self.offsets.pop((group_id, partition), None) is not None:
            self.changed.add(group_id)

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
            self.changed.add(group_id)
        return SourcedTime(seen[1], TimestampSource.OBSERVED)

    def forget_missing(
        self, present: Container[str], partitions_of: Callable[[str], Iterable[TopicPartition]]
    ) -> None:
        """Drops memories of groups/partitions that no longer exist (bounded memory): `present`
        holds the existing group ids, `partitions_of(group)` its partitions with a committed offset
        (asked only for remembered groups)."""
        for group_id in [g for g in self.empty_since if g not in present]:
            del self.empty_since[group_id]
            self.changed.add(group_id)
        partitions: dict[str, set[TopicPartition]] = {}
        for key in list(self.offsets):
            group_id = key[0]
            if group_id not in partitions:
                partitions[group_id] = set(partitions_of(group_id)) if group_id in present else set()
            if key[1] not in partitions[group_id]:
                del self.offsets[key]
                self.changed.add(group_id)

    def take_changes(self) -> set[str]:
        """The groups changed since the last call (and forgets them: the caller writes them, and
        gives them back with `mark_changed` when it could not)."""
        changed, self.changed = self.changed, set()
        return changed

    def mark_changed(self, groups: Iterable[str]) -> None:
        self.changed.update(groups)

    def entries_of(self, groups: Container[str]) -> dict[str, GroupObservations]:
        """The entries of `groups` (one pass over the offsets); a group without any is absent."""
        found: dict[str, GroupObservations] = {}
        for group_id, since in self.empty_since.items():
            if group_id in groups:
                found[group_id] = GroupObservations(since, {})
        for (group_id, partition), seen in self.offsets.items():
            if group_id in groups:
                entry = found.get(group_id)
                if entry is None:
                    entry = found[group_id] = GroupObservations(None, {})
                entry.offsets[partition] = seen
        return found

    def entries_in_pieces(self, pieces: Sequence[Sequence[str]]) -> Iterator[dict[str, GroupObservations]]:
        """`entries_of` each piece of groups in turn, built when asked for: only one piece's
        entries exist at a time (a store's first write of 100k groups would otherwise hold every
        entry at once). One pass over the offsets for all pieces, not one per piece: it sorts
        their keys by piece first (a reference per remembered offset)."""
        if len(pieces) <= 1:
            for piece in pieces:
                yield self.entries_of(set(piece))
            return
        keys: list[list[tuple[str, TopicPartition]]] = [[] for _ in pieces]
        if self.offsets:
            piece_of = {group_id: n for n, piece in enumerate(pieces) for group_id in piece}
            for key in self.offsets:
                n = piece_of.get(key[0])
                if n is not None:
                    keys[n].append(key)
            del piece_of
        for n, piece in enumerate(pieces):
            found: dict[str, GroupObservations] = {}
            for group_id in piece:
                since = self.empty_since.get(group_id)
                if since is not None:
                    found[group_id] = GroupObservations(since, {})
            piece_keys, keys[n] = keys[n], []
            for key in piece_keys:
                seen = self.offsets.get(key)
                if seen is None:  # (forgotten since the pieces were made)
                    continue
                entry = found.get(key[0])
                if entry is None:
                    entry = found[key[0]] = GroupObservations(None, {})
                entry.offsets[key[1]] = seen
            yield found

    def drop_unconfirmed(self, confirmed_at: datetime, now: datetime, max_gap: timedelta) -> bool:
        """The age rule for a memory last confirmed as a whole at `confirmed_at`: when `now` is
        more than `max_gap` later, every clock restarts (the entries are dropped: the next
        observation starts them at its own time). True when it dropped them."""
        require_aware(confirmed_at, "confirmed_at")
        require_aware(now, "now")
        if now - confirmed_at <= max_gap:
            return False
        self.changed.update(self.empty_since)
        self.changed.update(g for g, _ in self.offsets)
        self.empty_since.clear()
        self.offsets.clear()
        return True

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


@dataclass
class GroupObservations:
    """One group's first observations: Empty since (None: no clock), and per partition with a
    clock the offset value and when it was first seen."""

    empty_since: datetime | None
    offsets: dict[TopicPartition, tuple[int, datetime]]


def _parse_time(text: object) -> datetime:
    parsed = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return require_aware(parsed, "observed time")

"""The operator's observation memory as stored records (pure): what a store of first-observed times
(`cleanup/observation_store_port.py`, the port; `adapters/kafka_observation_store.py`, a compacted
topic) writes and reads back, and the rules for both.

- One record per (cluster, group), keyed by both: the group's Empty-since clock and its
  per-partition (offset, first seen) clocks, with the time of the pass that wrote it. A group left
  without a clock gets a tombstone (key, no value): compaction keeps the memory as big as the
  groups being watched, whatever the history.
- Writes are CHANGES: only the groups whose entries changed since the last write
  (`ObservedTimes.take_changes`), never the whole memory each pass.
- One more record per cluster, keyed by the cluster alone, written with every pass's changes: the
  time of the pass. After it the stored entries are exactly the leader's memory, whose every entry
  that pass confirmed (saw in the same state, with the same value) or changed, so an entry's last
  confirmation is the later of its own record's time and that pass record's.
- A pass's changes are written in pieces (`BatchPieces`: at most `PIECE_GROUPS` groups, each piece
  atomic), the pass record in the last one. Why pieces are safe: a group's record is independent
  of every other (the group's whole entry and its own time, compacted by its key), so a piece
  stored without the next ones leaves its groups as the memory has them now (true) and the others
  as the last complete pass left them, with that pass's confirmation (true then, and aged by the
  gap rule from then): what a failed single batch leaves for them. The pass record is the one that
  speaks for other records (it confirms every stored entry at its time), so it is written only
  after every piece before it: before them, a stale entry still waiting in a later piece for its
  tombstone (a group active since) would look confirmed at the pass's time, and a load would
  restore its old clock, bringing a deletion forward. Why not one transaction: the first write of
  100k groups, built and queued at once, was ~40 MiB over the operator's peak; a piece of 5,000
  groups is 1.5-5 MB, and a long write no longer races `transaction.timeout.ms`.
- Loading (`restore`) applies the age rule of `core/observed_clocks.py`: an entry last confirmed more than
  `max_gap` before the watch resumes is not restored (its clock restarts at the next
  observation) and is named for a tombstone, so a later pass record cannot make it look
  confirmed again.

Times are stored with their microseconds (isoformat): rounding a first observation down would
make it earlier than it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from groupwarden.core.observed_clocks import GroupObservations, ObservedTimes
from groupwarden.core.snapshot import TopicPartition
from groupwarden.core.timestamps import require_aware

FORMAT: Final = "groupwarden-observations/1"
# Groups per piece of a pass's changes (one transaction each): ~300 B a record with an Empty-since
# clock, ~1 KB with 6 offset clocks, so a piece is 1.5-5 MB in the process and in the producer.
PIECE_GROUPS: Final = 5_000


@dataclass(frozen=True)
class StoredGroup:
    """One group's entries as a store holds them, and when the pass that wrote them ran."""

    group_id: str
    observations: GroupObservations
    written_at: datetime


@dataclass
class StoredObservations:
    """What a store holds for one cluster: its groups' entries and the time of the last pass
    that wrote a batch (None: no batch yet)."""

    groups: dict[str, StoredGroup] = field(default_factory=dict)
    last_pass: datetime | None = None


@dataclass(frozen=True)
class ObservationBatch:
    """One write: the changed groups' entries now, tombstones for groups left without one, and
    (`pass_record`) the pass record. Written atomically, or not at all. A pass whose changes come
    in pieces (`BatchPieces`) has the pass record only in its last piece."""

    cluster_id: str
    groups: Mapping[str, GroupObservations]
    tombstones: tuple[str, ...]
    confirmed_at: datetime
    writer: str
    pass_record: bool = True

    @property
    def size(self) -> int:
        return len(self.groups) + len(self.tombstones)


def take_batch(
    observed: ObservedTimes, cluster_id: str, confirmed_at: datetime, writer: str
) -> ObservationBatch:
    """The changes since the last batch (taken from `observed`: give them back with
    `observed.mark_changed(batch_groups(batch))` when the write fails)."""
    require_aware(confirmed_at, "confirmed_at")
    changed = observed.take_changes()
    entries = observed.entries_of(changed) if changed else {}
    tombstones = tuple(sorted(g for g in changed if g not in entries))
    return ObservationBatch(cluster_id, entries, tombstones, confirmed_at, writer)


def batch_groups(batch: ObservationBatch) -> set[str]:
    return {*batch.groups, *batch.tombstones}


class BatchPieces:
    """The changes since the last write, taken from `observed` at once, as the batches to write
    in turn: pieces of at most `size` groups (sorted by id), each built only when iterated to (one
    piece's entries and records exist at a time), the pass record only in the last one (why this
    is safe: the module's docstring). No change at all is one batch of the pass record alone.
    A write that fails gives the groups of the pieces not written back: `unwritten(pieces_written)`
    to `observed.mark_changed`."""

    def __init__(
        self,
        observed: ObservedTimes,
        cluster_id: str,
        confirmed_at: datetime,
        writer: str,
        size: int = PIECE_GROUPS,
    ) -> None:
        require_aware(confirmed_at, "confirmed_at")
        if size < 1:
            raise ValueError("a piece holds at least one group")
        self._observed = observed
        self.cluster_id, self.confirmed_at, self.writer = cluster_id, confirmed_at, writer
        changed = sorted(observed.take_changes())
        self.groups = changed
        self._pieces = [changed[i : i + size] for i in range(0, len(changed), size)] or [[]]

    def __len__(self) -> int:
        return len(self._pieces)

    def __iter__(self) -> Iterator[ObservationBatch]:
        last = len(self._pieces) - 1
        for n, entries in enumerate(self._observed.entries_in_pieces(self._pieces)):
            piece = self._pieces[n]
            tombstones = tuple(g for g in piece if g not in entries)
            yield ObservationBatch(
                self.cluster_id, entries, tombstones, self.confirmed_at, self.writer, pass_record=n == last
            )

    def unwritten(self, pieces_written: int) -> list[str]:
        """The groups of the pieces after the first `pieces_written`."""
        return [g for piece in self._pieces[pieces_written:] for g in piece]


def restore(stored: StoredObservations, now: datetime, max_gap: timedelta) -> ObservedTimes:
    """The memory to resume from at `now`: every stored entry confirmed within `max_gap`, as it
    was (never earlier). The others are left out, and marked changed so the next batch writes
    their tombstones."""
    require_aware(now, "now")
    observed = ObservedTimes()
    last_pass = stored.last_pass
    for group_id, entry in stored.groups.items():
        confirmed = entry.written_at if last_pass is None else max(entry.written_at, last_pass)
        if now - confirmed > max_gap:
            observed.changed.add(group_id)
            continue
        if entry.observations.empty_since is not None:
            observed.empty_since[group_id] = entry.observations.empty_since
        for partition, seen in entry.observations.offsets.items():
            observed.offsets[(group_id, partition)] = seen
    return observed


def resume(
    observed: ObservedTimes, stored: StoredObservations, now: datetime, max_gap: timedelta
) -> dict[str, int]:
    """A memory that has watched one pass takes the stored clocks that agree with what it saw: a
    group it saw Empty keeps the stored Empty-since, an offset it saw keeps the stored since of the
    same value, when the stored entry was confirmed within `max_gap` and is earlier. Anything the
    pass saw otherwise (active, another offset, no entry) keeps the pass's own clock: a stored
    clock never applies to a state it was not started for, so it never brings a deletion forward.
    The store is then made equal to the memory (`adopt`). Returns the groups whose clocks were
    resumed, with how many each: only their facts were dated with a clock that changed."""
    restored = restore(stored, now, max_gap)
    resumed: dict[str, int] = {}
    for group_id, since in list(observed.empty_since.items()):
        earlier = restored.empty_since.get(group_id)
        if earlier is not None and earlier < since:
            observed.empty_since[group_id] = earlier
            resumed[group_id] = resumed.get(group_id, 0) + 1
    for key, (offset, since) in list(observed.offsets.items()):
        seen = restored.offsets.get(key)
        if seen is not None and seen[0] == offset and seen[1] < since:
            observed.offsets[key] = seen
            resumed[key[0]] = resumed.get(key[0], 0) + 1
    adopt(observed, stored)
    return resumed


def adopt(observed: ObservedTimes, stored: StoredObservations) -> None:
    """The memory stays as it is (it watched the cluster more recently than the store says) and
    the store is made equal to it: every remembered group is written again, every other stored
    group gets a tombstone."""
    observed.mark_changed(observed.empty_since)
    observed.mark_changed(g for g, _ in observed.offsets)
    observed.mark_changed(stored.groups)


# --- records (key and value bytes) ---------------------------------------------------------


def group_key(cluster_id: str, group_id: str) -> bytes:
    return json.dumps([cluster_id, group_id], ensure_ascii=False, separators=(",", ":")).encode()


def pass_key(cluster_id: str) -> bytes:
    return json.dumps([cluster_id], ensure_ascii=False, separators=(",", ":")).encode()


def batch_records(batch: ObservationBatch) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of every record of `batch`, the pass record (when it has one) last; None is a
    tombstone."""
    return list(iter_batch_records(batch))


def iter_batch_records(batch: ObservationBatch) -> Iterator[tuple[bytes, bytes | None]]:
    """`batch_records` made one at a time, as a producer sends them."""
    written = _time(batch.confirmed_at)
    for group_id in sorted(batch.groups):
        entry = batch.groups[group_id]
        value = {
            "format": FORMAT,
            "cluster": batch.cluster_id,
            "group": group_id,
            "emptySince": None if entry.empty_since is None else _time(entry.empty_since),
            "offsets": [
                [tp.topic, tp.partition, offset, _time(since)]
                for tp, (offset, since) in sorted(entry.offsets.items())
            ],
            "writtenAt": written,
            "writer": batch.writer,
        }
        yield group_key(batch.cluster_id, group_id), _dump(value)
    for group_id in batch.tombstones:
        yield group_key(batch.cluster_id, group_id), None
    if batch.pass_record:
        record = {"format": FORMAT, "cluster": batch.cluster_id, "passAt": written, "writer": batch.writer}
        yield pass_key(batch.cluster_id), _dump(record)


def apply_record(stored: StoredObservations, cluster_id: str, key: bytes | None, value: bytes | None) -> None:
    """Folds one record read back (in log order per key) into `stored`; records of other clusters
    or of another format are ignored (a topic mirrored from elsewhere must not set our clocks)."""
    try:
        parts = json.loads(key or b"")
    except ValueError:
        return
    if not isinstance(parts, list) or not parts or parts[0] != cluster_id:
        return
    if value is None:
        if len(parts) == 2:
            stored.groups.pop(str(parts[1]), None)
        return
    try:
        data: dict[str, Any] = json.loads(value)
        if data.get("format") != FORMAT or data.get("cluster") != cluster_id:
            return
        if len(parts) == 1:
            stored.last_pass = _parse(data["passAt"])
            return
        group_id = str(data["group"])
        offsets = {
            TopicPartition(str(topic), int(partition)): (int(offset), _parse(since))
            for topic, partition, offset, since in data.get("offsets", [])
        }
        empty = data.get("emptySince")
        entry = GroupObservations(None if empty is None else _parse(empty), offsets)
        written_at = _parse(data["writtenAt"])
    except (ValueError, KeyError, TypeError):
        # A damaged record sets no clock, and an older one of its key no longer holds either.
        if len(parts) == 2:
            stored.groups.pop(str(parts[1]), None)
        return
    stored.groups[group_id] = StoredGroup(group_id, entry, written_at)


def fold(cluster_id: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> StoredObservations:
    stored = StoredObservations()
    for key, value in records:
        apply_record(stored, cluster_id, key, value)
    return stored


def _time(moment: datetime) -> str:
    return require_aware(moment, "observation time").isoformat()


def _parse(text: object) -> datetime:
    return require_aware(datetime.fromisoformat(str(text)), "stored observation time")


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

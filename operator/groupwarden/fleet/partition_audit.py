"""What one task of the audit does with the records of one (cluster, `__consumer_offsets` partition).

Kafka writes every record of a group to one partition of `__consumer_offsets`, so the latest record
of each key, a group's membership history, its state and its come-backs are all found among the
records of that partition: tasks need no shuffle and no other task's records.

1. Compaction of OffsetCommit records (types 0 and 1, nearly all of a log): the key without its
   type is dictionary-encoded (a "slot") and the last record of each slot found with numpy.
   Without history (no what-if), classic GroupMetadata records are compacted the same way.
2. The surviving commits of the plain shapes are decoded by `fast_codec` (numpy over the Arrow
   buffers); every other survivor (metadata strings, other versions, corrupt bytes, keys the fast
   reader does not take) goes to the core codec through the core ledger.
3. The core ledger with come-back history (`ReplayWithHistory`) applies, in log order, every record
   that is not an OffsetCommit (group metadata, KIP-848, share, streams, unknown types) and the
   survivors of step 2's second kind.
4. A group whose classic metadata (or other membership records) was deleted while its offsets live
   on stays a group in the core ledger (its offsets keep it), so its Empty-since survives the
   tombstone and a later return is a come-back; the ledger of step 3 does not see plain commits
   and would forget it. Such groups are found while replaying (a membership record leaves the
   group gone while an Empty-since was pending) and replayed again with every record of theirs,
   commits included: their come-backs are then exactly the core's. Every other group's come-backs
   cannot depend on its offsets (`ReplayWithHistory` reads only membership state for them).
5. Why compacting first is exact for the final state: docs/spark-audit.md.

The result is one flat table (`schema.TASK_ROW_SCHEMA`): group rows, offset rows, come-back rows and
one row of counters. The core ledger and codec stay the definition: tests compare with them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupwarden.fleet.fast_codec import (
    binary_column,
    decode_commit_keys,
    decode_plain_values,
    uuid_strings,
    without_prefix,
)
from groupwarden.fleet.schema import TASK_ROW_SCHEMA
from groupwarden.fleet.task_rows import (
    complete,
    ledger_offsets,
    repeat,
    rows_table,
    simple_groups,
    summaries,
    task_group_row,
    with_kind,
)
from groupwarden.offsets_log.codec import decode_key
from groupwarden.offsets_log.history import Comeback, ReplayWithHistory
from groupwarden.offsets_log.ledger import OffsetsLedger
from groupwarden.offsets_log.records import CorruptRecordError

Selects = Callable[[str], bool]
# Receives a unit's group rows and offset rows (`TASK_ROW_SCHEMA`), all of them.
Sink = Callable[[pa.Table, pa.Table], None]


def _select_all(_group: str) -> bool:
    return True


def _replay(replay: ReplayWithHistory, table: pa.Table, rows: np.ndarray, partition: int) -> None:
    part = table.take(pa.array(rows, pa.int64()))
    apply = replay.apply
    for key, value, timestamp_ms, offset in zip(
        part.column("key").to_pylist(),
        part.column("value").to_pylist(),
        part.column("timestamp").to_pylist(),
        part.column("offset").to_pylist(),
        strict=True,
    ):
        apply(key, value, timestamp_ms, partition, offset)


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _last_per_slot(slot_ids: np.ndarray, slots: int) -> np.ndarray:
    """Index of the last occurrence of each slot id in `slot_ids` (ids 0..slots-1, all present)."""
    last = np.full(slots, -1, dtype=np.int64)
    np.maximum.at(last, slot_ids, np.arange(len(slot_ids), dtype=np.int64))
    return last


@dataclass(frozen=True)
class KeyIds:
    """Every record's key dictionary-encoded as it is (a null key is an entry too, so every row
    has an id): the keys are encoded in place, never copied first (a `take` of the commits' keys
    would copy millions of binaries and cost as much as the encoding)."""

    ids: np.ndarray  # per row: its key's index in `keys` (int32)
    keys: pa.Array  # binary: the distinct keys, in the order of their first record

    @classmethod
    def of(cls, key_array: pa.Array) -> KeyIds:
        encoded = pc.dictionary_encode(key_array, null_encoding="encode")
        return cls(encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary)

    def commit_slots(self, commit_rows: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """The slot (the key without its 2-byte type: types 0 and 1 of one offset merge there) of
        each of `commit_rows` (rows whose keys are OffsetCommit keys: at least 2 bytes, the same
        for every row of a key), and the slots in the order of their first record. The bytes of
        the distinct keys only are cut (a fifth of the commits), not those of every commit."""
        entry_of_row = self.ids[commit_rows]
        used = np.zeros(len(self.keys), dtype=bool)
        used[entry_of_row] = True
        # Dictionary order is first-record order: so is its subsequence of the commits' keys.
        commit_entries = np.flatnonzero(used)
        keys = binary_column(self.keys)
        cut = without_prefix(self.keys, commit_entries, 2)
        slot_of_entry = np.full(len(self.keys), -1, dtype=np.int64)
        types = keys.data[keys.starts[commit_entries] + 1]
        if len(types) and bool(np.all(types == types[0])):
            # One key type among them (the common case): the distinct keys are distinct slots.
            slot_of_entry[commit_entries] = np.arange(len(commit_entries), dtype=np.int64)
            return slot_of_entry[entry_of_row], cut
        slots = pc.dictionary_encode(cut)
        slot_of_entry[commit_entries] = slots.indices.to_numpy(zero_copy_only=False)
        return slot_of_entry[entry_of_row], slots.dictionary

    def latest_rows(self, rows: np.ndarray) -> np.ndarray:
        """The last of `rows` (ascending) of each key among them, in ascending order."""
        last = np.full(len(self.keys), -1, dtype=np.int64)
        np.maximum.at(last, self.ids[rows], np.arange(len(rows), dtype=np.int64))
        return rows[np.sort(last[last >= 0])]


def _group_of(key: bytes | None) -> str | None:
    if key is None:
        return None
    try:
        group = getattr(decode_key(key), "group", None)
    except CorruptRecordError:
        return None
    return group if isinstance(group, str) else None


def audit_partitions(
    table: pa.Table,
    *,
    keep_history: bool = True,
    selects: Selects = _select_all,
    now_ms: int | None = None,
    sink: Sink | None = None,
) -> pa.Table:
    """Records of any (cluster, partition) units -> `TASK_ROW_SCHEMA` rows, unit by unit."""
    if table.num_rows == 0:
        return TASK_ROW_SCHEMA.empty_table()
    units = table.group_by(["cluster", "partition"]).aggregate([]).to_pylist()
    if len(units) == 1:
        return audit_unit(table, keep_history=keep_history, selects=selects, now_ms=now_ms, sink=sink)
    parts = []
    for unit in units:
        mask = pc.and_(
            pc.equal(table.column("cluster"), unit["cluster"]),
            pc.equal(table.column("partition"), unit["partition"]),
        )
        unit_table = table.filter(mask)
        parts.append(
            audit_unit(unit_table, keep_history=keep_history, selects=selects, now_ms=now_ms, sink=sink)
        )
    return pa.concat_tables(parts)


def audit_unit(
    table: pa.Table,
    *,
    keep_history: bool = True,
    selects: Selects = _select_all,
    now_ms: int | None = None,
    sink: Sink | None = None,
) -> pa.Table:
    """The records of one (cluster, partition), in any order -> `TASK_ROW_SCHEMA` rows: counters and
    summaries, and the groups, offsets and come-backs `selects` accepts (with the idle-age
    histogram's rows when `now_ms` is given). `sink` receives every group row and every offset row
    (the fleet-sized tables, written by the task)."""
    if table.num_rows == 0:
        return TASK_ROW_SCHEMA.empty_table()
    cluster = str(table.column("cluster")[0].as_py())
    partition = int(table.column("partition")[0].as_py())
    offsets_np = table.column("offset").to_numpy()
    if len(offsets_np) > 1 and not bool(np.all(offsets_np[1:] > offsets_np[:-1])):
        table = table.take(pa.array(np.argsort(offsets_np, kind="stable"), pa.int64()))
        offsets_np = table.column("offset").to_numpy()
    n = table.num_rows
    keys = binary_column(table.column("key"))
    head0 = keys.data[np.minimum(keys.starts, len(keys.data) - 1)]
    head1 = keys.data[np.minimum(keys.starts + 1, len(keys.data) - 1)]
    has_type = keys.valid & (keys.lengths >= 2)
    is_commit = has_type & (head0 == 0) & (head1 <= 1)
    commit_rows = np.flatnonzero(is_commit)
    other_rows = np.flatnonzero(~is_commit)

    # 1. Compaction of commits: the last record per slot (the key without its type).
    key_ids = KeyIds.of(_one_chunk(table.column("key")))
    slot_ids, dictionary = key_ids.commit_slots(commit_rows)
    last = _last_per_slot(slot_ids, len(dictionary))
    survivor_rows = commit_rows[last]  # one per slot, in dictionary order

    if not keep_history and len(other_rows):
        # Classic GroupMetadata (type 2): only the latest record per key matters without history.
        is_metadata = has_type[other_rows] & (head0[other_rows] == 0) & (head1[other_rows] == 2)
        metadata_rows = other_rows[is_metadata]
        if len(metadata_rows):
            latest = key_ids.latest_rows(metadata_rows)
            other_rows = np.sort(np.concatenate([other_rows[~is_metadata], latest]))

    # 2. Decode the survivors: keys per slot, values of the plain shapes.
    slot_keys = decode_commit_keys(dictionary)
    values = table.column("value").take(pa.array(survivor_rows, pa.int64()))
    plain = decode_plain_values(values)
    live = binary_column(values).valid
    fast = slot_keys.ok & plain.plain
    to_ledger = live & ~fast
    to_ledger |= ~slot_keys.ok  # a bad key is the ledger's to count (corrupt)
    ledger_rows = np.sort(np.concatenate([other_rows, survivor_rows[to_ledger]]))

    # 3. The core ledger with history over everything else, in log order; the groups whose
    # pending Empty-since a membership record dropped because the group is gone from this ledger
    # are noted (step 4 of the module docstring).
    missed: set[str] = set()
    replay = ReplayWithHistory(OffsetsLedger(), on_forgotten=missed.add)
    _replay(replay, table, ledger_rows, partition)
    ledger = replay.ledger
    comebacks = replay.comebacks
    if keep_history and missed:
        comebacks = _replay_missed(
            comebacks, missed, table, ledger_rows, commit_rows, slot_ids, slot_keys, partition
        )

    # Outputs
    fast_slots = np.flatnonzero(fast)
    fast_offsets = pa.table(
        {
            "group": slot_keys.group.take(pa.array(fast_slots, pa.int64())),
            "topic": slot_keys.topic.take(pa.array(fast_slots, pa.int64())),
            "tp": pa.array(slot_keys.partition[fast_slots], pa.int32()),
            "offset": pa.array(plain.offset[fast_slots], pa.int64()),
            "commit_time_ms": pa.array(plain.commit_ms[fast_slots], pa.int64()),
            "expire_time_ms": pa.nulls(len(fast_slots), pa.int64()),
            "leader_epoch": pa.array(
                plain.leader_epoch[fast_slots], pa.int32(), mask=plain.leader_epoch[fast_slots] < 0
            ),
            "metadata": repeat("", pa.string(), len(fast_slots)),
            "topic_id": uuid_strings(plain.topic_id[fast_slots], plain.has_topic_id[fast_slots]),
        }
    )
    offsets = pa.concat_tables([fast_offsets, ledger_offsets(ledger)])
    per_group = offsets.group_by("group").aggregate([("tp", "count"), ("commit_time_ms", "max")])
    comeback_counts = Counter(c.group for c in comebacks)
    views = [(group_id, view) for group_id in ledger.groups() if (view := ledger.group(group_id)) is not None]
    # The groups with offsets split on columns: those in the ledger (their rows come from their
    # views) and the simple groups (offsets only), whose rows need no Python object per group.
    in_ledger = pc.is_in(per_group.column("group"), value_set=pa.array([g for g, _ in views], pa.string()))
    of_ledger = per_group.filter(in_ledger)
    offset_stats = dict(
        zip(
            of_ledger.column("group").to_pylist(),
            zip(
                of_ledger.column("tp_count").to_pylist(),
                of_ledger.column("commit_time_ms_max").to_pylist(),
                strict=True,
            ),
            strict=True,
        )
    )

    group_rows: list[dict[str, Any]] = []
    selected_ids: list[str] = []
    for group_id, view in views:
        count, last_commit = offset_stats.get(group_id, (0, None))
        chosen = bool(selects(group_id))
        group_rows.append(task_group_row(view, chosen, count, last_commit, comeback_counts[group_id]))
        if chosen:
            selected_ids.append(group_id)
    simple = per_group.filter(pc.invert(in_ledger))
    simple_ids = simple.column("group").to_pylist()
    simple_selected = [bool(selects(g)) for g in simple_ids]
    selected_ids.extend(g for g, chosen in zip(simple_ids, simple_selected, strict=True) if chosen)
    selected_set = pa.array(selected_ids, pa.string())
    offsets = offsets.append_column("selected", pc.is_in(offsets.column("group"), value_set=selected_set))
    comeback_rows = [
        {
            "group": c.group,
            "kind": c.kind.value,
            "empty_since_ms": c.empty_since_ms,
            "returned_ms": c.returned_ms,
            "selected": bool(selects(c.group)),
        }
        for c in sorted(comebacks)
    ]
    timestamps = table.column("timestamp").to_numpy()
    known = timestamps[timestamps >= 0]
    counters = {
        "records": n,
        "tombstones": table.column("value").null_count,
        "replayed": int(np.count_nonzero(fast)) + ledger.records,
        "corrupt": ledger.corrupt,
        "unknown": ledger.unknown,
        "first_offset": int(offsets_np[0]),
        "next_offset": int(offsets_np[-1]) + 1,
        "earliest_ms": int(known.min()) if len(known) else None,
        "latest_ms": int(timestamps.max()),
        "comeback_count": len(comebacks),
    }
    parts = [
        rows_table(group_rows, "group"),
        with_kind(simple_groups(simple, simple_selected, comeback_counts), "group"),
        with_kind(offsets, "offset"),
        rows_table(comeback_rows, "comeback"),
        rows_table([counters], "partition"),
    ]
    completed = [complete(p, cluster, partition) for p in parts]
    every_group = pa.concat_tables(completed[:2])
    totals = summaries(every_group, completed[3], now_ms)
    if sink is not None:
        sink(every_group, completed[2])
    picked = [selected_rows(t) for t in (every_group, *completed[2:4])]
    return pa.concat_tables([*picked, completed[4], *(complete(s, cluster, partition) for s in totals)])


def selected_rows(rows: pa.Table) -> pa.Table:
    """The rows whose `selected` is true: `rows` itself, not a copy, when all are (a policy over
    every group selects all of a unit's rows)."""
    selected = pc.fill_null(rows.column("selected"), False)
    if pc.all(selected, min_count=0).as_py():
        return rows
    return rows.filter(selected)


def _replay_missed(
    first: list[Comeback],
    missed: set[str],
    table: pa.Table,
    ledger_rows: np.ndarray,
    commit_rows: np.ndarray,
    slot_ids: np.ndarray,
    slot_keys: Any,
    partition: int,
) -> list[Comeback]:
    """The come-backs `first` with the groups of `missed` replayed from every record of theirs."""
    keys = table.column("key").take(pa.array(ledger_rows, pa.int64())).to_pylist()
    # A group's membership records repeat a few keys (its metadata, its members): each distinct
    # key is decoded once.
    group_of_key: dict[bytes | None, str | None] = {}
    missed_rows = []
    for row, key in zip(ledger_rows.tolist(), keys, strict=True):
        if key in group_of_key:
            group = group_of_key[key]
        else:
            group = group_of_key[key] = _group_of(key)
        if group in missed:
            missed_rows.append(row)
    missed_array = pa.array(sorted(missed), pa.string())
    slot_missed = pc.is_in(slot_keys.group, value_set=missed_array).to_numpy(zero_copy_only=False)
    slot_missed &= slot_keys.ok
    commits = commit_rows[slot_missed[slot_ids]]
    rows = np.unique(np.concatenate([np.array(missed_rows, dtype=np.int64), commits]))
    again = ReplayWithHistory()
    _replay(again, table, rows, partition)
    return [c for c in first if c.group not in missed] + [c for c in again.comebacks if c.group in missed]

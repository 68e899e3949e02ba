"""Come-backs: groups that became active again after being Empty, found by replaying the log.

An Empty group loses its offsets once it has been Empty longer than the retention (KIP-211). A
group that came back after a longer pause than a candidate retention would, under that retention,
have restarted from `auto.offset.reset` instead of its committed position: that is the risk a
shorter retention carries, and the log still holds the evidence (until compaction removes it).

`ReplayWithHistory` applies records to an `OffsetsLedger` exactly like `ledger.apply` and watches
the group records (classic GroupMetadata; KIP-848, share and streams group/member records): when a
group that the ledger called Empty since T gets members again at log time R, that is a
`Comeback(T, R)`.

The oracle of the fleet audit's tasks, which feed a ledger only some records (plain commits are
decoded apart) and replay whole the groups `on_forgotten` names (`fleet/partition_audit.py`,
DESIGN.md "Fast paths and their oracle"): a change here must be made there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from groupwarden.core.snapshot import GroupKind
from groupwarden.offsets_log._wire import Buffer
from groupwarden.offsets_log.codec import decode_key
from groupwarden.offsets_log.ledger import LogRecord, OffsetsLedger
from groupwarden.offsets_log.records import CorruptRecordError, RecordType

# Record types whose application can change a group's membership.
_MEMBERSHIP_TYPES = frozenset(
    {
        RecordType.GROUP_METADATA,
        RecordType.CONSUMER_GROUP_METADATA,
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        RecordType.SHARE_GROUP_METADATA,
        RecordType.SHARE_GROUP_MEMBER_METADATA,
        RecordType.STREAMS_GROUP_METADATA,
        RecordType.STREAMS_GROUP_MEMBER_METADATA,
    }
)


@dataclass(frozen=True, order=True)
class Comeback:
    group: str
    kind: GroupKind
    empty_since_ms: int  # when the ledger says the group became Empty
    returned_ms: int  # log time of the record that gave it members again

    @property
    def pause(self) -> timedelta:
        return timedelta(milliseconds=self.returned_ms - self.empty_since_ms)


class ReplayWithHistory:
    """Applies records to `ledger` and collects come-backs (see the module docstring).

    `on_forgotten`: called with a group whose pending Empty-since is dropped because a membership
    record left the group gone from `ledger` (no come-back of it can follow). A ledger that holds
    every record never drops one while the group's offsets live; one fed only some of them (the
    fleet audit's tasks, `fleet/partition_audit.py`) learns which groups to replay whole."""

    __slots__ = ("_empty_since", "_on_forgotten", "comebacks", "ledger")

    def __init__(
        self, ledger: OffsetsLedger | None = None, *, on_forgotten: Callable[[str], None] | None = None
    ) -> None:
        self.ledger = ledger if ledger is not None else OffsetsLedger()
        self.comebacks: list[Comeback] = []
        self._empty_since: dict[str, int] = {}
        self._on_forgotten = on_forgotten

    def apply(
        self, key: Buffer | None, value: Buffer | None, timestamp_ms: int, partition: int, offset: int
    ) -> None:
        decoded = self.ledger.apply(key, value, timestamp_ms, partition, offset)
        # OffsetCommit records (types 0 and 1, the bulk) never change membership: skip them cheaply.
        if key is None or len(key) < 2 or (key[0] == 0 and key[1] <= 1):
            return
        if int.from_bytes(key[:2], "big", signed=True) not in _MEMBERSHIP_TYPES:
            return
        if decoded is None:  # the ledger did not decode it (a replayed offset, a corrupt key)
            try:
                decoded = decode_key(key)
            except CorruptRecordError:
                return
        group = getattr(decoded, "group", None)
        if group is not None:
            self._observe(group, timestamp_ms)

    def apply_many(self, records: Iterable[LogRecord]) -> None:
        for key, value, timestamp_ms, partition, offset in records:
            self.apply(key, value, timestamp_ms, partition, offset)

    def _observe(self, group: str, timestamp_ms: int) -> None:
        # `membership`: the member count and Empty-since of `group()` without building its view
        # (once per membership record); the view only for a come-back's kind.
        membership = self.ledger.membership(group)
        if membership is None:
            if self._empty_since.pop(group, None) is not None and self._on_forgotten is not None:
                self._on_forgotten(group)
            return
        members, empty_since_ms = membership
        if members == 0:
            if empty_since_ms is not None:
                self._empty_since[group] = empty_since_ms
            return
        since = self._empty_since.pop(group, None)
        if since is not None and timestamp_ms > since:  # the same instant is no pause
            view = self.ledger.group(group)
            if view is not None:  # always: membership() found the group
                self.comebacks.append(Comeback(group, view.kind, since, timestamp_ms))


def comebacks_longer_than(comebacks: Iterable[Comeback], retention: timedelta) -> list[Comeback]:
    """The come-backs whose pause exceeds `retention` (they would have lost their offsets)."""
    return [c for c in comebacks if c.pause > retention]

"""The CLI's checkpointed timestamp memory: a `plan`/`apply` run resumes the offsets-log ledger (and
the first-observed times) of the previous run on the same cluster, so it reads only the log's tail.

The operator keeps its memory in the process; a shell run would otherwise read the whole
`__consumer_offsets` every time (millions of records on a big cluster) to plan a handful of groups.

One file per cluster id under the cache directory (`~/.cache/groupwarden/ledgers` by default),
written atomically (temporary file + rename, mode 0600). It is a pickle, so it is only loaded
from a directory and file that belong to the current user and that nobody else can write; anything
unreadable, foreign, of another format version or of another cluster is ignored (the run reads
the log from its start, as without a checkpoint) and replaced at the end of the run.

The first-observed times are only as good as the runs that confirmed them: a run sees every
selected group, so the saved memory was confirmed as a whole at the time of the run that saved it
(`observed_confirmed_at`). A later run more than `max_gap` after that restarts every clock (the
groups may have been active and Empty again unseen: core/observed_clocks.py); a checkpoint without that
time (saved by an older version) counts as never confirmed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.core.observed_clocks import DEFAULT_MAX_GAP, ObservedTimes
from groupwarden.core.policy import GroupSelector
from groupwarden.core.selection import GroupScope
from groupwarden.offsets_log import OffsetsLedger

log = logging.getLogger(__name__)

# /2: the ledger keeps streams groups' topologies (KIP-1071) and packs offset entries into ints
# (offsets_log/_state.py); a /1 checkpoint is ignored and the log is read from its start once.
FORMAT = "groupwarden-ledger-checkpoint/2"


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "groupwarden" / "ledgers"


class LedgerCheckpoint:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, cluster_id: str) -> Path:
        digest = hashlib.sha256(cluster_id.encode()).hexdigest()[:24]
        return self.directory / f"{digest}.ledger"

    def load(
        self,
        cluster_id: str,
        read_offsets_log: bool = True,
        *,
        now: datetime | None = None,
        max_gap: timedelta = DEFAULT_MAX_GAP,
    ) -> ClusterKnowledge:
        """The memory the last run on `cluster_id` saved, or a fresh one; its first-observed times
        only if that run was at most `max_gap` before `now` (default: the current time)."""
        fresh = ClusterKnowledge(ObservedTimes(), read_offsets_log=read_offsets_log)
        path = self.path(cluster_id)
        try:
            if not (_private(self.directory) and _private(path)):
                return fresh
            with path.open("rb") as file:
                saved: dict[str, Any] = pickle.load(file)
        except FileNotFoundError:
            return fresh
        except Exception as error:  # a damaged checkpoint costs a full read, never the run
            log.warning("ignoring the ledger checkpoint %s: %s", path, type(error).__name__)
            return fresh
        if saved.get("format") != FORMAT or saved.get("cluster_id") != cluster_id:
            return fresh
        observed = ObservedTimes.from_json(saved["observed"])
        confirmed_at = saved.get("observed_confirmed_at")
        if not isinstance(confirmed_at, datetime):
            confirmed_at = datetime.min.replace(tzinfo=UTC)
        if observed.drop_unconfirmed(confirmed_at, now or datetime.now(UTC), max_gap):
            log.info("first-observed clocks of %s restart: last confirmed at %s", cluster_id, confirmed_at)
        observed.take_changes()  # (only a store of changes needs them)
        ledger = saved.get("ledger")
        if not read_offsets_log or not isinstance(ledger, OffsetsLedger):
            return ClusterKnowledge(observed, read_offsets_log=read_offsets_log)
        signatures = saved.get("scope")
        scope = None if signatures is None else _scope(signatures)
        ledger.narrow_scope(None if scope is None else scope.accepts)  # the predicate is not saved
        caught_up_at = saved.get("caught_up_at")
        return ClusterKnowledge(observed, ledger, True, scope, caught_up_at)

    def save(
        self, cluster_id: str, memory: ClusterKnowledge, *, confirmed_at: datetime | None = None
    ) -> None:
        """Writes the memory after a run (best effort: a failure is logged, the run stands);
        `confirmed_at`: when that run observed the groups (None: never, the clocks restart)."""
        scope = memory.scope
        if scope is not None and scope.signatures is None:
            return  # a scope made of code cannot be compared by a later run
        document = {
            "format": FORMAT,
            "cluster_id": cluster_id,
            "scope": None if scope is None else sorted(scope.signatures or ()),
            "ledger": memory.ledger,
            "observed": memory.observed.to_json(),
            "caught_up_at": memory.caught_up_at,
            "observed_confirmed_at": confirmed_at,
        }
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".checkpoint-")
            try:
                with os.fdopen(handle, "wb") as file:
                    _dump(document, file)
                os.replace(temporary, self.path(cluster_id))
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except Exception as error:
            log.warning("could not save the ledger checkpoint in %s: %s", self.directory, error)


def _dump(document: dict[str, Any], file: BinaryIO) -> None:
    """Pickles without a memo: it would hold an entry per object of the ledger (~150 MiB at 100k
    groups), and nothing in it is shared but names, which the ledger interns again. CPython's pickler
    without a memo (`fast`) cannot write frozensets past its nesting limit (a KeyError; a ValueError
    for one reached twice), and subscriptions are frozensets: such a ledger is written again with
    the memo, at its cost, rather than not at all (every later run would read the whole log)."""
    pickler = pickle.Pickler(file, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    try:
        pickler.dump(document)
    except (KeyError, ValueError):
        file.seek(0)
        file.truncate()
        pickle.Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(document)


def _scope(signatures: list[tuple[tuple[str, ...], tuple[str, ...]]]) -> GroupScope:
    return GroupScope.of(GroupSelector(include=list(inc), exclude=list(exc)) for inc, exc in signatures)


def _private(path: Path) -> bool:
    """Owned by this user, writable by nobody else (a pickle from elsewhere could run code)."""
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        log.warning("ignoring the ledger checkpoint %s: not private to this user", path)
        return False
    return True

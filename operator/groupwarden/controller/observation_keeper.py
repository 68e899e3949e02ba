"""Keeps each cluster's first-observed times in an observation store, so a restart or a failover
to the standby continues the clocks instead of starting them again.

Per cluster, by the replica that holds the leader Lease, and only for clusters whose passes keep
first-observed clocks (`__consumer_offsets` unreadable, or records it cannot date): a cluster
whose offsets log dates everything never gets a store (no topic is created on it). A process
learns which clusters need one from its first pass of each:
- after that first pass (`after_gather`), a cluster with clocks opens the store (creating the
  topic when allowed) and resumes the stored clocks that agree with what the pass saw
  (`observation_store_records.resume`): the first pass after a restart or failover decided with fresh
  clocks (which can only delay), the next ones use the resumed clocks;
- before its later passes as leader (`before_pass`): the store is opened, which fences every writer
  that opened it before (a deposed leader's later writes fail), and what it holds replaces the
  memory, minus the entries not confirmed within `max_gap` (their clocks restart);
- after every gather (`after_gather`): the entries that changed, tombstones for groups left without
  a clock, and the pass record, in atomic pieces of at most `PIECE_GROUPS` groups with the pass
  record in the last (`observation_store_records.BatchPieces`: a first write of 100k groups is never
  built or queued whole); only while this replica holds the Lease.
- A store that cannot be opened or written costs nothing but the persistence: the passes go on
  with the memory in the process (as without a store), the batch is tried again next pass, and a
  store opened after passes already ran is made equal to the memory (the memory watched later).
- Losing the Lease (`leadership_changed(False)`) or being fenced drops the store: the next term
  opens it again and starts from what the leader of the meantime stored.
- A store that cannot be opened or written is news for every policy of the cluster that decides
  with first-observed times (`clock_keeping`: their ClocksPersisted condition, its event, metric
  and alert, until a pass opens and writes it again). It is logged once per change of what fails
  and then summarised at most every `SUMMARY_EVERY`, never once per pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from groupwarden.cleanup.observation_store_port import (
    ObservationStore,
    ObservationStoreError,
    ObservationStoreFenced,
    ObservationStoreMissing,
)
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.controller.connections import ClusterState
from groupwarden.controller.leadership import Leadership
from groupwarden.controller.report import ClockKeeping
from groupwarden.core.observation_store_records import PIECE_GROUPS, BatchPieces, adopt, restore, resume
from groupwarden.core.observed_clocks import DEFAULT_MAX_GAP
from groupwarden.core.verdicts import VerdictCache

# The name it had as controller/observations.py: logger names are an interface (a user's logging
# configuration may name it), kept across the rename.
log = logging.getLogger("groupwarden.controller.observations")

# (connection settings, cluster id) -> the cluster's store through that connection
StoreFactory = Callable[[ConnectionSettings, str], ObservationStore]
# A store that keeps failing the same way is summarised in the log this often (seconds).
SUMMARY_EVERY = 600.0
_IN_MEMORY = "first-observed clocks are kept in memory only: a restart or failover starts them again"


class PassMemory:
    """No observation store: the first-observed times live in the process only."""

    def before_pass(self, cluster: ClusterState, settings: ConnectionSettings, now: datetime) -> None:
        return None

    def after_gather(self, cluster: ClusterState, settings: ConnectionSettings, now: datetime) -> None:
        cluster.memory.observed.take_changes()  # nobody writes them: do not let them pile up

    def leadership_changed(self, leader: bool) -> None:
        return None

    def clock_keeping(self, cluster_id: str) -> ClockKeeping | None:
        """Whether the cluster's first-observed clocks outlive the process (None: no store is
        configured, or nothing is known yet)."""
        return None

    def close(self) -> None:
        return None


@dataclass
class _Tracked:
    store: ObservationStore | None = None
    # Opened (and the memory set from it, or it from the memory) in this leadership term.
    open: bool = False
    # A gather ran in this term: the memory holds observations of this term (and how many).
    watched: bool = False
    watched_passes: int = 0
    # Whether the last open/write failed (to log a change of state once, not every pass).
    failing: bool = False
    # What fails (None: nothing), for the policies' ClocksPersisted condition.
    problem: str | None = None
    # Repeats of the same failure since it was last logged, and when that was (monotonic).
    repeats: int = 0
    logged_at: float = 0.0
    # The term the running pass started in (`ObservationKeeper._term`).
    pass_term: int = -1
    # Whether the cluster's passes keep first-observed clocks (None: no pass seen yet).
    needed: bool | None = None
    # The running pass's attempt to open the store failed (one attempt a pass while it fails).
    tried: bool = False


class ObservationKeeper(PassMemory):
    """Called from the Kafka threads (one pass per cluster at a time) and, for
    `leadership_changed`, from the event loop."""

    def __init__(
        self,
        open_store: StoreFactory,
        leadership: Leadership,
        writer: str,
        max_gap: timedelta = DEFAULT_MAX_GAP,
        piece_groups: int = PIECE_GROUPS,
    ) -> None:
        self._open_store = open_store
        self._leadership = leadership
        self.writer = writer
        self.max_gap = max_gap
        self.piece_groups = piece_groups
        self._lock = threading.Lock()
        self._clusters: dict[str, _Tracked] = {}
        # Counts leadership changes: a pass that started in an earlier term (it was in flight when
        # the Lease was lost, maybe won back since) must neither open the store for the new term
        # nor count its observations as this term's (another leader may have watched meanwhile).
        self._term = 0

    def _tracked(self, cluster_id: str) -> _Tracked:
        with self._lock:
            return self._clusters.setdefault(cluster_id, _Tracked())

    def leadership_changed(self, leader: bool) -> None:
        """A new term (or none): every cluster's store is opened again by the next leader pass."""
        with self._lock:
            self._term += 1
            for tracked in self._clusters.values():
                tracked.open = False
                tracked.watched = False
                tracked.watched_passes = 0

    def before_pass(self, cluster: ClusterState, settings: ConnectionSettings, now: datetime) -> None:
        tracked = self._tracked(cluster.cluster_id)
        with self._lock:
            term = tracked.pass_term = self._term
        tracked.tried = False
        if not self._leadership.is_leader:
            return
        if tracked.open:
            return  # (whichever connection opened it: the cluster's policies may use several)
        if tracked.needed is False:
            return  # the last pass kept no clocks: `after_gather` opens it when one does
        # Before a process's first pass of the cluster, only a store that exists is opened: one
        # that does not holds nothing to resume, and a cluster whose offsets log dates everything
        # must not get a topic.
        self._open(tracked, cluster, settings, now, term, create=tracked.needed is True)

    def _open(
        self,
        tracked: _Tracked,
        cluster: ClusterState,
        settings: ConnectionSettings,
        now: datetime,
        term: int,
        create: bool = True,
    ) -> None:
        """Opens the cluster's store (fencing earlier writers) and sets the memory from it: restored
        (a new term that has not watched yet), resumed (a term whose first pass just ran) or kept
        (the term watched longer than the store knows)."""
        first_watch = tracked.watched_passes == 1
        self._close(tracked)
        store = self._open_store(settings, cluster.cluster_id)
        try:
            stored = store.open(create=create)
        except ObservationStoreMissing:
            log.debug("cluster %s: no observation store yet", cluster.cluster_id)
            _close_quietly(store)
            return
        except ObservationStoreError as error:
            tracked.tried = True  # failed: not again in this pass
            self._failed(
                tracked, cluster.cluster_id, f"cannot open the observation store: {error}", error, settings
            )
            _close_quietly(store)
            return
        with self._lock:
            if self._term != term:  # the term ended while the store was opened
                _close_quietly(store)
                return
        memory = cluster.memory
        if first_watch:
            resumed = resume(memory.observed, stored, now, self.max_gap)
            # The next pass dates the facts of these groups with their resumed clocks. Every other
            # group's kept facts were dated with clocks that did not change, so they and their
            # verdicts hold (a verdict is kept only for the same facts object: core/verdicts.py).
            for group_id in resumed:
                memory.facts.pop(group_id, None)
            how = f"resumed {sum(resumed.values())} clocks of {len(resumed)} groups after the first pass"
        elif tracked.watched:
            adopt(memory.observed, stored)
            how = "kept the memory of this term"
        else:
            memory.observed = restore(stored, now, self.max_gap)
            # Facts and verdicts were dated with the memory just replaced.
            memory.facts, memory.verdicts = {}, VerdictCache()
            dropped = len(memory.observed.changed)
            how = f"restored {len(stored.groups) - dropped} groups' clocks"
            if dropped:
                how += f", restarted {dropped} not confirmed within {self.max_gap}"
        tracked.store, tracked.open = store, True
        log.info("cluster %s: observation store opened: %s", cluster.cluster_id, how)

    def after_gather(self, cluster: ClusterState, settings: ConnectionSettings, now: datetime) -> None:
        tracked = self._tracked(cluster.cluster_id)
        with self._lock:
            term = tracked.pass_term
            same_term = term == self._term
        if not same_term:
            cluster.memory.observed.take_changes()  # the next pass replaces this memory
            return
        tracked.watched = True
        tracked.watched_passes += 1
        observed = cluster.memory.observed
        tracked.needed = bool(observed.empty_since or observed.offsets or observed.changed)
        if tracked.needed and not tracked.open and not tracked.tried and self._leadership.is_leader:
            self._open(tracked, cluster, settings, now, term)
        store = tracked.store
        # The Lease first (cheap, local): a replica that knows it lost it writes nothing; the
        # store's fence stops one that does not know yet.
        if store is None or not tracked.open or not self._leadership.is_leader:
            # Nothing is written: an opening later in this term rewrites the whole memory, a new
            # term replaces it with the store's.
            cluster.memory.observed.take_changes()
            return
        observed = cluster.memory.observed
        pieces = BatchPieces(observed, cluster.cluster_id, now, self.writer, self.piece_groups)
        written = 0  # pieces stored: their groups are not written again
        try:
            for batch in pieces:
                store.write(batch)
                written += 1
        except ObservationStoreFenced as error:
            observed.mark_changed(pieces.unwritten(written))
            tracked.open = tracked.watched = False
            tracked.watched_passes = 0
            # Not a loss: the replica that fenced this one keeps the clocks.
            log.warning(
                "cluster %s: another replica took over the observation store: %s", cluster.cluster_id, error
            )
            return
        except ObservationStoreError as error:
            observed.mark_changed(pieces.unwritten(written))
            # Opened again next pass (a new client, with the settings of then: credentials may
            # have been rotated), and made equal to the memory.
            self._close(tracked)
            self._failed(
                tracked, cluster.cluster_id, f"observation store not written: {error}", error, settings
            )
            return
        if tracked.failing:
            log.info(
                "cluster %s: observation store written again: first-observed clocks are kept",
                cluster.cluster_id,
            )
        tracked.failing = False
        tracked.problem, tracked.repeats = None, 0
        log.debug(
            "cluster %s: observation store: %d changes written in %d pieces",
            cluster.cluster_id,
            len(pieces.groups),
            len(pieces),
        )

    def _failed(
        self,
        tracked: _Tracked,
        cluster_id: str,
        message: str,
        error: ObservationStoreError,
        settings: ConnectionSettings,
    ) -> None:
        """Logged when what fails changes; a repeat only counts, summarised every SUMMARY_EVERY."""
        problem = message
        if error.missing:
            problem += f"; missing {error.missing} for the principal of {settings.describe()}"
        problem += f"; {_IN_MEMORY}"
        now = time.monotonic()
        if problem != tracked.problem:
            log.warning("cluster %s: %s", cluster_id, problem)
            tracked.problem, tracked.repeats, tracked.logged_at = problem, 0, now
        else:
            tracked.repeats += 1
            if now - tracked.logged_at >= SUMMARY_EVERY:
                log.warning(
                    "cluster %s: still failing (%d more attempts in %.0f s): %s",
                    cluster_id,
                    tracked.repeats,
                    now - tracked.logged_at,
                    problem,
                )
                tracked.repeats, tracked.logged_at = 0, now
        tracked.failing = True

    def clock_keeping(self, cluster_id: str) -> ClockKeeping | None:
        with self._lock:
            tracked = self._clusters.get(cluster_id)
        if tracked is None or not tracked.needed:
            return None
        if tracked.problem is not None:
            return ClockKeeping(False, tracked.problem)
        if tracked.open:
            return ClockKeeping(True, "first-observed clocks are kept in the observation store")
        return None  # not opened in this term yet (a standby, or before its first leader pass)

    def _close(self, tracked: _Tracked) -> None:
        store, tracked.store, tracked.open = tracked.store, None, False
        if store is not None:
            _close_quietly(store)

    def close(self) -> None:
        with self._lock:
            tracked = list(self._clusters.values())
        for one in tracked:
            self._close(one)


def _close_quietly(store: ObservationStore) -> None:
    try:
        store.close()
    except Exception as error:  # closing a broken client must not fail the pass
        log.debug("closing an observation store failed: %s", type(error).__name__)

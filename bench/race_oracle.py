"""The race campaign's oracle: what the clients saw, compared with what groupwarden deleted.

Pure (no client, no clock): `bench/race_campaign.py` records the events and the unit tests feed it
synthetic ones. Every time is a wall-clock float (time.time()) taken in the one campaign process.

Why intervals and not instants: nobody outside the broker knows the instant it executed a
DeleteGroups / OffsetDelete, or the instant a member joined or left. What is known for sure:
- the deletion ran inside [request sent, answer received] (the gateway call's window);
- a member is *certainly* in its group from the first time its client observed an assignment
  (the broker gave it one) until its close() call (its LeaveGroup / leave heartbeat is sent only
  after that), and *possibly* from its subscribe() call until close() returned;
- a member is *certainly* subscribed to a topic from the first time it observed partitions of that
  topic (the broker assigns a topic only to its subscribers; one member per group here, so it gets
  all of them) until the subscribe() call that drops it, and *possibly* from the subscribe() call
  that names it until it observed a non-empty assignment without that topic (KIP-848: revoked
  after the broker took the new subscription; classic: the new generation's assignment);
- a commit reached the log inside [commit() called, commit() returned].
A verdict is only drawn when the intervals decide it: a deletion executed while a certain interval
covered its whole window is wrongful, one whose window only overlaps an interval is
`ambiguous-window`, never silently "correct".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

TP = tuple[str, int]
BECAME_ACTIVE = frozenset({"NON_EMPTY_GROUP", "GROUP_SUBSCRIBED_TO_TOPIC"})
NOT_FOUND = frozenset({"GROUP_ID_NOT_FOUND", "UNKNOWN_TOPIC_OR_PARTITION"})


class Outcome(StrEnum):
    """One verdict per planned item (a group deletion, or one partition of an offset deletion) and
    one per group the plan left alone. The wrongful ones are the campaign's findings."""

    DELETED_CORRECTLY = "deleted-correctly"
    # Nothing lost and nothing active during the request, but a client was active (or tried to
    # commit) between the last decision and the request: its basis was stale when it ran.
    DELETED_AFTER_ACTIVITY = "deleted-after-activity"
    SKIPPED_BECAME_ACTIVE = "skipped-became-active"  # the broker refused: NON_EMPTY_GROUP, ...
    # groupwarden's re-check before the request saw a commit / member since the plan: not sent.
    SKIPPED_CHANGED = "skipped-changed-since-plan"
    NOT_ELIGIBLE = "not-eligible"  # in no action of the plan
    NOT_FOUND = "not-found"
    FAILED = "failed"
    # The client-side intervals overlap the request's window without covering it: the broker may
    # have executed the deletion on either side of the boundary.
    AMBIGUOUS_WINDOW = "ambiguous-window"
    WRONGFUL_ACTIVE = "wrongful-active"  # deleted while a member certainly was in / subscribed
    WRONGFUL_LOST_COMMIT = "wrongful-lost-commit"  # a commit groupwarden could have read was deleted
    # A commit made after the plan, acknowledged after groupwarden's last read before the request
    # (the re-check) and before the request was sent, was deleted: Kafka has no conditional
    # delete, so no client can close this window; it is counted, not hidden (DESIGN.md).
    LOST_IN_RESIDUAL_WINDOW = "lost-in-residual-window"
    # An operator trial: a commit after the cut-off was deleted, and when the operator last read
    # the offsets is not visible from outside (wrongful or residual): counted as wrongful.
    LOST_READ_UNKNOWN = "lost-commit-read-unknown"
    # The broker's final offsets disagree with the clients' record and the deletions reported.
    BROKER_MISMATCH = "broker-mismatch"
    # A share group's DeleteGroups was refused (NON_EMPTY_GROUP: a member joined) and its start
    # offsets are gone anyway: Kafka (4.3.1, GroupCoordinatorService.deleteGroups) deletes a share
    # group's state through the persister first and the group in a second coordinator write that
    # checks Empty again; a member that joins between the two keeps the group but not its state.
    # Kafka's, not groupwarden's (the request was sent to an Empty group): counted, not hidden.
    SHARE_STATE_LOST_TO_A_REFUSED_DELETE = "share-state-lost-to-a-refused-delete"
    AUDIT_MISMATCH = "audit-mismatch"  # the audit trail says something the gateway did not see


WRONGFUL = frozenset(
    {
        Outcome.WRONGFUL_ACTIVE,
        Outcome.WRONGFUL_LOST_COMMIT,
        Outcome.LOST_READ_UNKNOWN,
        Outcome.BROKER_MISMATCH,
        Outcome.AUDIT_MISMATCH,
    }
)


@dataclass(frozen=True)
class Interval:
    start: float
    end: float

    def covers(self, other: Interval) -> bool:
        return self.start <= other.start and other.end <= self.end

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class Session:
    """One client's membership of one group (a Consumer from subscribe() to close())."""

    group: str
    client: str
    protocol: str
    # (call started, call returned, topics): every subscribe() call, in order.
    subscribes: list[tuple[float, float, frozenset[str]]] = field(default_factory=list)
    # (observed at, full assignment): every change the client observed after a poll.
    assignments: list[tuple[float, frozenset[TP]]] = field(default_factory=list)
    close_called: float = math.inf
    close_returned: float = math.inf
    lost_at: float = math.inf  # on_lost / fenced: the broker dropped the member before this

    def member_certain(self) -> Interval | None:
        first = next((t for t, a in self.assignments if a), None)
        end = min(self.close_called, self.lost_at)
        return Interval(first, end) if first is not None and first < end else None

    def member_possible(self) -> Interval | None:
        if not self.subscribes:
            return None
        return Interval(self.subscribes[0][0], self.close_returned)

    def subscribed(self, topic: str) -> tuple[list[Interval], list[Interval]]:
        """(certain, possible) intervals in which the broker had this member subscribed to `topic`."""
        certain: list[Interval] = []
        possible: list[Interval] = []
        calls = self.subscribes
        for i, (called, _returned, topics) in enumerate(calls):
            if topic not in topics:
                continue
            next_call = calls[i + 1][0] if i + 1 < len(calls) else math.inf
            stop = min(next_call, self.close_called, self.lost_at)
            seen = next(
                (t for t, a in self.assignments if called <= t < stop and any(tp[0] == topic for tp in a)),
                None,
            )
            if seen is not None:
                certain.append(Interval(seen, stop))
            if next_call < math.inf and next_call < self.close_called:
                # Possibly still subscribed until the member observed an assignment without it.
                until = next(
                    (
                        t
                        for t, a in self.assignments
                        if t >= next_call and a and not any(tp[0] == topic for tp in a)
                    ),
                    self.close_returned,
                )
            else:
                until = self.close_returned
            possible.append(Interval(called, until))
        return certain, possible


@dataclass(frozen=True)
class Commit:
    """One commit() call: the offsets it sent and which partitions the broker accepted. `unknown`
    when the call raised (it may or may not have reached the log)."""

    group: str
    offsets: Mapping[TP, int]
    start: float
    end: float
    accepted: frozenset[TP]
    unknown: bool = False
    # Share groups: the lowest start offset the broker may report after this acknowledgement.
    # DescribeShareGroupOffsets reports the start offset persisted with the share state, which
    # Kafka 4.3.1 writes as it was *before* the acknowledgement it persists (the acknowledged range
    # is kept beside it): after a batch [f, l] is accepted it reports f, not l + 1, until the next
    # write (measured on the devstack broker, docs/benchmarks.md, "Race campaign"). So the broker
    # must show a value in [floor, offset] (the first offset of the batch, the true start offset after it).
    floor: Mapping[TP, int] | None = None
    # False for a share consumer that released what it got: no progress to lose, but the share
    # state exists from then on (a member that joins a deleted share group creates it anew, its
    # start offset at the log's end, at most the first record it got).
    progress: bool = True

    @property
    def window(self) -> Interval:
        return Interval(self.start, self.end)


@dataclass(frozen=True)
class Deletion:
    """One DeleteGroups / OffsetDelete request as the gateway made it. `errors`: per group (kind
    "groups") or per partition (kind "offsets"), None = deleted; `group_error` for OffsetDelete."""

    kind: str  # "groups" | "offsets"
    group: str
    partitions: tuple[TP, ...]
    start: float
    end: float
    error: str | None  # the group-level answer (None: deleted / per-partition answers apply)
    partition_errors: Mapping[TP, str | None] = field(default_factory=dict)

    @property
    def window(self) -> Interval:
        return Interval(self.start, self.end)


@dataclass(frozen=True)
class PlanView:
    """The plan as the oracle needs it: when it was decided (`now`, wall clock), when groupwarden
    asked for the offsets log's end (a commit acknowledged before that is in what it read), the
    retention the policy applies, and its actions."""

    def last_check_before(self, moment: float) -> tuple[float, float]:
        """When the last decision before `moment` (a request) took its `now`, as an interval."""
        return max((c for c in self.checks if c[1] < moment), default=(self.now, self.now))

    def last_read_before(self, moment: float) -> float:
        return max((t for t in self.log_reads if t < moment), default=-math.inf)

    now: float
    log_reads: tuple[float, ...]  # every read of the offsets log's end (the gather, the re-checks)
    checks: tuple[tuple[float, float], ...]  # (earliest, latest) `now` of the plan and each re-check
    retention: float
    groups_to_delete: frozenset[str]
    offsets_to_delete: Mapping[str, frozenset[TP]]
    reads_known: bool = True  # False for the operator (a separate process)
    # Share groups' progress (start offsets) is not in the offsets log: it is read only with
    # DescribeShareGroupOffsets, so only those reads could have seen an acknowledgement.
    share_reads: tuple[float, ...] = ()


@dataclass(frozen=True)
class Verdict:
    group: str
    item: str  # "group" or "topic:partition"
    outcome: Outcome
    detail: str = ""


def _worst(outcomes: Iterable[Outcome]) -> Outcome:
    order = [
        Outcome.AUDIT_MISMATCH,
        Outcome.BROKER_MISMATCH,
        Outcome.WRONGFUL_ACTIVE,
        Outcome.WRONGFUL_LOST_COMMIT,
        Outcome.LOST_READ_UNKNOWN,
        Outcome.LOST_IN_RESIDUAL_WINDOW,
        Outcome.AMBIGUOUS_WINDOW,
        Outcome.DELETED_AFTER_ACTIVITY,
        Outcome.DELETED_CORRECTLY,
    ]
    present = set(outcomes)
    return next((o for o in order if o in present), Outcome.DELETED_CORRECTLY)


def _lost_commits(
    commits: Sequence[Commit], partitions: Iterable[TP], window: Interval, plan: PlanView
) -> tuple[Outcome, str]:
    """Did this deletion remove a commit made after the plan's cut-off (now - retention)?"""
    # The last decision before the request (a re-check decides again at its own time) may delete
    # what is older than the retention at its `now`: known only as an interval, hence two cut-offs.
    earliest, latest = plan.last_check_before(window.start)
    cutoff, old_before = latest - plan.retention, earliest - plan.retention
    verdicts: list[tuple[Outcome, str]] = []
    wanted = set(partitions)
    for commit in commits:
        if not commit.progress:
            continue
        touched = (commit.accepted | (set(commit.offsets) if commit.unknown else set())) & wanted
        if not touched:
            continue
        if commit.window.overlaps(window):
            verdicts.append((Outcome.AMBIGUOUS_WINDOW, f"commit {sorted(touched)} during the request"))
        elif commit.end < window.start:
            if commit.start > cutoff:
                read = plan.last_read_before(window.start)
                where = (
                    f"commit {sorted(touched)} [{commit.start:.3f}, {commit.end:.3f}] after the "
                    f"cut-off {cutoff:.3f}, read {read:.3f}, request [{window.start:.3f}, {window.end:.3f}]"
                )
                if not plan.reads_known:
                    verdicts.append((Outcome.LOST_READ_UNKNOWN, where))
                elif commit.end < read:
                    verdicts.append((Outcome.WRONGFUL_LOST_COMMIT, where))
                elif commit.start > read:
                    verdicts.append((Outcome.LOST_IN_RESIDUAL_WINDOW, where))
                else:
                    verdicts.append((Outcome.AMBIGUOUS_WINDOW, where))
            elif commit.end >= old_before:
                verdicts.append((Outcome.AMBIGUOUS_WINDOW, f"commit {sorted(touched)} across the cut-off"))
    if not verdicts:
        return Outcome.DELETED_CORRECTLY, ""
    worst = _worst(v[0] for v in verdicts)
    return worst, "; ".join(d for o, d in verdicts if o is worst)


def _activity(
    certain: Sequence[Interval], possible: Sequence[Interval], window: Interval, what: str
) -> tuple[Outcome, str]:
    for interval in certain:
        if interval.covers(window):
            return Outcome.WRONGFUL_ACTIVE, (
                f"{what} certainly during [{interval.start:.3f}, {interval.end:.3f}] covering the request "
                f"[{window.start:.3f}, {window.end:.3f}]"
            )
    for interval in [*certain, *possible]:
        if interval.overlaps(window):
            return Outcome.AMBIGUOUS_WINDOW, (
                f"{what} possibly during [{interval.start:.3f}, {interval.end:.3f}], request "
                f"[{window.start:.3f}, {window.end:.3f}]"
            )
    return Outcome.DELETED_CORRECTLY, ""


def _after_plan(
    possible: Sequence[Interval], commits: Sequence[Commit], plan: PlanView, window: Interval
) -> bool:
    """A client was active (or tried to commit) between the last decision (the plan, or the
    re-check before this request) and the request: the request ran on a stale basis."""
    between = Interval(plan.last_check_before(window.start)[0], window.start)
    return any(i.overlaps(between) for i in possible) or any(c.window.overlaps(between) for c in commits)


def _error_outcome(error: str) -> Outcome:
    if error in BECAME_ACTIVE:
        return Outcome.SKIPPED_BECAME_ACTIVE
    if error in NOT_FOUND:
        return Outcome.NOT_FOUND
    return Outcome.FAILED


def judge(
    groups: Sequence[str],
    plan: PlanView,
    sessions: Sequence[Session],
    commits: Sequence[Commit],
    deletions: Sequence[Deletion],
    reported: Mapping[str, str] | None = None,
    share_groups: Iterable[str] = (),
) -> list[Verdict]:
    """One verdict per deletion item and per group the plan left alone. `reported`: the result
    groupwarden reported for a planned group it sent no request for (its re-check dropped it).
    `share_groups`: their commits are acknowledgements (start offsets), judged against the
    share-offset reads instead of the log reads. Streams groups need no rule of their own: their
    members are sessions (an assignment observed = certainly in) and their commits ordinary."""
    verdicts: list[Verdict] = []
    by_group: dict[str, list[Deletion]] = {}
    for deletion in deletions:
        by_group.setdefault(deletion.group, []).append(deletion)
    share = frozenset(share_groups)
    share_view = replace(plan, log_reads=plan.share_reads)
    for group in groups:
        view = share_view if group in share else plan
        group_sessions = [s for s in sessions if s.group == group]
        group_commits = [c for c in commits if c.group == group]
        if not by_group.get(group):
            planned = group in view.groups_to_delete or group in view.offsets_to_delete
            result = (reported or {}).get(group, "")
            if not planned:
                outcome = Outcome.NOT_ELIGIBLE
            elif result == "SkippedBecameActive":
                outcome = Outcome.SKIPPED_CHANGED
            elif result == "NotFound":
                outcome = Outcome.NOT_FOUND
            else:
                outcome = Outcome.FAILED
            verdicts.append(Verdict(group, "group", outcome, result))
            continue
        for deletion in by_group[group]:
            if deletion.kind == "groups":
                verdicts.append(_judge_group(group, deletion, group_sessions, group_commits, view))
            else:
                verdicts.extend(_judge_offsets(group, deletion, group_sessions, group_commits, view))
    return verdicts


def _judge_group(
    group: str, deletion: Deletion, sessions: Sequence[Session], commits: Sequence[Commit], plan: PlanView
) -> Verdict:
    if deletion.error is not None:
        return Verdict(group, "group", _error_outcome(deletion.error), deletion.error)
    certain = [i for s in sessions if (i := s.member_certain())]
    possible = [i for s in sessions if (i := s.member_possible())]
    all_partitions = {tp for c in commits for tp in c.offsets} | set(deletion.partitions)
    checks = [
        _activity(certain, possible, deletion.window, "a member"),
        _lost_commits(commits, all_partitions, deletion.window, plan),
    ]
    worst = _worst(o for o, _ in checks)
    if worst is Outcome.DELETED_CORRECTLY and _after_plan(possible, commits, plan, deletion.window):
        worst = Outcome.DELETED_AFTER_ACTIVITY
    return Verdict(group, "group", worst, "; ".join(d for o, d in checks if o is worst and d))


def _judge_offsets(
    group: str, deletion: Deletion, sessions: Sequence[Session], commits: Sequence[Commit], plan: PlanView
) -> list[Verdict]:
    if deletion.error is not None:
        return [
            Verdict(group, f"{t}:{p}", _error_outcome(deletion.error), deletion.error)
            for t, p in deletion.partitions
        ]
    verdicts = []
    for tp in deletion.partitions:
        item = f"{tp[0]}:{tp[1]}"
        error = deletion.partition_errors.get(tp, "NO_ANSWER")
        if error is not None:
            verdicts.append(Verdict(group, item, _error_outcome(error), error))
            continue
        certain: list[Interval] = []
        possible: list[Interval] = []
        for session in sessions:
            c, p = session.subscribed(tp[0])
            certain += c
            possible += p
        checks = [
            _activity(certain, possible, deletion.window, f"subscribed to {tp[0]}"),
            _lost_commits(commits, [tp], deletion.window, plan),
        ]
        worst = _worst(o for o, _ in checks)
        if worst is Outcome.DELETED_CORRECTLY and _after_plan(
            possible, [c for c in commits if tp in c.offsets], plan, deletion.window
        ):
            worst = Outcome.DELETED_AFTER_ACTIVITY
        verdicts.append(Verdict(group, item, worst, "; ".join(d for o, d in checks if o is worst and d)))
    return verdicts


AMBIGUOUS = object()


@dataclass(frozen=True)
class MaybeDeleted:
    """`value`, or nothing: a share group's refused DeleteGroups came after the write of `value`
    (see Outcome.SHARE_STATE_LOST_TO_A_REFUSED_DELETE)."""

    value: object


@dataclass(frozen=True)
class Between:
    """A value the broker may report anywhere in [low, high] (a share start offset, see Commit)."""

    low: int
    high: int


def expected_offsets(
    group: str, commits: Sequence[Commit], deletions: Sequence[Deletion], share: bool = False
) -> dict[TP, object]:
    """What the broker must hold for `group` after the trial, from the clients' commits and the
    deletions the gateway saw succeed: an offset, None (deleted) or AMBIGUOUS.

    Per partition, the broker's final value comes from whichever write it executed last; any event
    that ended after the latest start of all events may be that one. If those candidates disagree
    (a commit and a deletion overlapped), or one is a commit of unknown result, it is AMBIGUOUS."""
    events: dict[TP, list[tuple[Interval, object]]] = {}
    for commit in commits:
        if commit.group != group:
            continue
        for tp, offset in commit.offsets.items():
            if commit.unknown:
                events.setdefault(tp, []).append((commit.window, AMBIGUOUS))
            elif tp in commit.accepted:
                floor = (commit.floor or {}).get(tp)
                value = offset if floor is None or floor == offset else Between(floor, offset)
                events.setdefault(tp, []).append((commit.window, value))
    for deletion in deletions:
        if deletion.group != group or deletion.error is not None:
            continue
        if deletion.kind == "groups":
            deleted = list(events)
        else:
            deleted = [tp for tp, error in deletion.partition_errors.items() if error is None]
        for tp in deleted:
            events.setdefault(tp, []).append((deletion.window, None))
    refused = [
        d.window
        for d in deletions
        if share and d.group == group and d.kind == "groups" and d.error == "NON_EMPTY_GROUP"
    ]
    expected: dict[TP, object] = {}
    for tp, writes in events.items():
        latest_start = max(w.start for w, _ in writes)
        candidates = {id(v) if v is AMBIGUOUS else v for w, v in writes if w.end >= latest_start}
        if len(candidates) == 1 and id(AMBIGUOUS) not in candidates:
            value = next(iter(candidates))
            # A refused delete that ended after the write may have taken the state with it.
            if value is not None and any(r.end >= latest_start for r in refused):
                value = MaybeDeleted(value)
            expected[tp] = value
        else:
            expected[tp] = AMBIGUOUS
    return expected


def compare_with_broker(group: str, expected: Mapping[TP, object], broker: Mapping[TP, int]) -> list[Verdict]:
    """BROKER_MISMATCH for every partition whose final offset is decided and differs."""
    found = []
    for tp, value in expected.items():
        if value is AMBIGUOUS:
            continue
        actual = broker.get(tp)
        if isinstance(value, MaybeDeleted):
            if actual is None:
                detail = (
                    f"was {value.value}; DeleteGroups answered NON_EMPTY_GROUP after deleting the share state"
                )
                found.append(
                    Verdict(group, f"{tp[0]}:{tp[1]}", Outcome.SHARE_STATE_LOST_TO_A_REFUSED_DELETE, detail)
                )
                continue
            value = value.value
        if isinstance(value, Between):
            if actual is not None and value.low <= actual <= value.high:
                continue
        elif actual == value:
            continue
        found.append(
            Verdict(group, f"{tp[0]}:{tp[1]}", Outcome.BROKER_MISMATCH, f"expected {value}, broker {actual}")
        )
    return found


def tally(verdicts: Iterable[Verdict]) -> Counter[str]:
    return Counter(v.outcome.value for v in verdicts)

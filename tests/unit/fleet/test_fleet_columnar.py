"""COUNT and DECIDE on columns (`fleet/columnar_*.py`) against the core: the oracle tests of the
fast path (DESIGN.md, "Fast paths and their oracle").

The core (`snapshot_from_answers`, `count_part`, `decide_part`, `what_if`: `task_decide.run_step(...,
columns=False)`) is the oracle. On generated decision rows (groups of every kind and state, with
and without members, Empty-since and commit times known, unknown, equal to a cut-off, out of a
datetime's range; offsets repeated, orphaned; come-backs; one or two clusters; rows in any order)
and generated policies (overlapping globs, every rule set, group types, limits down to 0, what-if
retentions), COUNT with the fast path gives the same counts, oldest keys, what-if rows and judged
groups as the core alone, DECIDE the same actions, skip counts and `skips` rows; and every group
of a shape the fast path does not claim reaches the core (its rows stay in `Split.rest`).
"""

from __future__ import annotations

import pickle
import tempfile
import zlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwarden.core.engine import PolicyTotals
from groupwarden.core.parts import PartKeys, cluster_cutoffs, keys_need_breakers
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.selection import GroupMatcher
from groupwarden.core.snapshot import GroupKind
from groupwarden.fleet.columnar_claims import CLAIM_COLUMN, Claim
from groupwarden.fleet.columnar_count import split_count
from groupwarden.fleet.columnar_decide import split_decide
from groupwarden.fleet.task_decide import (
    DECISION_SCHEMA,
    ClusterContext,
    DecideSettings,
    Facts,
    Globals,
    Step,
    later_rows,
    run_step,
    selects_id,
)
from groupwarden.offsets_log.views import MAX_LOG_MS, MIN_LOG_MS

pytestmark = pytest.mark.unit

BASE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BASE_MS = int(BASE.timestamp() * 1000)
MINUTE_MS = 60_000
IDS = ["a-1", "a-2", "a-3", "ab", "b-1", "b-22", "c", "z-9"]
TOPICS = ["t1", "t2", "t3"]
KINDS = ["classic", "consumer", "simple", "share", "streams", "unknown"]
DURATIONS = ["1m", "10m", "30m", "1h", "2h", "1d"]
RETENTIONS = [timedelta(minutes=1), timedelta(minutes=10), timedelta(minutes=30), timedelta(hours=1)]

# Times around the policies' cut-offs (whole minutes before `now`, so `age == retention` happens),
# unknown, and out of a datetime's range.
times = st.one_of(
    st.builds(lambda k: BASE_MS - k * MINUTE_MS, st.integers(-5, 130)),
    st.sampled_from([None, 0, MIN_LOG_MS, MIN_LOG_MS - 7, MAX_LOG_MS, MAX_LOG_MS + 3, -(2**62), 2**62]),
    st.builds(lambda k: BASE_MS - 86_400_000 + k, st.integers(-2, 2)),
)


# Ids the policies' globs select in overlapping ways; a group id twice in a cluster happens too.
group_ids = st.one_of(
    st.sampled_from(IDS),
    st.builds(lambda p, n: f"{p}{n}", st.sampled_from(["a-", "b-", "c", "z-"]), st.integers(0, 60)),
)


@st.composite
def groups(draw: Any) -> list[dict[str, Any]]:
    """The decision rows of one group: its group row and its offsets' rows."""
    cluster = draw(st.sampled_from(["east", "west"]))
    group_id = draw(group_ids)
    # mostly the shapes the fast path claims, often Empty
    kind = draw(st.sampled_from([*KINDS, "classic", "consumer", "simple", "simple"]))
    members = draw(st.sampled_from([None, 0, 0, 0, 1, 3]))
    topics = draw(st.one_of(st.none(), st.lists(st.sampled_from(TOPICS), unique=True, max_size=2)))
    row = {
        "row_kind": "group",
        "cluster": cluster,
        "group": group_id,
        "kind": kind,
        "protocol_type": draw(st.sampled_from(["consumer", "connect", "", None])),
        "member_count": members,
        "empty_since_ms": draw(times),
        "subscribed_topics": topics,
        "offset_count": 0,
    }
    partitions = draw(
        st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 2)), unique=True, max_size=4)
    )
    rows = [row]
    for topic, number in partitions:
        rows.append(_offset(cluster, group_id, topic, number, draw(times)))
    if partitions and draw(st.integers(0, 9)) == 0:  # the same partition twice
        topic, number = partitions[0]
        rows.append(_offset(cluster, group_id, topic, number, draw(times)))
    row["offset_count"] = len(rows) - 1
    return rows


def _offset(cluster: str, group_id: str, topic: str, number: int, commit_ms: int | None) -> dict[str, Any]:
    return {
        "row_kind": "offset",
        "cluster": cluster,
        "group": group_id,
        "topic": topic,
        "tp": number,
        "offset": 5,
        "commit_time_ms": commit_ms,
        "metadata": "",
    }


comebacks = st.builds(
    lambda cluster, group_id, kind, pause: {
        "row_kind": "comeback",
        "cluster": cluster,
        "group": group_id,
        "kind": kind,
        "empty_since_ms": BASE_MS - 100 * MINUTE_MS,
        "returned_ms": BASE_MS - 100 * MINUTE_MS + pause * MINUTE_MS,
    },
    st.sampled_from(["east", "west"]),
    group_ids,
    st.sampled_from(["classic", "consumer"]),
    st.integers(1, 90),
)


@st.composite
def policy_sets(draw: Any) -> list[ConsumerGroupPolicy]:
    policies = []
    for index in range(draw(st.sampled_from([1, 1, 2, 3]))):
        rules = {
            name: draw(st.sampled_from(DURATIONS))
            for name in draw(
                st.lists(
                    st.sampled_from(
                        ["emptyGroupRetention", "unsubscribedOffsetRetention", "simpleGroupOffsetRetention"]
                    ),
                    unique=True,
                    min_size=1,
                )
            )
        }
        selector: dict[str, Any] = {
            "include": draw(
                st.lists(
                    st.sampled_from(["*", "a-*", "b-?", "a-1", "c", "a*", "z-*", "b-*"]),
                    min_size=1,
                    max_size=2,
                )
            ),
            "exclude": draw(st.lists(st.sampled_from(["a-2", "b-2*"]), max_size=1)),
        }
        kinds = draw(st.one_of(st.none(), st.lists(st.sampled_from(KINDS[:5]), unique=True, min_size=1)))
        if kinds is not None:
            selector["groupTypes"] = kinds
        document = {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": f"p{index}", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092"},
                "selector": selector,
                "rules": rules,
                "mode": draw(st.sampled_from(["Enforce", "DryRun"])),
                "suspend": draw(st.booleans()),
                "limits": {
                    "maxDeletionRatio": draw(st.sampled_from([0.1, 0.5, 1.0])),
                    "maxGroupDeletionsPerRun": draw(st.integers(0, 3)),
                    "maxOffsetDeletionsPerRun": draw(st.integers(0, 4)),
                },
            },
        }
        policies.append(parse_policy(document))
    return policies


@st.composite
def decision_rows(draw: Any, min_groups: int = 0) -> pa.Table:
    rows = [row for group in draw(st.lists(groups(), min_size=min_groups, max_size=24)) for row in group]
    rows.extend(draw(st.lists(comebacks, max_size=3)))
    if draw(st.booleans()):  # an offset without its group's row
        rows.append(_offset("east", "orphan", "t1", 0, BASE_MS))
    rows = draw(st.permutations(rows))
    return pa.Table.from_pylist(rows, schema=DECISION_SCHEMA)


def _settings(
    policies: list[ConsumerGroupPolicy], now: datetime, retentions: list[timedelta]
) -> DecideSettings:
    contexts = {name: ClusterContext(f"id-{name}", None, None) for name in ("east", "west")}
    return DecideSettings(tuple(policies), now, tuple(retentions), contexts)


def _count(rows: pa.Table, settings_: DecideSettings, columns: bool) -> tuple[dict[str, Any], Facts]:
    facts = Facts(selects_id(settings_))
    results = {}
    for cluster, payload in run_step(rows, Step.COUNT, settings_, None, 0, facts, columns=columns):
        counted = pickle.loads(payload)
        results[cluster] = (counted.counts, counted.what_if)
    return results, facts


nows = st.one_of(
    st.just(BASE), st.builds(lambda us: BASE + timedelta(microseconds=us), st.integers(1, 999_999))
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    decision_rows(min_groups=4),
    policy_sets(),
    nows,
    st.lists(st.sampled_from(RETENTIONS), max_size=3, unique=True),
)
def test_count_on_columns_equals_the_core(
    rows: pa.Table, policies: list[ConsumerGroupPolicy], now: datetime, retentions: list[timedelta]
) -> None:
    mine = _settings(policies, now, retentions)
    fast, fast_facts = _count(rows, mine, columns=True)
    core, core_facts = _count(rows, mine, columns=False)
    assert fast == core
    assert {c: j for c, j in fast_facts.judged.items() if j} == {
        c: j for c, j in core_facts.judged.items() if j
    }


def _claimable(row: dict[str, Any], policies: list[ConsumerGroupPolicy], repeated: bool) -> bool:
    """The shapes the fast path may answer for (module docstring of columnar_claims), stated apart."""
    if repeated or row["kind"] not in ("classic", "consumer", "simple"):
        return False
    matchers = [GroupMatcher.from_selector(p.spec.selector) for p in policies]
    kind = GroupKind(row["kind"])
    selecting = [i for i, m in enumerate(matchers) if m.matches_id(row["group"]) and kind in m.kinds]
    if len(selecting) > 1:
        return False
    if len(selecting) == 1 and row["member_count"]:
        rules = policies[selecting[0]].spec.rules.enabled()
        return kind is not GroupKind.SIMPLE and "unsubscribedOffsetRetention" not in {r.value for r in rules}
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decision_rows(), policy_sets())
def test_shapes_the_columns_do_not_claim_reach_the_core(
    rows: pa.Table, policies: list[ConsumerGroupPolicy]
) -> None:
    split = split_count(rows, policies, BASE, [], {"east": "e", "west": "w"})
    listed = [r for r in rows.to_pylist() if r["row_kind"] == "group"]
    keys = [(r["cluster"], r["group"]) for r in listed]
    offsets = [
        (r["cluster"], r["group"], r["topic"], r["tp"]) for r in rows.to_pylist() if r["row_kind"] == "offset"
    ]
    rest_rows = split.rest.to_pylist()
    rest_groups = [(r["cluster"], r["group"]) for r in rest_rows if r["row_kind"] == "group"]
    rest_offsets = [
        (r["cluster"], r["group"], r["topic"], r["tp"]) for r in rest_rows if r["row_kind"] == "offset"
    ]
    assert len(split.policy_of) == len(listed)
    for row, policy_of in zip(listed, split.policy_of.tolist(), strict=True):
        key = (row["cluster"], row["group"])
        mine = [o for o in offsets if o[:2] == key]
        repeated = keys.count(key) > 1 or len(set(mine)) < len(mine)
        if not _claimable(row, policies, repeated):
            assert policy_of == Claim.UNCLAIMED
        if policy_of == Claim.UNCLAIMED:
            # the group and all its offsets go to the core
            assert key in rest_groups
            assert sorted(o for o in rest_offsets if o[:2] == key) == sorted(mine)
        else:
            assert key not in rest_groups
            assert not [o for o in rest_offsets if o[:2] == key]
            assert policy_of in (Claim.OUTSIDE, Claim.UNSELECTED) or 0 <= policy_of < len(policies)
    # come-backs always reach the core (its what-if counts them)
    assert sum(r["row_kind"] == "comeback" for r in rest_rows) == sum(
        r["row_kind"] == "comeback" for r in rows.to_pylist()
    )
    assert isinstance(split.policy_of, np.ndarray)


def test_the_common_shapes_are_claimed() -> None:
    """Empty classic / KIP-848 groups, Stable ones without the unsubscribed rule, simple groups:
    counted on columns (the point of the fast path), and their counts equal the core's."""
    policy = parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "all", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092"},
                "selector": {"include": ["*"], "groupTypes": ["classic", "consumer", "simple"]},
                "rules": {"emptyGroupRetention": "1h", "simpleGroupOffsetRetention": "10m"},
                "limits": {"maxDeletionRatio": 1.0, "maxGroupDeletionsPerRun": 2},
            },
        }
    )
    old, recent = BASE_MS - 120 * MINUTE_MS, BASE_MS - 5 * MINUTE_MS
    rows = []
    for index, (kind, members, since, commits) in enumerate(
        [
            ("classic", 0, old, [old]),
            ("consumer", 0, old, [recent]),
            ("classic", 2, None, [old]),
            ("simple", 0, None, [old, old]),
            ("simple", 0, None, [old, recent]),
            ("simple", 0, old, []),
        ]
    ):
        group_id = f"g{index}"
        rows.append(
            {
                "row_kind": "group",
                "cluster": "east",
                "group": group_id,
                "kind": kind,
                "member_count": members,
                "empty_since_ms": since,
                "offset_count": len(commits),
            }
        )
        rows.extend(_offset("east", group_id, "t1", n, at) for n, at in enumerate(commits))
    table = pa.Table.from_pylist(rows, schema=DECISION_SCHEMA)
    split = split_count(table, [policy], BASE, RETENTIONS, {"east": "e"})
    assert split.policy_of.tolist() == [0] * 6 and split.rest.num_rows == 0
    assert split.claimed["east"].judged == {"g0", "g3", "g4", "g5"}
    mine = _settings([policy], BASE, RETENTIONS)
    assert _count(table, mine, columns=True)[0] == _count(table, mine, columns=False)[0]


def _globals(rows: pa.Table, settings_: DecideSettings, extra: list[tuple[int, int]]) -> Globals:
    """What the driver finds from COUNT (and KEYS when needed) over these rows, each policy's
    totals raised by `extra` (matched, eligible) groups of other tasks (so breakers trip or not)."""
    policies = list(settings_.policies)
    counts = {}
    for cluster, payload in run_step(rows, Step.COUNT, settings_, None, 0, columns=False):
        mine = pickle.loads(payload).counts
        mine.totals = [t + PolicyTotals(m, e, 0) for t, (m, e) in zip(mine.totals, extra, strict=False)]
        counts[cluster] = mine
    totals = {c: counts[c].totals for c in counts}
    keys: dict[str, PartKeys] = {}
    needs = {c for c in counts if keys_need_breakers(policies, counts[c])}
    if needs:
        for cluster, payload in run_step(rows, Step.KEYS, settings_, Globals(totals), 0, columns=False):
            if cluster in needs:
                keys[cluster] = pickle.loads(payload)
    cuts = {c: cluster_cutoffs(policies, counts[c], keys.get(c)) for c in counts}
    return Globals(totals, cuts)


def _decide(rows: pa.Table, settings_: DecideSettings, found: Globals, columns: bool) -> tuple[Any, Any]:
    with tempfile.TemporaryDirectory() as directory:
        writing = replace(settings_, skips=directory)
        results = {
            cluster: pickle.loads(payload)
            for cluster, payload in run_step(rows, Step.DECIDE, writing, found, 0, columns=columns)
        }
        written = sorted(Path(directory).glob("*.parquet"))
        skips = [pq.read_table(path).to_pylist() for path in written]
    return results, skips


# groups of other tasks per policy, (matched, eligible): `_globals` adds them so breakers trip or not
other_tasks = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=3, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    decision_rows(min_groups=8),
    policy_sets(),
    nows,
    other_tasks,
)
def test_decide_on_columns_equals_the_core(
    rows: pa.Table, policies: list[ConsumerGroupPolicy], now: datetime, extra: list[tuple[int, int]]
) -> None:
    """DECIDE's actions, skip counts, reclaimed topics and every row of the `skips` table."""
    mine = _settings(policies, now, [])
    found = _globals(rows, mine, [(m, min(e, m)) for m, e in extra])
    assert _decide(rows, mine, found, columns=True) == _decide(rows, mine, found, columns=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decision_rows(min_groups=8), policy_sets())
def test_decide_gives_the_core_every_group_it_does_not_claim_and_every_action(
    rows: pa.Table, policies: list[ConsumerGroupPolicy]
) -> None:
    mine = _settings(policies, BASE, [])
    found = _globals(rows, mine, [(0, 0)] * 3)
    split = split_decide(rows, policies, BASE, found.totals, found.cuts)
    listed = [r for r in rows.to_pylist() if r["row_kind"] == "group"]
    rest_groups = [(r["cluster"], r["group"]) for r in split.rest.to_pylist() if r["row_kind"] == "group"]
    for row, policy_of, acting in zip(listed, split.policy_of.tolist(), split.acting.tolist(), strict=True):
        key = (row["cluster"], row["group"])
        assert (key in rest_groups) == (policy_of == Claim.UNCLAIMED or acting)
    # a claimed group goes to the core exactly when the core makes an action of it
    whole, _ = _decide(rows, mine, found, columns=False)
    acted = {(c, a.group_id) for c, d in whole.items() for actions in d.actions for a in actions}
    for row, policy_of, acting in zip(listed, split.policy_of.tolist(), split.acting.tolist(), strict=True):
        if policy_of != Claim.UNCLAIMED:
            assert acting == ((row["cluster"], row["group"]) in acted)
    # and the core alone on the rest makes every action
    core, _ = _decide(split.rest, mine, found, columns=False)
    assert {c: d.actions for c, d in core.items()} == {c: d.actions for c, d in whole.items() if c in core}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    decision_rows(min_groups=8),
    policy_sets(),
    nows,
    other_tasks,
    st.integers(1, 3),
)
def test_decide_from_the_claims_count_hands_over_equals_claiming_again(
    rows: pa.Table,
    policies: list[ConsumerGroupPolicy],
    now: datetime,
    extra: list[tuple[int, int]],
    units: int,
) -> None:
    """The stage writes each unit's judged rows with COUNT's claims (`later_rows`), units one
    after another in a task's file; DECIDE takes the claims from there. Its actions, skip counts
    and skips table equal DECIDE's claiming the same rows again, and the core's alone."""
    mine = _settings(policies, now, [])
    found = _globals(rows, mine, [(m, min(e, m)) for m, e in extra])
    # a unit holds all the rows of its groups (Kafka writes a group's records to one partition)
    listed = rows.to_pylist()
    written = []
    first_group = 0
    for unit in range(units):
        unit_rows = [r for r in listed if zlib.crc32(f"{r['cluster']}/{r['group']}".encode()) % units == unit]
        table = pa.Table.from_pylist(unit_rows, schema=DECISION_SCHEMA)
        facts = Facts(selects_id(mine))
        list(run_step(table, Step.COUNT, mine, None, 0, facts))
        later = later_rows(table, facts, first_group)
        first_group += sum(1 for kind in later.column("row_kind").to_pylist() if kind == "group")
        written.append(later)
    handed = pa.concat_tables(written)
    assert handed.column(CLAIM_COLUMN).null_count == 0
    unclaimed = handed.set_column(
        handed.schema.get_field_index(CLAIM_COLUMN), CLAIM_COLUMN, pa.nulls(handed.num_rows, pa.int64())
    )
    fast = _decide(handed, mine, found, columns=True)
    assert fast == _decide(unclaimed, mine, found, columns=True)
    assert fast == _decide(unclaimed, mine, found, columns=False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            # (a group row past 2**31 with both ends of int32's partitions: the lexsort path)
            st.one_of(st.integers(0, 6), st.just(2**31)),
            st.integers(-1, 4),
            st.one_of(st.integers(0, 5), st.sampled_from([-(2**31), 2**31 - 1])),
        ),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_repeated_partitions_are_found_in_any_order(rows: list[tuple[int, int, int]], ordered: bool) -> None:
    """`_same_as_next` (one int64 key, or a lexsort when the key would not fit) marks all but one
    row of every repeated (group, topic, partition), whether the rows come sorted or not."""
    from groupwarden.fleet.columnar_claims import _same_as_next

    if ordered:
        rows = sorted(rows)
    owner, codes, partition = (np.array(column, dtype=np.int64) for column in zip(*rows, strict=True))
    mask = _same_as_next(owner, codes, partition)
    seen: dict[tuple[int, int, int], int] = {}
    for row in rows:
        seen[row] = seen.get(row, 0) + 1
    marked: dict[tuple[int, int, int], int] = {}
    for row, repeated in zip(rows, mask.tolist(), strict=True):
        marked[row] = marked.get(row, 0) + int(repeated)
    assert marked == {row: count - 1 for row, count in seen.items()}

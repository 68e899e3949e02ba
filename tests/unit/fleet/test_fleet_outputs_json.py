"""plan.json's skips are written by `core.render.indented_json` (in the tasks, at indent 0; the driver
indents them), a fast path for flat objects of
strings: it must write exactly what `json.dumps(..., indent=2)` writes (plan.json is the CLI's)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from groupwarden.core.plan import Skip, SkipReason
from groupwarden.core.render import indented_json, indented_skip_json, skip_to_json
from groupwarden.core.snapshot import GroupKind, TopicPartition

scalars = st.one_of(st.text(), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=True))
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3)
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), st.text(), max_size=6), st.sampled_from(["", "  ", "        "]))
def test_a_flat_object_of_strings_is_written_as_json_dumps_indents_it(
    document: dict[str, str], pad: str
) -> None:
    assert indented_json(document, pad) == json.dumps(document, indent=2).replace("\n", "\n" + pad)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), values, max_size=5), st.sampled_from(["", "    "]))
def test_any_other_object_is_written_as_json_dumps_indents_it(document: dict[str, Any], pad: str) -> None:
    assert indented_json(document, pad) == json.dumps(document, indent=2).replace("\n", "\n" + pad)


def test_a_skip_as_plan_json_lists_it() -> None:
    skip = {
        "group": 'fleet-\u00e9"000101\n',
        "reason": "LimitReached",
        "detail": "maxGroupDeletionsPerRun 100 reached; 99900 group deletions wait for the next run",
        "groupKind": "simple",
    }
    assert indented_json(skip, "        ") == json.dumps(skip, indent=2).replace("\n", "\n        ")
    assert indented_json(skip, "").startswith('{\n  "group": "fleet-\\u00e9\\"000101\\n",\n')


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), values, max_size=5), st.sampled_from(["  ", "        "]))
def test_the_driver_indents_what_a_task_rendered_at_indent_0(document: dict[str, Any], pad: str) -> None:
    """What `outputs.write_plans` does with a skip's `plan_json` (no line break inside a value)."""
    assert indented_json(document).replace("\n", "\n" + pad) == indented_json(document, pad)


skips = st.builds(
    Skip,
    st.text(),
    st.sampled_from(list(SkipReason)),
    st.text(),
    st.none() | st.sampled_from(list(GroupKind)),
    st.lists(st.builds(TopicPartition, st.text(), st.integers(0, 2**31 - 1)), max_size=3).map(tuple),
)


@settings(max_examples=400, deadline=None)
@given(skips)
def test_a_skip_is_rendered_as_its_document_would_be(skip: Skip) -> None:
    """`indented_skip_json` writes a skip without building its document first (the tasks render
    one per deferred group): exactly `indented_json(skip_to_json(skip))`, so json.dumps' text."""
    rendered = indented_skip_json(skip)
    assert rendered == indented_json(skip_to_json(skip)) == json.dumps(skip_to_json(skip), indent=2)


group_skips = st.builds(
    lambda ids, kinds, reason, detail: (
        ids,
        [kinds[i % len(kinds)] for i in range(len(ids))],
        reason,
        detail,
    ),
    # (ids of a small alphabet too: the same group in two blocks of a policy, escaped or not)
    st.lists(st.text(max_size=6) | st.text(alphabet='ab"\xe9', max_size=2), max_size=8, unique=True),
    st.lists(
        st.sampled_from([GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE]), min_size=1, max_size=3
    ),
    st.sampled_from([SkipReason.LIMIT_REACHED, SkipReason.BLAST_RADIUS_EXCEEDED]),
    st.text(max_size=12),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(skips, max_size=5), st.lists(group_skips, max_size=2)), min_size=1, max_size=2
    )
)
# one group deferred by two blocks of a policy, the later block's reason sorting first
@example(
    [
        (
            [],
            [
                (["b", "a"], [GroupKind.SIMPLE] * 2, SkipReason.LIMIT_REACHED, "x"),
                (["a"], [GroupKind.CLASSIC], SkipReason.BLAST_RADIUS_EXCEEDED, "y"),
            ],
        )
    ]
)
def test_skips_of_whole_groups_as_columns_make_the_same_table(per_policy: list[Any]) -> None:
    """`task_decide.skips_table` with a policy's whole-group skips as `GroupSkips` (never made
    `Skip`s) writes the same rows, in the same order, as with them as the core's `Skip`s."""
    from dataclasses import dataclass

    from test_fleet_driver_side import policy

    from groupwarden.core.parts import PartDecision
    from groupwarden.fleet.columnar_decide import GroupSkips
    from groupwarden.fleet.task_decide import skips_table

    @dataclass
    class Settings:
        policies: list[Any]

    settings = Settings([policy() for _ in per_policy])
    blocks = [[GroupSkips(*block) for block in blocks] for _, blocks in per_policy]
    as_columns = PartDecision([[] for _ in per_policy], [list(objects) for objects, _ in per_policy])
    as_skips = PartDecision(
        [[] for _ in per_policy],
        [
            list(objects) + [s for b in mine for s in b.skips()]
            for (objects, _), mine in zip(per_policy, blocks, strict=True)
        ],
    )
    expected = skips_table("east", "E", settings, as_skips)  # type: ignore[arg-type]
    assert skips_table("east", "E", settings, as_columns, blocks).to_pylist() == expected.to_pylist()  # type: ignore[arg-type]

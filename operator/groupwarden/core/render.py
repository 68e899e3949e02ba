"""Plans for machines (the CLI's JSON contract) and for people (an aligned table).

The JSON keys are a stable contract (scripts read them): `actions[].action|group|partitions|reason|
eligibleSince|timestampSource`, `skipped`, `summary.groupsMatched|groupsEligible|offsetsEligible`,
and `outcomes[].result|error` after apply. Extra keys may be added, never renamed or removed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from groupwarden.core.durations import format_age, format_duration
from groupwarden.core.plan import (
    Action,
    ActionKind,
    ActionOutcome,
    Plan,
    PlanSummary,
    Skip,
    SkipReason,
    summarize_outcomes,
)
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.core.wording import counted, groups_and_offsets

JsonObject = dict[str, Any]


def plan_to_json(plan: Plan, outcomes: Sequence[ActionOutcome] | None = None) -> JsonObject:
    """The plan (and, after apply, the outcomes) as JSON-ready data with camelCase keys."""
    document: JsonObject = {
        "policy": {"namespace": plan.policy.namespace, "name": plan.policy.name},
        "clusterId": plan.cluster_id,
        "generatedAt": to_rfc3339(plan.generated_at),
        "mode": plan.mode.value,
        "suspended": plan.suspended,
        "actions": [action_to_json(a) for a in plan.actions],
        "skipped": [skip_to_json(s) for s in plan.skipped],
        "summary": summary_to_json(plan.summary, outcomes),
        "warnings": list(plan.warnings),
        "overlappingPolicies": [str(ref) for ref in plan.overlapping_policies],
    }
    if outcomes is not None:
        document["outcomes"] = [outcome_to_json(o) for o in outcomes]
    return document


def partitions_to_json(partitions: Sequence[TopicPartition]) -> list[JsonObject]:
    return [{"topic": p.topic, "partition": p.partition} for p in partitions]


def action_to_json(action: Action) -> JsonObject:
    document: JsonObject = {
        "action": action.kind.value,
        "group": action.group_id,
        "groupKind": action.group_kind.value,
        "rule": action.rule.value,
        "retention": format_duration(action.retention),
        "reason": action.reason,
        "eligibleSince": to_rfc3339(action.eligible_since),
        "timestampSource": action.timestamp_source.value,
        "age": format_age(action.age),
        "ageSeconds": int(action.age.total_seconds()),
    }
    if action.kind is ActionKind.DELETE_OFFSETS:
        document["partitions"] = partitions_to_json(action.partitions)
    if action.internal_topics:
        # Additive (came with streams groups): a deleted streams group's topics that stay; never
        # deleted by us.
        document["internalTopics"] = list(action.internal_topics)
    return document


def skip_to_json(skip: Skip) -> JsonObject:
    document: JsonObject = {"group": skip.group_id, "reason": skip.reason_code.value, "detail": skip.detail}
    if skip.group_kind is not None:
        document["groupKind"] = skip.group_kind.value
    if skip.partitions:
        document["partitions"] = partitions_to_json(skip.partitions)
    return document


def outcome_to_json(outcome: ActionOutcome) -> JsonObject:
    document = action_to_json(outcome.action)
    document["result"] = outcome.result.value
    if outcome.error is not None:
        document["error"] = outcome.error
    document["retriable"] = outcome.retriable
    if outcome.partitions:
        results: list[JsonObject] = []
        for p in outcome.partitions:
            item: JsonObject = {
                "topic": p.partition.topic,
                "partition": p.partition.partition,
                "result": p.result.value,
            }
            if p.error is not None:
                item["error"] = p.error
            results.append(item)
        document["partitionResults"] = results
    return document


def summary_to_json(summary: PlanSummary, outcomes: Sequence[ActionOutcome] | None = None) -> JsonObject:
    document: JsonObject = {
        "groupsTotal": summary.groups_total,
        "groupsMatched": summary.groups_matched,
        "groupsEligible": summary.groups_eligible,
        "offsetsEligible": summary.offsets_eligible,
        "groupsPlanned": summary.groups_planned,
        "offsetsPlanned": summary.offsets_planned,
        "skipped": summary.skipped,
        "blastRadiusExceeded": summary.blast_radius_exceeded,
    }
    if outcomes is not None:
        done = summarize_outcomes(outcomes)
        document.update(
            groupsDeleted=done.groups_deleted,
            offsetsDeleted=done.offsets_deleted,
            skippedBecameActive=done.skipped_became_active,
            notFound=done.not_found,
            failed=done.failed,
        )
    return document


def compact_partitions(partitions: Sequence[TopicPartition], width: int = 40) -> str:
    """`orders[0,1,2] payments[3]`, cut to `width` characters."""
    if not partitions:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p.partition)
    text = " ".join(
        f"{topic}[{','.join(map(str, sorted(numbers)))}]" for topic, numbers in sorted(by_topic.items())
    )
    return text if len(text) <= width else text[: width - 3] + "..."


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart (the last one unpadded), header first: every table
    the CLI prints."""
    widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]
    lines = []
    for row in (headers, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def render_table(plan: Plan, outcomes: Sequence[ActionOutcome] | None = None) -> str:
    """A person-readable plan: header, actions, skipped items, summary, warnings."""
    cluster = f", cluster {plan.cluster_id}" if plan.cluster_id else ""
    lines = [
        f"Plan for {plan.policy} ({plan.mode.value}{', suspended' if plan.suspended else ''}) "
        f"at {to_rfc3339(plan.generated_at)}{cluster}",
        "",
    ]
    if outcomes is not None:
        rows = [[*_action_row(o.action), _result_text(o), o.action.reason] for o in outcomes]
        headers = ["ACTION", "GROUP", "KIND", "AGE", "SOURCE", "PARTITIONS", "RESULT", "REASON"]
    else:
        rows = [[*_action_row(a), a.reason] for a in plan.actions]
        headers = ["ACTION", "GROUP", "KIND", "AGE", "SOURCE", "PARTITIONS", "REASON"]
    lines.extend(text_table(headers, rows) if rows else ["No actions."])
    if plan.skipped:
        lines += ["", f"Skipped ({len(plan.skipped)}):"]
        skip_rows = [
            [
                s.group_id or "-",
                s.reason_code.value,
                s.detail + (f" [{compact_partitions(s.partitions)}]" if s.partitions else ""),
            ]
            for s in plan.skipped
        ]
        lines.extend(text_table(["GROUP", "REASON", "DETAIL"], skip_rows))
    summary = plan.summary
    lines += [
        "",
        f"Summary: {summary.groups_matched} of {counted(summary.groups_total, 'group')} matched; "
        f"eligible: {counted(summary.groups_eligible, 'group')}, "
        f"{counted(summary.offsets_eligible, 'offset')}; "
        f"planned: {counted(summary.groups_planned, 'group')}, {counted(summary.offsets_planned, 'offset')}"
        + (f"; {summary.skipped} skipped" if summary.skipped else "")
        + ("; BLAST RADIUS EXCEEDED: nothing deleted" if summary.blast_radius_exceeded else ""),
    ]
    if outcomes is not None:
        done = summarize_outcomes(outcomes)
        others = [
            (done.skipped_became_active, "skipped (became active)"),
            (done.not_found, "not found"),
            (done.failed, "failed"),
            (done.unknown, "with an unknown outcome (the broker may have executed them)"),
        ]
        lines.append(
            f"Result: {groups_and_offsets(done.groups_deleted, done.offsets_deleted)} deleted"
            + "".join(f"; {count} {what}" for count, what in others if count)
        )
    if plan.overlapping_policies:
        lines.append("Overlaps with: " + ", ".join(str(ref) for ref in plan.overlapping_policies))
    lines.extend(
        f"Internal topics of streams group {a.group_id} (not deleted; for its owner): "
        + ", ".join(a.internal_topics)
        for a in plan.actions
        if a.internal_topics
    )
    lines.extend(f"Warning: {warning}" for warning in plan.warnings)
    return "\n".join(lines) + "\n"


def _action_row(action: Action) -> list[str]:
    return [
        action.kind.value,
        action.group_id,
        action.group_kind.value,
        format_age(action.age),
        action.timestamp_source.value,
        compact_partitions(action.partitions),
    ]


def _result_text(outcome: ActionOutcome) -> str:
    text = outcome.result.value
    if outcome.error:
        text += f" ({outcome.error}{', retriable' if outcome.retriable else ''})"
    return text


def indented_json(document: dict[str, Any], pad: str = "") -> str:
    """`json.dumps(document, indent=2)` with every line after the first prefixed by `pad`. A skip
    is a flat object of strings (and, for offsets, a list of partitions): such objects are written
    here with the C encoder's string escaping, ~4x faster than `json.dumps` with an indent (which
    runs json's pure-Python encoder), and a whole-fleet plan lists up to a skip per group (800k
    for the 8-cluster fleet). Anything else goes to `json.dumps`. No line break is ever inside a
    value (JSON escapes it), so `indented_json(d).replace("\\n", "\\n" + pad) == indented_json(d, pad)`."""
    if not document or not all(type(v) is str for v in document.values()):
        return json.dumps(document, indent=2).replace("\n", "\n" + pad)
    inner = ",\n" + pad + "  "
    body = inner.join(f"{_string(key)}: {_string(value)}" for key, value in document.items())
    return "{\n" + pad + "  " + body + "\n" + pad + "}"


_string = encode_basestring_ascii  # what json.dumps uses for a str (ensure_ascii)
json_string = _string  # (for `whole_group_skip_json`'s callers)


def indented_skip_json(skip: Skip) -> str:
    """`indented_json(skip_to_json(skip))`, written without the document in between: a
    whole-fleet audit renders a skip per deferred group (799,200 for the 8-cluster fleet), and the
    dict, the check of its values and the generator cost more than the escaping. The reason and
    the kind are `StrEnum`s: escaped as the strings they are, without `.value`."""
    if skip.partitions:
        return indented_json(skip_to_json(skip))
    head, tail = whole_group_skip_json(skip.reason_code, skip.detail, skip.group_kind)
    return head + _string(skip.group_id) + tail


def whole_group_skip_json(reason: SkipReason, detail: str, kind: GroupKind | None) -> tuple[str, str]:
    """(head, tail): `indented_skip_json` of a skip of a whole group is head + the group id as a
    JSON string + tail (so many skips of one reason, detail and kind share them)."""
    tail = ',\n  "reason": ' + _string(reason) + ',\n  "detail": ' + _string(detail)
    if kind is not None:
        tail += ',\n  "groupKind": ' + _string(kind)
    return '{\n  "group": ', tail + "\n}"

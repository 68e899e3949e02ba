"""report.html: one self-contained page (inline CSS and SVG, no JavaScript, nothing fetched)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from groupwarden.core.durations import format_age, format_duration
from groupwarden.core.plan import ActionKind, Plan
from groupwarden.core.timestamps import to_rfc3339

if TYPE_CHECKING:
    from groupwarden.fleet.evaluate import ClusterAudit

MAX_ROWS = 200
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;
font-size:13px;text-align:left;vertical-align:top}th{background:#f3f3f3}.num{text-align:right}
h2{border-bottom:2px solid #444;padding-bottom:4px}.note{color:#555;font-size:13px}
"""


def bar_chart(title: str, bars: Sequence[tuple[str, float]], width: int = 640) -> str:
    """A horizontal bar chart as inline SVG."""
    if not bars:
        return f"<p class='note'>{escape(title)}: nothing to show.</p>"
    row, label_width = 22, 260
    top = max(value for _, value in bars) or 1
    height = row * len(bars) + 30
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>",
        f"<title>{escape(title)}</title>",
        f"<text x='0' y='14' font-size='13' font-weight='bold'>{escape(title)}</text>",
    ]
    for i, (label, value) in enumerate(bars):
        y = 24 + i * row
        length = (width - label_width - 60) * value / top
        parts.append(f"<text x='0' y='{y + 14}' font-size='12'>{escape(label[:40])}</text>")
        parts.append(f"<rect x='{label_width}' y='{y + 3}' width='{length:.1f}' height='14' fill='#4a7bb7'/>")
        parts.append(f"<text x='{label_width + length + 4:.1f}' y='{y + 14}' font-size='12'>{value:g}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: frozenset[int] = frozenset()
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=num' if i in numeric else ''}>{escape(str(cell))}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows[:MAX_ROWS]
    )
    more = (
        f"<p class='note'>{len(rows) - MAX_ROWS} more rows in the Parquet tables.</p>"
        if len(rows) > MAX_ROWS
        else ""
    )
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def reclaimed_offsets_by_topic(audit: ClusterAudit) -> Counter[str]:
    """Offsets the plans remove per topic: DeleteOffsets partitions plus every offset of a deleted group."""
    offsets = {view.group_id: offsets for view, offsets in audit.answers}
    counts: Counter[str] = Counter()
    for plan in audit.plans:
        for action in plan.actions:
            if action.kind is ActionKind.DELETE_OFFSETS:
                counts.update(p.topic for p in action.partitions)
            else:
                counts.update(tp.topic for tp in offsets.get(action.group_id, {}))
    return counts


def _plan_section(plan: Plan) -> str:
    s = plan.summary
    rows = [
        [a.kind.value, a.group_id, a.group_kind.value, format_age(a.age), a.timestamp_source.value, a.reason]
        for a in plan.actions
    ]
    rules = Counter(a.rule.value for a in plan.actions)
    breaker = "; <b>blast radius exceeded: nothing would be deleted</b>" if s.blast_radius_exceeded else ""
    return (
        f"<h3>{escape(str(plan.policy))} ({plan.mode.value}{', suspended' if plan.suspended else ''})</h3>"
        f"<p>{s.groups_matched} of {s.groups_total} groups selected; eligible {s.groups_eligible} groups and "
        f"{s.offsets_eligible} offsets; planned {s.groups_planned} groups and {s.offsets_planned} offsets; "
        f"{s.skipped} skipped{breaker}.</p>"
        + bar_chart("Planned actions per rule", sorted(rules.items()))
        + _table(["action", "group", "kind", "age", "source", "why"], rows)
        + "".join(f"<p class='note'>Warning: {escape(w)}</p>" for w in plan.warnings)
    )


def _what_if_section(audit: ClusterAudit) -> str:
    if not audit.what_if:
        return "<p class='note'>No what-if retentions were asked for (--what-if).</p>"
    rows = [
        [
            str(r.policy),
            r.rule.value,
            format_duration(r.retention),
            r.groups,
            r.offsets,
            r.offsets_in_groups,
            r.comeback_groups,
        ]
        for r in audit.what_if
    ]
    charts = "".join(
        bar_chart(
            f"{policy} {rule}: groups + offsets eligible by retention",
            [
                (format_duration(r.retention), r.groups + r.offsets)
                for r in audit.what_if
                if str(r.policy) == policy and r.rule.value == rule
            ],
        )
        for policy, rule in dict.fromkeys((str(r.policy), r.rule.value) for r in audit.what_if)
    )
    return (
        _table(
            [
                "policy",
                "rule",
                "retention",
                "groups",
                "offsets",
                "offsets in those groups",
                "come-back groups",
            ],
            rows,
            frozenset({3, 4, 5, 6}),
        )
        + charts
        + "<p class='note'>Come-back groups: groups the policy selects that, in the log history, became "
        "active again after being Empty longer than the retention; under it they would have lost their "
        "offsets and restarted from auto.offset.reset.</p>"
    )


def _cluster_section(audit: ClusterAudit) -> str:
    reach = audit.reach
    since = "nothing" if reach.earliest_ms is None else _ms(reach.earliest_ms)
    until = "-" if reach.latest_ms is None else _ms(reach.latest_ms)
    actions = [(plan, a) for plan in audit.plans for a in plan.actions]
    oldest = sorted(actions, key=lambda item: item[1].age, reverse=True)[:20]
    reclaimed = reclaimed_offsets_by_topic(audit).most_common(20)
    kinds = Counter(view.kind.value for view, _ in audit.answers)
    return (
        f"<h2>Cluster {escape(audit.source.name)} <small>({escape(audit.source.cluster_id)})</small></h2>"
        f"<p>{reach.records} records in {reach.partitions} partitions of __consumer_offsets "
        f"({reach.tombstones} tombstones); {len(audit.answers)} groups "
        f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}).</p>"
        f"<p><b>How far back the log reaches:</b> from {since} to {until}. The topic is compacted: "
        "older history (superseded commits and group records, tombstones after delete.retention.ms) is "
        "gone, so come-backs before that time cannot be seen.</p>"
        + "".join(_plan_section(plan) for plan in audit.plans)
        + "<h3>Oldest offenders</h3>"
        + _table(
            ["policy", "group", "action", "age", "eligible since"],
            [
                [str(p.policy), a.group_id, a.kind.value, format_age(a.age), to_rfc3339(a.eligible_since)]
                for p, a in oldest
            ],
        )
        + "<h3>Reclaimed offsets per topic</h3>"
        + bar_chart("Offsets removed by the plans, per topic (top 20)", reclaimed)
        + "<h3>Retention what-if</h3>"
        + _what_if_section(audit)
    )


def _ms(ms: int) -> str:
    from groupwarden.offsets_log.views import log_time

    return to_rfc3339(log_time(ms).at)


def render_report(
    audits: Sequence[ClusterAudit], summary: dict[str, Any], now: Any = None, histograms: Any = None
) -> str:
    engine = summary.get("engine", {})
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>groupwarden fleet audit</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>groupwarden fleet audit</h1><p>Generated at {escape(str(summary.get('generatedAt')))} "
        f"on {escape(str(engine.get('master', '')))}; {len(audits)} cluster(s). Nothing was deleted: "
        "this is what the policies would do.</p>"
        + "".join(_cluster_section(audit) for audit in audits)
        + "</body></html>\n"
    )

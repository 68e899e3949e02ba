"""report.html: one self-contained page (inline CSS, SVG and a few lines of JavaScript; nothing is
fetched). It answers "which retention can we afford, and what would it remove?":

1. fleet overview: one row per cluster (records, groups by type, eligible groups/offsets per
   policy, blast-radius trips) and fleet totals;
2. the idle-age distribution of Empty groups (since Empty, or since the last commit for simple
   groups) per group type, with the policies' retentions and the what-if candidates marked, and
   the come-backs' pauses on the same axis;
3. the what-if as curves (retention -> groups / offsets removed, come-back risk);
4. per-cluster detail, collapsed (<details>); an empty section is one line, never an empty table.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape
from typing import TYPE_CHECKING, Any

from groupwarden.core.durations import format_age, format_duration
from groupwarden.core.plan import ActionKind, Plan
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.fleet.schema import IDLE_EDGES

if TYPE_CHECKING:
    from groupwarden.fleet.cluster_audit import ClusterAudit

MAX_ROWS = 200
KIND_COLORS = {
    "classic": "#4a7bb7",
    "consumer": "#e39b2d",
    "simple": "#5aa469",
    "share": "#8e44ad",
    "streams": "#16a085",
    "other": "#999",
}
# Kinds shown on their own (columns, histogram stacks); anything else is "other".
_KINDS = ("classic", "consumer", "simple", "share", "streams")
# What `__consumer_offsets` cannot tell about the newer group types (said next to their numbers).
SHARE_STATE_READ_NOTE = (
    "Share groups (KIP-932): membership and Empty-since come from __consumer_offsets; their "
    "share-partition start offsets are not in it: they were read from __share_group_state, each "
    "dated by the share coordinator's record that last changed it, as groupwarden plan does."
)
SHARE_STATE_MISSING_NOTE = (
    "Share groups (KIP-932): membership and Empty-since come from __consumer_offsets; their "
    "share-partition start offsets are not in it (they live in __share_group_state, which this audit "
    "could not read), so plan.json dates them as a first run of groupwarden plan without that topic "
    "does (first observed at the audit's time: no Empty share group is deleted on a first run), and "
    "the what-if counts an Empty share group by its Empty-since (its start offsets only move while "
    "Empty if an admin alters them)."
)
STREAMS_NOTE = (
    "Streams groups (KIP-1071): membership, Empty-since, committed offsets and the topology "
    "(subscription, internal topics) come from __consumer_offsets, like a KIP-848 group's."
)
_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1280px}
table{border-collapse:collapse;margin:.5em 0 1.2em}td,th{border:1px solid #ccc;padding:3px 7px;
font-size:13px;text-align:left;vertical-align:top}th{background:#f3f3f3;position:sticky;top:0}
.num{text-align:right;font-variant-numeric:tabular-nums}tr.total td{font-weight:bold;background:#fafafa}
h2{border-bottom:2px solid #444;padding-bottom:4px;margin-top:1.6em}.note{color:#555;font-size:13px}
.scroll{max-height:520px;overflow:auto;display:inline-block;max-width:100%}
details{margin:.3em 0;border:1px solid #ddd;border-radius:4px;padding:.3em .6em}
summary{cursor:pointer;font-weight:600}.trip{color:#b00;font-weight:bold}
.legend span{display:inline-block;margin-right:1em;font-size:13px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
"""
_SCRIPT = """
document.getElementById('expand').addEventListener('click', function () {
  var open = this.dataset.open !== '1';
  document.querySelectorAll('details.cluster').forEach(function (d) { d.open = open; });
  this.dataset.open = open ? '1' : '0';
  this.textContent = open ? 'collapse all clusters' : 'expand all clusters';
});
document.body.dataset.rendered = 'ok';
"""


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else escape(str(value))


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    numeric: frozenset[int] = frozenset(),
    empty: str = "nothing",
    total: Sequence[Any] | None = None,
) -> str:
    if not rows:
        return f"<p class='note'>{escape(empty)}.</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)

    def line(row: Sequence[Any], css: str = "") -> str:
        cells = "".join(
            f"<td{' class=num' if i in numeric else ''}>{_n(cell)}</td>" for i, cell in enumerate(row)
        )
        return f"<tr{css}>{cells}</tr>"

    body = "".join(line(row) for row in rows[:MAX_ROWS])
    if total is not None:
        body += line(total, " class=total")
    more = (
        f"<p class='note'>{len(rows) - MAX_ROWS:,} more rows in the Parquet tables.</p>"
        if len(rows) > MAX_ROWS
        else ""
    )
    return f"<div class=scroll><table><tr>{head}</tr>{body}</table></div>{more}"


def reclaimed_offsets_by_topic(audit: ClusterAudit) -> Counter[str]:
    """Offsets the plans remove per topic: DeleteOffsets partitions plus every offset of a deleted group."""
    offsets = {view.group_id: offsets for view, offsets in audit.answers}
    counts: Counter[str] = Counter()
    for plan in audit.plans:
        for action in plan.actions:
            if action.kind is ActionKind.DELETE_OFFSETS:
                counts.update(p.topic for p in action.partitions)
            elif audit.reclaimed is None:
                counts.update(tp.topic for tp in offsets.get(action.group_id, {}))
    if audit.reclaimed is not None:  # the deleted groups' offsets, counted by the tasks
        counts.update(audit.reclaimed)
    return counts


# ---------------------------------------------------------------------------------------------
# Fleet overview
# ---------------------------------------------------------------------------------------------


def _kind_group(kind: str) -> str:
    return kind if kind in _KINDS else "other"


def _overview(audits: Sequence[ClusterAudit], policies: list[str]) -> str:
    headers = ["cluster", "records", "groups", *_KINDS, "other", "selected"]
    for policy in policies:
        headers += [f"{policy}: eligible groups", "eligible offsets", "blast radius"]
    rows: list[list[Any]] = []
    totals: list[Any] = ["fleet total"] + [0] * (len(headers) - 1)
    for audit in audits:
        kinds: Counter[str] = Counter()
        for kind, count in audit.groups_by_kind.items():
            kinds[_kind_group(kind)] += count
        selected = audit.groups_selected
        row: list[Any] = [
            audit.source.name,
            audit.reach.records,
            sum(kinds.values()),
            *(kinds[kind] for kind in _KINDS),
            kinds["other"],
            selected,
        ]
        by_policy = {str(p.policy): p for p in audit.plans}
        for policy in policies:
            plan = by_policy.get(policy)
            if plan is None:
                row += [0, 0, "-"]
            else:
                s = plan.summary
                row += [s.groups_eligible, s.offsets_eligible, "TRIPPED" if s.blast_radius_exceeded else "ok"]
        rows.append(row)
        for i, cell in enumerate(row[1:], start=1):
            if isinstance(cell, int):
                totals[i] += cell
            elif cell == "TRIPPED":
                totals[i] = (totals[i] or 0) + 1
    for i, header in enumerate(headers):
        if header == "blast radius":
            totals[i] = f"{totals[i] or 0} tripped"
    numeric = frozenset(i for i, h in enumerate(headers) if h not in ("cluster", "blast radius"))
    return _table(headers, rows, numeric, total=totals if len(rows) > 1 else None)


# ---------------------------------------------------------------------------------------------
# Idle-age histogram
# ---------------------------------------------------------------------------------------------

_EDGE_SECONDS = (
    0,
    60,
    600,
    3600,
    6 * 3600,
    86400,
    3 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
    90 * 86400,
    365 * 86400,
)


def _bucket_x(seconds: float, width: float, buckets: int, left: float) -> float:
    """x of a duration on the bucket axis (log-interpolated inside its bucket)."""
    edges = list(_EDGE_SECONDS)
    slot = width / buckets
    for i in range(len(edges)):
        upper = edges[i + 1] if i + 1 < len(edges) else edges[i] * 4
        if seconds < upper or i == len(edges) - 1:
            lower = max(edges[i], 1)
            frac = (
                0.0
                if seconds <= lower
                else (math.log(seconds) - math.log(lower)) / (math.log(upper) - math.log(lower))
            )
            return left + slot * (i + min(max(frac, 0.0), 1.0))
    return left + width


def _idle_histogram(histograms: dict[str, Any] | None, marks: list[tuple[str, timedelta, bool]]) -> str:
    if not histograms:
        return "<p class='note'>nothing (no idle-age data).</p>"
    labels: list[str] = histograms["edges"]
    buckets = len(labels)
    stacks: dict[int, Counter[str]] = defaultdict(Counter)
    unknown: Counter[str] = Counter()
    for row in histograms["idle"]:
        kind = _kind_group(row["kind"])
        if row["bucket"] < 0:
            unknown[kind] += row["count"]
        else:
            stacks[row["bucket"]][kind] += row["count"]
    backs: Counter[int] = Counter()
    for row in histograms["comebacks"]:
        backs[row["bucket"]] += row["count"]
    if not stacks and not backs:
        return "<p class='note'>nothing: no Empty group and no come-back in the log.</p>"
    width, left, top, bar_h, back_h = 900, 60, 30, 220, 70
    slot = width / buckets
    peak = max((sum(c.values()) for c in stacks.values()), default=0) or 1
    back_peak = max(backs.values(), default=0) or 1
    height = top + bar_h + 40 + back_h + 40
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {left + width + 20} {height}' "
        f"width='{left + width + 20}' height='{height}' role='img' id='idle-histogram'>",
        "<title>Idle age of Empty groups per group type, with retentions and come-backs</title>",
        f"<text x='{left}' y='16' font-size='13' font-weight='bold'>Empty groups by idle age "
        "(stacked by type; "
        f"peak {peak:,})</text>",
    ]
    for b in range(buckets):
        x = left + b * slot
        y: float = top + bar_h
        for kind in (*_KINDS, "other"):
            count = stacks.get(b, Counter())[kind]
            if not count:
                continue
            h = bar_h * count / peak
            y -= h
            parts.append(
                f"<rect x='{x + 4:.1f}' y='{y:.1f}' width='{slot - 8:.1f}' height='{h:.1f}' "
                f"fill='{KIND_COLORS[kind]}'><title>{escape(labels[b])}: {count:,} {kind}</title></rect>"
            )
        parts.append(
            f"<text x='{x + slot / 2:.1f}' y='{top + bar_h + 14}' font-size='11' text-anchor='middle'>"
            f"{escape(labels[b])}</text>"
        )
        if backs.get(b):
            h = back_h * backs[b] / back_peak
            y0 = top + bar_h + 30
            parts.append(
                f"<rect x='{x + 4:.1f}' y='{y0}' width='{slot - 8:.1f}' height='{h:.1f}' fill='#c0392b' "
                f"opacity='0.8'><title>{backs[b]:,} come-backs after a pause of "
                f"{escape(labels[b])}</title></rect>"
            )
    parts.append(
        f"<line x1='{left}' x2='{left + width}' y1='{top + bar_h}' y2='{top + bar_h}' stroke='#333'/>"
        f"<text x='0' y='{top + bar_h + 45}' font-size='11' fill='#c0392b'>come-</text>"
        f"<text x='0' y='{top + bar_h + 58}' font-size='11' fill='#c0392b'>backs</text>"
    )
    for i, (label, retention, is_policy) in enumerate(marks):
        x = _bucket_x(retention.total_seconds(), width, buckets, left)
        color = "#000" if is_policy else "#7d3c98"
        dash = "" if is_policy else " stroke-dasharray='4 3'"
        parts.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top - 4}' y2='{top + bar_h + 30 + back_h}' "
            f"stroke='{color}' "
            f"stroke-width='1.5'{dash}><title>{escape(label)}</title></line>"
            f"<text x='{x + 3:.1f}' y='{top + 8 + 11 * (i % 4)}' font-size='10' fill='{color}'>"
            f"{escape(label)}</text>"
        )
    parts.append("</svg>")
    legend = "".join(f"<span><i style='background:{c}'></i>{k}</span>" for k, c in KIND_COLORS.items())
    legend += "<span><i style='background:#c0392b'></i>come-backs (pause before the group returned)</span>"
    legend += "<span>solid line: a policy's retention; dashed: a what-if candidate</span>"
    unknown_note = (
        f"<p class='note'>Empty without a known time (dated now, as `plan` does): "
        f"{', '.join(f'{k} {v:,}' for k, v in sorted(unknown.items()))}.</p>"
        if unknown
        else ""
    )
    return "".join(parts) + f"<div class=legend>{legend}</div>" + unknown_note


# ---------------------------------------------------------------------------------------------
# What-if curves
# ---------------------------------------------------------------------------------------------


def _what_if_curves(audits: Sequence[ClusterAudit]) -> str:
    series: dict[tuple[str, str], dict[timedelta, list[int]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0])
    )
    for audit in audits:
        for r in audit.what_if:
            cell = series[(str(r.policy), r.rule.value)][r.retention]
            cell[0] += r.groups
            cell[1] += r.offsets + r.offsets_in_groups
            cell[2] += r.comeback_groups
    if not series:
        return "<p class='note'>nothing: no candidate retentions were asked for (--what-if).</p>"
    out = []
    for (policy, rule), points in series.items():
        retentions = sorted(points)
        out.append(_curve(f"{policy} · {rule}", retentions, points))
    return "".join(out)


def _curve(title: str, retentions: list[timedelta], points: dict[timedelta, list[int]]) -> str:
    width, height, left, top = 560, 220, 60, 30
    xs = [max(r.total_seconds(), 1.0) for r in retentions]
    lo, hi = math.log(min(xs)), math.log(max(xs))
    span = (hi - lo) or 1.0

    def x(seconds: float) -> float:
        return left + (width - left - 20) * ((math.log(seconds) - lo) / span if hi > lo else 0.5)

    names = ("groups removed", "offsets removed", "come-back groups at risk")
    colors = ("#4a7bb7", "#5aa469", "#c0392b")
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 40}' role='img'>",
        f"<title>What-if: {escape(title)}</title>",
        f"<text x='0' y='14' font-size='13' font-weight='bold'>{escape(title)}</text>",
        f"<line x1='{left}' x2='{width - 20}' y1='{top + height - 30}' y2='{top + height - 30}' "
        "stroke='#333'/>",
    ]
    for index in range(3):
        values = [points[r][index] for r in retentions]
        peak = max(values) or 1
        coords = [(x(s), top + (height - 40) * (1 - v / peak)) for s, v in zip(xs, values, strict=True)]
        parts.append(
            f"<polyline fill='none' stroke='{colors[index]}' stroke-width='2' "
            f"points='{' '.join(f'{cx:.1f},{cy:.1f}' for cx, cy in coords)}'/>"
        )
        for (cx, cy), v, r in zip(coords, values, retentions, strict=True):
            parts.append(
                f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='3.5' fill='{colors[index]}'>"
                f"<title>{escape(format_duration(r))}: {v:,} {names[index]}</title></circle>"
            )
    for s, r in zip(xs, retentions, strict=True):
        parts.append(
            f"<text x='{x(s):.1f}' y='{top + height - 14}' font-size='11' text-anchor='middle'>"
            f"{escape(format_duration(r))}</text>"
        )
    legend_y = top + height + 4
    for index, name in enumerate(names):
        parts.append(
            f"<text x='{left + index * 170}' y='{legend_y}' font-size='11' "
            f"fill='{colors[index]}'>■ {name}</text>"
        )
    parts.append("</svg>")
    table_rows = [[format_duration(r), *points[r]] for r in retentions]
    return (
        "<div style='display:inline-block;vertical-align:top;margin-right:1em'>"
        + "".join(parts)
        + _table(["retention", *names], table_rows, frozenset({1, 2, 3}))
        + "</div>"
    )


# ---------------------------------------------------------------------------------------------
# Per cluster
# ---------------------------------------------------------------------------------------------


def _plan_section(plan: Plan) -> str:
    s = plan.summary
    breaker = (
        " <span class=trip>blast radius exceeded: nothing would be deleted</span>"
        if s.blast_radius_exceeded
        else ""
    )
    head = (
        f"<h4>{escape(str(plan.policy))} ({plan.mode.value}{', suspended' if plan.suspended else ''})</h4>"
        f"<p>{s.groups_matched:,} of {s.groups_total:,} groups selected; "
        f"eligible {s.groups_eligible:,} groups and "
        f"{s.offsets_eligible:,} offsets; planned {s.groups_planned:,} groups and "
        f"{s.offsets_planned:,} offsets; "
        f"{s.skipped:,} skipped.{breaker}</p>"
    )
    if not plan.actions:
        return head + "<p class='note'>Planned actions: nothing.</p>"
    rules = Counter(a.rule.value for a in plan.actions)
    rows = [
        [a.kind.value, a.group_id, a.group_kind.value, format_age(a.age), a.timestamp_source.value, a.reason]
        for a in sorted(plan.actions, key=lambda a: a.age, reverse=True)
    ]
    return (
        head
        + "<p>Per rule: "
        + ", ".join(f"{escape(rule)} {count:,}" for rule, count in sorted(rules.items()))
        + "</p>"
        + _table(["action", "group", "kind", "age", "source", "why"], rows)
        + "".join(f"<p class='note'>Warning: {escape(w)}</p>" for w in plan.warnings)
    )


def _cluster_section(audit: ClusterAudit) -> str:
    reach = audit.reach
    since = "nothing" if reach.earliest_ms is None else _ms(reach.earliest_ms)
    until = "-" if reach.latest_ms is None else _ms(reach.latest_ms)
    actions = sum(len(p.actions) for p in audit.plans)
    tripped = any(p.summary.blast_radius_exceeded for p in audit.plans)
    reclaimed = reclaimed_offsets_by_topic(audit).most_common(20)
    what_if_rows = [
        [
            str(r.policy),
            r.rule.value,
            format_duration(r.retention),
            r.groups,
            ", ".join(f"{kind} {count:,}" for kind, count in r.groups_by_kind.items()) or "-",
            r.offsets,
            r.offsets_in_groups,
            r.comeback_groups,
        ]
        for r in audit.what_if
    ]
    summary = (
        f"{escape(audit.source.name)} <small>({escape(audit.source.cluster_id)})</small>: "
        f"{reach.records:,} records, {sum(audit.groups_by_kind.values()):,} groups, "
        f"{actions:,} planned actions" + (" <span class=trip>blast radius tripped</span>" if tripped else "")
    )
    return (
        f"<details class=cluster><summary>{summary}</summary>"
        f"<p>{reach.records:,} records in {reach.partitions} partitions of __consumer_offsets "
        f"({reach.tombstones:,} tombstones, {reach.corrupt:,} corrupt, {reach.unknown:,} of unknown type or "
        f"version); {audit.offset_count:,} live offsets; "
        f"{audit.comeback_count:,} come-backs in the history.</p>"
        f"<p><b>How far back the log reaches:</b> from {since} to {until}. The topic is compacted: "
        "older history (superseded commits and group records, tombstones after delete.retention.ms) is "
        "gone, so come-backs before that time cannot be seen.</p>"
        + "".join(_plan_section(plan) for plan in audit.plans)
        + "<h4>Reclaimed offsets per topic (top 20)</h4>"
        + _table(["topic", "offsets removed"], [list(item) for item in reclaimed], frozenset({1}))
        + "<h4>Retention what-if</h4>"
        + _table(
            [
                "policy",
                "rule",
                "retention",
                "groups",
                "groups by type",
                "offsets",
                "offsets in those groups",
                "come-back groups",
            ],
            what_if_rows,
            frozenset({3, 5, 6, 7}),
            empty="nothing (no --what-if candidates)",
        )
        + "</details>"
    )


def _ms(ms: int) -> str:
    from groupwarden.offsets_log.views import log_time

    return to_rfc3339(log_time(ms).at)


def _marks(summary: dict[str, Any], audits: Sequence[ClusterAudit]) -> list[tuple[str, timedelta, bool]]:
    marks: list[tuple[str, timedelta, bool]] = []
    for policy in summary.get("policies", []):
        for rule, seconds in policy.get("rules", {}).items():
            marks.append(
                (
                    f"{policy['policy']} {rule} {format_duration(timedelta(seconds=seconds))}",
                    timedelta(seconds=seconds),
                    True,
                )
            )
    candidates = sorted({r.retention for a in audits for r in a.what_if})
    marks += [(f"what-if {format_duration(r)}", r, False) for r in candidates]
    return marks


def _bucket_of(seconds: float) -> int:
    for index, (_, upper) in enumerate(IDLE_EDGES):
        if upper is not None and seconds < upper:
            return index
    return len(IDLE_EDGES) - 1


def _newer_kinds_note(audits: Sequence[ClusterAudit]) -> str:
    notes = []
    if any(audit.groups_by_kind.get("share") for audit in audits):
        read = all(audit.source.share_starts is not None for audit in audits)
        notes.append(SHARE_STATE_READ_NOTE if read else SHARE_STATE_MISSING_NOTE)
    if any(audit.groups_by_kind.get("streams") for audit in audits):
        notes.append(STREAMS_NOTE)
    return "".join(f"<p class='note'>{escape(note)}</p>" for note in notes)


def histograms_from_answers(audits: Sequence[ClusterAudit], now: datetime) -> dict[str, Any]:
    """The idle-age histogram from groups held in memory (what the audit's tasks count per unit,
    `fleet.partition_audit`), for audits whose `answers` hold every group."""
    now_ms = now.timestamp() * 1000
    idle: Counter[tuple[str, str, int]] = Counter()
    backs: Counter[tuple[str, str, int]] = Counter()
    for audit in audits:
        for view, offsets in audit.answers:
            kind = view.kind.value
            if kind == "simple":
                commits = [o.commit_time_ms for o in offsets.values() if o.commit_time_ms is not None]
                since = max(commits) if commits else None
            elif kind in ("classic", "consumer", "share", "streams") and view.member_count == 0:
                since = view.empty_since_ms
            else:
                continue
            bucket = -1 if since is None else _bucket_of((now_ms - since) / 1000)
            idle[(audit.source.name, kind, bucket)] += 1
        for c in audit.comebacks:
            backs[(audit.source.name, c.kind.value, _bucket_of(c.pause.total_seconds()))] += 1
    return {
        "edges": [label for label, _ in IDLE_EDGES],
        "idle": [{"cluster": c, "kind": k, "bucket": b, "count": n} for (c, k, b), n in idle.items()],
        "comebacks": [{"cluster": c, "kind": k, "bucket": b, "count": n} for (c, k, b), n in backs.items()],
    }


def render_report(
    audits: Sequence[ClusterAudit],
    summary: dict[str, Any],
    now: datetime | None = None,
    histograms: dict[str, Any] | None = None,
) -> str:
    engine = summary.get("engine", {})
    policies = list(dict.fromkeys(str(p.policy) for a in audits for p in a.plans))
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset='utf-8'><title>groupwarden fleet audit</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>groupwarden fleet audit</h1><p>Generated at {escape(str(summary.get('generatedAt')))} "
        f"on {escape(str(engine.get('master', '')))}; {len(audits)} cluster(s), {len(policies)} policies. "
        "Nothing was deleted: this is what the policies would do.</p>"
        "<h2>Fleet overview</h2>"
        + _overview(audits, policies)
        + "<h2>How long have Empty groups been idle?</h2>"
        + "<p class='note'>Time since Empty (classic, KIP-848, share, streams) or since the last commit "
        "(simple groups), at the audit's time, over every group of the fleet; below the axis, the pauses "
        "after which groups came back (a retention shorter than such a pause would have removed their "
        "offsets).</p>"
        + _newer_kinds_note(audits)
        + _idle_histogram(histograms, _marks(summary, audits))
        + "<h2>What would each retention remove?</h2>"
        + _what_if_curves(audits)
        + "<h2>Per cluster</h2><p><button id=expand type=button>expand all clusters</button></p>"
        + "".join(_cluster_section(audit) for audit in audits)
        + f"<script>{_SCRIPT}</script></body></html>\n"
    )

"""The stage's audit per unit, in one process (docs/benchmarks.md, "In-process benches").

`partition_audit.audit_unit(keep_history=True)` over the first `--units` units of a cached
synthetic export (bench/bench_spark.py's cache: one Parquet file per partition), the collector off
as in the tasks; prints the best CPU time of `--runs` runs, per 1M records and per unit.

`--before PATH` also measures an older `partition_audit.py` (e.g. another worktree's), loaded
beside this one, with the codec's fast readers switched off (each returns None, so the
`Reader`-based readers answer) and `ReplayWithHistory._observe` as it was before `membership()`:
the code before issue 20's fifth session. Every unit's output is asserted equal first; runs
alternate. `--profile` prints a cProfile of one run instead.

    PYTHONPATH=operator:tests:. .venv/bin/python -m bench.bench_stage_unit \\
        [--input DIR] [--units 50] [--runs 5] [--before ../main/operator/groupwarden/fleet/partition_audit.py]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.bench_spark import CACHE
from groupwarden.fleet.partition_audit import audit_unit
from groupwarden.fleet.schema import RAW_SCHEMA
from groupwarden.offsets_log import codec
from groupwarden.offsets_log.history import Comeback, ReplayWithHistory

FAST_READERS = ("read_group_metadata_fast", "_key_strings_fast", "_subscription_topics_fast")


def _observe_with_views(self: ReplayWithHistory, group: str, timestamp_ms: int) -> None:
    """`ReplayWithHistory._observe` before this session: a `LedgerGroup` view per record."""
    view = self.ledger.group(group)
    if view is None:
        self._empty_since.pop(group, None)
        return
    if view.member_count == 0:
        if view.empty_since_ms is not None:
            self._empty_since[group] = view.empty_since_ms
        return
    since = self._empty_since.pop(group, None)
    if since is not None and timestamp_ms > since:
        self.comebacks.append(Comeback(group, view.kind, since, timestamp_ms))


def _no_fast_path(*_args: object) -> None:
    return None


class Code:
    """One version of the stage's audit: `use()` installs its codec readers and `_observe`."""

    def __init__(self, audit: Callable[..., pa.Table], before: bool) -> None:
        self.audit = audit
        self.before = before
        self._fast = {name: getattr(codec, name) for name in FAST_READERS}
        self._observe = ReplayWithHistory._observe

    def use(self) -> Callable[..., pa.Table]:
        for name, reader in self._fast.items():
            setattr(codec, name, _no_fast_path if self.before else reader)
        ReplayWithHistory._observe = _observe_with_views if self.before else self._observe  # type: ignore[method-assign]
        return self.audit


def _load_before(path: Path) -> Callable[..., pa.Table]:
    spec = importlib.util.spec_from_file_location("partition_audit_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Callable[..., pa.Table] = module.audit_unit
    return found


def _run(audit: Callable[..., pa.Table], tables: list[pa.Table]) -> list[pa.Table]:
    return [audit(table, keep_history=True) for table in tables]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=CACHE / "r1000000-g20000-s7")
    parser.add_argument("--units", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an older partition_audit.py to compare with")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    files = sorted(args.input.glob("partition-*.parquet"))[: args.units]
    tables = [pq.read_table(path, schema=RAW_SCHEMA) for path in files]
    records = sum(t.num_rows for t in tables)
    codes = {"after": Code(audit_unit, before=False)}
    if args.before is not None:
        codes = {"before": Code(_load_before(args.before), before=True), **codes}
    gc.disable()  # as in the tasks (pipeline._audit_tables)
    if args.profile:
        audit = codes["after"].use()
        _run(audit, tables)
        profile = cProfile.Profile()
        profile.enable()
        _run(audit, tables)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
        return
    outputs: dict[str, Any] = {name: _run(code.use(), tables) for name, code in codes.items()}
    if "before" in outputs:
        pairs = zip(outputs["before"], outputs["after"], strict=True)
        assert all(a.equals(b) for a, b in pairs), "the outputs differ"
    del outputs
    best = dict.fromkeys(codes, float("inf"))
    for _ in range(args.runs):
        for name, code in codes.items():
            audit = code.use()
            started = time.process_time()
            _run(audit, tables)
            best[name] = min(best[name], time.process_time() - started)
    for name, seconds in best.items():
        per_million = seconds / records * 1e6
        per_unit_ms = seconds / len(tables) * 1e3
        print(
            f"{name:6}: {len(tables)} units, {records:,} records: best of {args.runs} {seconds:.3f} CPU-s"
            f" = {per_million:.3f} CPU-s per 1M records, {per_unit_ms:.1f} ms per unit"
        )
    if "before" in best:
        print(f"cut: {1 - best['after'] / best['before']:.1%}")


if __name__ == "__main__":
    main()

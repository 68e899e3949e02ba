"""The harness shared by `fuzz_codec.py` and `fuzz_policy.py`: run one input under bounds, count outcomes.

Each input runs under a wall-clock alarm (SIGALRM: a hang is interrupted and counted, never waited
out) and under tracemalloc (the peak while it runs, above what was allocated before it).
An exception that is not one of the target's typed errors is a crash; its input is saved (`--out`)
so it can be replayed. Deterministic for a seed.
"""

from __future__ import annotations

import contextlib
import gc
import json
import signal
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

CRASH = "crash"
HANG = "hang"
MEMORY = "memory"
FINDINGS = (CRASH, HANG, MEMORY)


class InputTimeout(BaseException):
    """Raised by the alarm inside a hung input (BaseException: no `except Exception` swallows it)."""


_BUCKETS = ((4 << 10, "<4KiB"), (64 << 10, "<64KiB"), (1 << 20, "<1MiB"))


def _bucket(peak: int) -> str:
    return next((name for limit, name in _BUCKETS if peak < limit), ">=1MiB")


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise InputTimeout


@dataclass
class _Measured:
    elapsed: float = 0.0
    peak: int = 0  # bytes above what was allocated before


@contextmanager
def _bounded(time_limit_s: float) -> Iterator[_Measured]:
    """The block under the wall-clock alarm, and its time and tracemalloc peak. (Starting and
    stopping tracemalloc around each input is faster, but CPython then leaks ~1 KiB per cycle:
    1 GB per 1M inputs; so the peak is reset instead.)"""
    measured = _Measured()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, time_limit_s)
    try:
        yield measured
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        measured.elapsed = time.perf_counter() - started
        measured.peak = tracemalloc.get_traced_memory()[1] - before


@dataclass
class Finding:
    kind: str  # crash / hang / memory
    detail: str  # exception type and message, or the measured time / peak
    input_repr: str
    trace: str = ""


@dataclass
class Campaign:
    """Outcome counts and bounds of one fuzzing campaign."""

    time_limit_s: float
    memory_limit_bytes: int
    out: Path | None = None
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    inputs: int = 0
    max_time_s: float = 0.0
    max_peak_bytes: int = 0
    max_peak_input_len: int = 0
    max_peak_input: str = ""
    peak_by_outcome: dict[str, int] = field(default_factory=dict)
    peak_buckets: Counter[str] = field(default_factory=Counter)
    slow_inputs: int = 0  # over a tenth of the time limit (reported, not a finding)
    unconfirmed_peaks: int = 0  # over the memory limit once, under it on replay (not the input's)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        signal.signal(signal.SIGALRM, _alarm)
        if not tracemalloc.is_tracing():
            tracemalloc.start()

    def run(
        self, target: Callable[..., str], *args: Any, size: int | Callable[[], int], show: Callable[[], str]
    ) -> str:
        """Run `target(*args)`; returns its outcome name or a finding kind (crash/hang/memory).

        `size` (of the input, for the report) may be a callable: it is only evaluated when needed.
        """
        self.inputs += 1
        outcome: str
        with _bounded(self.time_limit_s) as measured:
            try:
                outcome = target(*args)
            except InputTimeout:
                outcome = HANG
                self._record(HANG, f"over {self.time_limit_s}s", show())
            except Exception as error:  # the finding this harness exists for
                outcome = f"{CRASH}:{type(error).__name__}"
                self._record(CRASH, f"{type(error).__name__}: {error}"[:500], show(), traceback.format_exc())
        elapsed, peak = measured.elapsed, measured.peak
        self.max_time_s = max(self.max_time_s, elapsed)
        if elapsed > self.time_limit_s / 10:
            self.slow_inputs += 1
        if peak > self.memory_limit_bytes and outcome != HANG:
            replayed = self._replay_peak(target, args)
            if replayed > self.memory_limit_bytes:
                length = size if isinstance(size, int) else size()
                detail = f"peak {peak} bytes (replayed: {replayed}) for an input of {length} bytes"
                self._record(MEMORY, detail, show())
                outcome = MEMORY
            else:  # not the input's: counted, reported, not a finding
                self.unconfirmed_peaks += 1
                peak = replayed
        if peak > self.max_peak_bytes:
            self.max_peak_bytes, self.max_peak_input_len = peak, size if isinstance(size, int) else size()
            self.max_peak_input = show()[:300]
        self.outcomes[outcome] += 1
        self.peak_by_outcome[outcome] = max(peak, self.peak_by_outcome.get(outcome, 0))
        self.peak_buckets[_bucket(peak)] += 1
        return outcome

    def _replay_peak(self, target: Callable[..., str], args: tuple[Any, ...]) -> int:
        """The peak of the same input run again, after a full garbage collection.

        tracemalloc counts every allocation of the process: another thread's (a test process hosts
        the threads of earlier tests' clients), a finalizer run by a collection that happened to fall
        inside the input, a one-off cache. An allocation the input causes happens again on replay.
        """
        gc.collect()
        # Its outcome was counted by the first run; only the peak is wanted here.
        with _bounded(self.time_limit_s) as measured, contextlib.suppress(InputTimeout, Exception):
            target(*args)
        return measured.peak

    def _record(self, kind: str, detail: str, shown: str, trace: str = "") -> None:
        if len(self.findings) < 200:
            self.findings.append(Finding(kind, detail, shown, trace))

    @property
    def finding_count(self) -> int:
        return sum(n for name, n in self.outcomes.items() if name.split(":")[0] in FINDINGS)

    def report(self, title: str) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.started
        summary = {
            "campaign": title,
            "inputs": self.inputs,
            "seconds": round(elapsed, 1),
            "inputs_per_s": round(self.inputs / elapsed) if elapsed else 0,
            "findings": self.finding_count,
            "outcomes": dict(sorted(self.outcomes.items(), key=lambda kv: (-kv[1], kv[0]))),
            "max_input_time_ms": round(self.max_time_s * 1000, 2),
            "slow_inputs": self.slow_inputs,
            "time_limit_s": self.time_limit_s,
            "max_peak_bytes": self.max_peak_bytes,
            "max_peak_input_len": self.max_peak_input_len,
            "max_peak_input": self.max_peak_input,
            "peak_by_outcome": dict(sorted(self.peak_by_outcome.items())),
            "peak_buckets": {
                name: self.peak_buckets[name] for _, name in _BUCKETS if name in self.peak_buckets
            }
            | ({">=1MiB": self.peak_buckets[">=1MiB"]} if ">=1MiB" in self.peak_buckets else {}),
            "memory_limit_bytes": self.memory_limit_bytes,
            "unconfirmed_peaks": self.unconfirmed_peaks,
        }
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            with (self.out / "findings.jsonl").open("w") as sink:
                for finding in self.findings:
                    sink.write(json.dumps(finding.__dict__) + "\n")
        return summary


def print_report(summary: dict[str, Any], findings: list[Finding]) -> None:
    print(
        f"{summary['campaign']}: {summary['inputs']:,} inputs in {summary['seconds']}s "
        f"({summary['inputs_per_s']:,}/s); findings (crash/hang/memory): {summary['findings']}"
    )
    for name, count in summary["outcomes"].items():
        print(f"  {count:>10,}  {name}  (max peak {summary['peak_by_outcome'][name]:,} B)")
    print(f"  peak traced memory per input: {summary['peak_buckets']}")
    print(
        f"  slowest input {summary['max_input_time_ms']} ms (limit {summary['time_limit_s']} s; "
        f"{summary['slow_inputs']} over a tenth of it); peak traced memory of one input "
        f"{summary['max_peak_bytes']:,} bytes (input of {summary['max_peak_input_len']:,} bytes; "
        f"limit {summary['memory_limit_bytes']:,})\n  largest-peak input: {summary['max_peak_input']}"
    )
    for finding in findings[:10]:
        print(f"  FINDING {finding.kind}: {finding.detail}\n    input: {finding.input_repr[:300]}")
        if finding.trace:
            print("    " + finding.trace.strip().replace("\n", "\n    ")[-1500:])

"""The fuzzing harness (bench/fuzzlib.py) counts the memory an input causes, not the process's.

tracemalloc sees every allocation of the process. In `make test` the campaign runs in a process
that earlier tests left threads in; one of them allocating during an input was reported as a memory
finding for an 85-byte record (CI, 2026-11-25). A finding is now confirmed by replaying the input.
"""

from __future__ import annotations

import threading

import pytest

from bench import fuzzlib

pytestmark = pytest.mark.unit

LIMIT = 1 << 20


def campaign() -> object:
    return fuzzlib.Campaign(time_limit_s=2.0, memory_limit_bytes=LIMIT)


def test_an_input_that_allocates_over_the_limit_every_time_is_a_finding() -> None:
    run = campaign()
    outcome = run.run(lambda: bytes(3 * LIMIT) and "decoded", size=10, show=lambda: "input")
    assert outcome == fuzzlib.MEMORY
    assert run.finding_count == 1 and "replayed" in run.findings[0].detail
    assert run.max_peak_bytes > 3 * LIMIT


def test_another_threads_allocation_during_an_input_is_not_the_inputs() -> None:
    started, release = threading.Event(), threading.Event()
    held: list[bytes] = []

    def other_thread() -> None:
        started.wait()
        held.append(bytes(4 * LIMIT))  # while the input runs
        release.set()

    def target() -> str:
        started.set()
        release.wait(5)
        return "decoded"

    thread = threading.Thread(target=other_thread)
    thread.start()
    run = campaign()
    outcome = run.run(target, size=85, show=lambda: "input")
    thread.join()
    assert held, "the other thread allocated"
    assert outcome == "decoded" and run.finding_count == 0
    assert run.unconfirmed_peaks == 1 and run.max_peak_bytes < LIMIT
    assert run.report("harness")["unconfirmed_peaks"] == 1


def test_a_small_input_is_measured_once() -> None:
    calls: list[int] = []
    run = campaign()
    run.run(lambda: calls.append(1) or "decoded", size=1, show=lambda: "input")
    assert calls == [1] and run.unconfirmed_peaks == 0

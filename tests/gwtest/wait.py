"""Wait-for-condition helpers: tests poll with a deadline instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Calls `condition` until it returns a truthy value and returns that value."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = condition()
            if result:
                return result
        except Exception as exc:  # the condition may fail while a system is still converging
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)

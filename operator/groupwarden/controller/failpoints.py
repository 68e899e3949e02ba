"""A failpoint for end-to-end tests of races and crashes (off unless $GROUPWARDEN_FAILPOINT_DIR is set).

Races such as "a consumer rejoins between the plan and the delete" or "the operator dies between
two deletion steps" cannot be timed reliably from outside. With the variable set, before every
deletion step's request (after the step's re-check, cleanup/recheck.py: what it holds is what
will be requested, so a consumer that comes back during the hold meets the broker's own refusal)
the operator checks `<dir>/hold`:
- absent: go on;
- holding a number N > 0: go on and write N-1 (let N more steps through);
- otherwise: write `<dir>/held` (naming the step) and wait while `hold` exists, then go on.
`<dir>/hold-request` does the same right before each deletion request, after its intents are
written and its last read (cleanup/steps.py, REQUEST_SITE): a fault placed during that hold hits
the deletion request itself, not a read before it.
While `<dir>/raise` exists, every deletion step raises `FailpointError` instead: a stand-in for a
bug of ours, which must surface as `InternalError` and never end the policy's worker.
Like etcd's gofail, it is inert in production: nothing happens without the variable.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from groupwarden.cleanup.steps import REQUEST_SITE

log = logging.getLogger(__name__)

ENV = "GROUPWARDEN_FAILPOINT_DIR"
MAX_HOLD_SECONDS = 300.0


class FailpointError(RuntimeError):
    """Raised on purpose by the failpoint (`<dir>/raise`)."""


class StepHold:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, step: str) -> None:
        at_request = step.startswith(REQUEST_SITE)
        if not at_request and (self.directory / "raise").exists():
            raise FailpointError(f"failpoint: raising before deletion step {step}")
        hold = self.directory / ("hold-request" if at_request else "hold")
        held = self.directory / "held"
        if not hold.exists():
            return
        text = hold.read_text().strip()
        if text.isdigit() and int(text) > 0:
            hold.write_text(str(int(text) - 1))
            return
        log.warning("failpoint: holding before deletion step %s", step)
        held.write_text(step)
        deadline = time.monotonic() + MAX_HOLD_SECONDS
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        held.unlink(missing_ok=True)


def from_environment() -> StepHold | None:
    directory = os.environ.get(ENV)
    return StepHold(Path(directory)) if directory else None

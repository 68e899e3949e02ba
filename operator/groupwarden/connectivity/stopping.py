"""The process is stopping (`groupwarden run` got SIGTERM): one process-wide flag that every Kafka
retry loop and wait of the adapters looks at.

Once it is set, the one retry policy (`retry.RetryDeadline.next_delay`) gives no further try, so
every retried read (ListGroups, a describe, a watermark query, an audit record's acknowledgement)
ends with its last error at once instead of at `default.api.timeout.ms`, and no request that was
not sent yet is sent (the admin session refuses new calls and the rest of a destructive call's
waves; the run guard refuses the next deletion step). A request already sent completes, or its
answer is lost and its outcome `Unknown`, as in an outage. `groupwarden run` then waits a bounded
time for what is in flight before it releases the Lease (docs/operator.md, "High availability").

Only `groupwarden run` sets it, once, when it stops; the CLI's one-shot commands never do.
"""

from __future__ import annotations

import threading

_STOPPING = threading.Event()


def request_stop() -> None:
    """From now on every retry loop and wait gives up and nothing new is sent (until `reset`)."""
    _STOPPING.set()


def stopping() -> bool:
    return _STOPPING.is_set()


def pause(seconds: float) -> bool:
    """Sleep `seconds`, or less when the process starts stopping meanwhile: True when the whole
    pause passed, False when the process is stopping (give up)."""
    return not _STOPPING.wait(max(0.0, seconds))


def reset() -> None:
    """The flag as in a fresh process: `groupwarden run` starting the operator again in-process
    (after a missing grant), and tests."""
    _STOPPING.clear()

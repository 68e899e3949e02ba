"""What the orchestration needs from Kubernetes, as protocols (adapters/kubernetes_*.py implement
them; unit tests use in-memory fakes). All methods block: callers run them in a thread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from groupwarden.core.policy import PolicyRef


class StatusWriter(Protocol):
    def patch_status(self, ref: PolicyRef, status: Mapping[str, Any]) -> bool:
        """Merge-patches the status subresource; False when the policy no longer exists."""
        ...

    def exists(self, ref: PolicyRef, uid: str) -> bool:
        """Whether this very object (same uid) still exists and is not being deleted. Raises
        when that cannot be known (then nothing is deleted)."""
        ...


class EventPoster(Protocol):
    def post(self, ref: PolicyRef, uid: str, event_type: str, reason: str, message: str) -> None:
        """Records an Event on the policy. Failures are logged, never raised (events are best effort)."""
        ...

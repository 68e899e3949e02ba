"""Exceptions the adapters add to the port's (pure: the in-memory fake raises them too)."""

from __future__ import annotations

from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogGap

__all__ = ["KafkaAuthenticationFailed", "OffsetsLogGap"]


class KafkaAuthenticationFailed(KafkaUnavailable):
    """SASL authentication or the TLS handshake failed: a configuration problem, not transient.

    A subclass of `KafkaUnavailable` so callers that only know the port still treat it as "the
    cluster could not be used"; the message names the mechanism and the user, never a secret."""

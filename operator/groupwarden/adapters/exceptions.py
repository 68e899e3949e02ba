"""Moved to `groupwarden.cleanup.gateway` (next to the port's other exceptions). This re-export
stays only until the last importer in controller/ switches to the new module."""

from groupwarden.cleanup.gateway import KafkaAuthenticationFailed, OffsetsLogGap

__all__ = ["KafkaAuthenticationFailed", "OffsetsLogGap"]

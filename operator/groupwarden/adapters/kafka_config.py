"""Moved to `groupwarden.cleanup.connection` (pure: no client library). This re-export stays only
until the last importers in controller/ switch to the new module."""

from groupwarden.cleanup.connection import ConnectionSettings, Secret, settings_from_properties

__all__ = ["ConnectionSettings", "Secret", "settings_from_properties"]

"""Test support shared by the integration and e2e tiers (not a test module)."""

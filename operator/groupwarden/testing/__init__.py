"""Test doubles and data generators shipped with the package (unit tests, benchmarks, the fleet
audit's synthetic data): never used by the operator or the CLI at run time."""

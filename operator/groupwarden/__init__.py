"""groupwarden: declarative, broker-semantics-aware cleanup of Kafka consumer groups."""

# The one source of the version: pyproject.toml reads it (setuptools dynamic version), `make release`
# passes it to the chart (version/appVersion) and the image (OCI label), and
# tests/unit/test_release_version.py fails when Chart.yaml disagrees. Bump it with
# `scripts/release.sh bump X.Y.Z` (docs/deploy.md, "Releasing").
__version__ = "0.1.0"

"""What several commands read the same way: policy files (`-f`) and `--now`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from groupwarden.core.crd import DEPRECATED_API_VERSION, DEPRECATION_WARNING, KIND
from groupwarden.core.policy import ConsumerGroupPolicy, PolicyError, load_policy_file
from groupwarden.core.timestamps import require_aware


def load_policies(filenames: Sequence[str | Path]) -> list[ConsumerGroupPolicy]:
    """Every ConsumerGroupPolicy of the `-f` files (a file may hold several YAML documents).
    Raises PolicyError when there is none."""
    policies: list[ConsumerGroupPolicy] = []
    for filename in filenames:
        loaded = load_policy_file(Path(filename))
        # The CLI accepts both versions (same fields) and warns as the API server does.
        deprecated = [str(p.ref) for p in loaded if p.api_version == DEPRECATED_API_VERSION]
        if deprecated:
            print(
                f"Warning: {filename}: {', '.join(deprecated)}: {DEPRECATION_WARNING.format(kind=KIND)}",
                file=sys.stderr,
            )
        policies.extend(loaded)
    if not policies:
        raise PolicyError(["no ConsumerGroupPolicy found in " + ", ".join(map(str, filenames))])
    return policies


def parse_now(text: str | None) -> datetime:
    """`--now` (RFC 3339 with an offset or Z), or the current time."""
    if not text:
        return datetime.now(UTC)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return require_aware(parsed, "--now").astimezone(UTC)

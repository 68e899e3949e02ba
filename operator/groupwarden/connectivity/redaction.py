"""Secrets kept out of every text: a `Secret` wrapper that never prints its value, and `redact`,
which replaces known secret values in a message built from a client's error or log record.

The connection settings hold their secrets as `Secret` (`settings.ConnectionSettings.secrets()`
lists the values); the adapters redact with them what the client libraries say (errors, the admin
client's DEBUG log of its configuration, a token endpoint's answer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

MASK: Final = "***"


class Secret:
    """A secret string: `repr`/`str` never show it; `reveal()` is the only way out."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every non-empty value of `secrets` replaced by `***`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text

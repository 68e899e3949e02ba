"""`KafkaError`: a broker's (or a client's) error for one item, as a value the decisions read.

Defined in the core so that outcomes, skips and snapshot facts can keep it next to the text users
see: whatever decides (an outcome is an authorization failure, a group was refused) reads `name`,
never the rendered string. The adapters make these values (adapters/client_errors.py, where the
whole error tree is drawn); the Kafka gateway port (cleanup/gateway.py) hands them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# The principal lacks an ACL: the same names (and codes) in the Kafka protocol guide, kafka-python's
# `BrokerResponseError.message` and confluent-kafka's `KafkaError.name()`.
AUTHORIZATION_ERRORS: Final = frozenset(
    {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"}
)
AUTHORIZATION_CODES: Final = frozenset({29, 30, 31})


@dataclass(frozen=True)
class KafkaError:
    """A broker error for one item (group or partition), never an exception for the whole run."""

    name: str  # e.g. NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC, GROUP_ID_NOT_FOUND
    code: int = -1
    retriable: bool = False
    message: str = ""
    # The request was sent but no answer came (connection lost, timeout): the broker may have
    # executed it. For a deletion this is an unknown outcome, not a failure (restore must count
    # it as possibly deleted).
    unanswered: bool = False

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message else self.name

    @property
    def is_authorization(self) -> bool:
        """The principal is not authorized (GROUP_/TOPIC_/CLUSTER_AUTHORIZATION_FAILED)."""
        return self.name in AUTHORIZATION_ERRORS or self.code in AUTHORIZATION_CODES

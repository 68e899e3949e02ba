"""The CLI's exit codes (a stable contract: tooling branches on them)."""

OK = 0
PARTIAL_FAILURE = 1  # some items failed, or the cluster could not be reached
BAD_INPUT = 2  # invalid policy, arguments or client properties

"""The CLI's exit codes (a stable contract: tooling branches on them) and the one way a command
reports an error."""

import sys

OK = 0
PARTIAL_FAILURE = 1  # some items failed, or the cluster could not be reached
BAD_INPUT = 2  # invalid policy, arguments or client properties


def fail(message: str, code: int) -> int:
    """Prints `error: <message>` to stderr and returns `code` (the command's exit code)."""
    print(f"error: {message}", file=sys.stderr)
    return code

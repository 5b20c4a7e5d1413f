"""Exit codes of `joinplane`, one per outcome a script may want to branch on (docs/cli.md lists them)."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # admitted, renewed, or the operator command succeeded
    ERROR = 1  # the server refused for another reason, or answered something unexpected
    USAGE = 2  # bad arguments or local state (argparse uses 2 as well)
    PENDING = 3  # the join is waiting for an operator and --wait was not given
    REJECTED = 4  # an operator rejected the join request
    EXPIRED = 5  # the join request expired before it was approved and used
    DENIED = 6  # an attestor denied the join, or the machine has been revoked
    UNREACHABLE = 7  # no HTTP answer at all: refused, DNS, timeout, TLS
    UNAUTHENTICATED = 8  # the join token, machine token or API key is not valid
    TPM_UNAVAILABLE = 9  # --tpm: no tpm2-tools, no TPM at TPM2TOOLS_TCTI, or the TPM failed a step
    TPM_REFUSED = 10  # --tpm: the server did not accept the TPM's credential activation
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class CliError(Exception):
    """A failure to report in one plain sentence (no traceback) and exit with `exit_code`."""

    def __init__(self, message: str, exit_code: Exit = Exit.ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

"""Exit codes and the two kinds of error the CLI turns into one-line messages."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, named once (as httpie does)."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


class MhaError(Exception):
    """An error with a message fit to print as one line, and an exit code."""

    exit_code: ExitCode = ExitCode.FAILURE


class UsageError(MhaError):
    """The user asked for something impossible: fix the command and retry."""

    exit_code = ExitCode.USAGE


class RunError(MhaError):
    """Something failed while running a valid command (a file, a check)."""

    exit_code = ExitCode.FAILURE

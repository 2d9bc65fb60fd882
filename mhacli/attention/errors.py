"""Exit codes, and errors worded in the caller's own terms.

The core names its parameters (``heads=3 does not divide d_model=16``); the
command line words the same error with its options (``--d-model 16 is not
divisible by --heads 3``).  A message marks each parameter as a format field:
``{heads}`` shows the name and its value, ``{heads:name}`` the name alone.
"""

from __future__ import annotations

import string
from enum import IntEnum
from typing import Any, Callable


class ExitCode(IntEnum):
    """Process exit codes, named once (as httpie does)."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    SIGHUP = 129
    INTERRUPTED = 130
    SIGTERM = 143


def python_name(name: str) -> str:
    """How Python code spells a parameter: the keyword itself."""
    return name


def option_name(name: str) -> str:
    """How the command line spells a parameter: ``d_model`` -> ``--d-model``."""
    return "--" + name.replace("_", "-")


class _Wording(string.Formatter):
    """Fills ``{param}`` with ``name=value`` (Python) or ``--name value`` (CLI), ``{param:name}`` with the name."""

    def __init__(self, spell: Callable[[str], str], joiner: str) -> None:
        self.spell, self.joiner = spell, joiner

    def get_value(self, key: int | str, args: Any, kwargs: Any) -> Any:
        return (str(key), kwargs[key])

    def format_field(self, value: Any, format_spec: str) -> str:
        name, raw = value
        if format_spec == "name":
            return self.spell(name)
        if isinstance(raw, bool) and self.joiner == " ":  # a flag: --positions / --no-positions
            flag = self.spell(name)
            return flag if raw else flag.replace("--", "--no-", 1)
        text = shown_value(raw)
        if isinstance(raw, str) and self.joiner == " ":
            text = raw if raw.isidentifier() else text  # --weights designed, as typed
        return f"{self.spell(name)}{self.joiner}{text}"


def shown_value(value: object) -> str:
    """A number as typed, shortened when absurdly long, so a message stays one readable line."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else repr(value)
    if len(text) > 24:
        return f"{text[:12]}…({len(text)} digits)" if isinstance(value, int) else text[:23] + "…"
    return text


class MhaError(Exception):
    """An error with a message fit to print as one line, and an exit code.

    ``params`` are the caller's values the message speaks of; the message holds
    them as ``{name}`` fields so that each caller reads its own spelling.
    """

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, **params: object) -> None:
        self.template = message
        self.params = params
        super().__init__(self.worded(python_name, "="))

    def worded(self, spell: Callable[[str], str] = python_name, joiner: str = "=") -> str:
        """The message with every parameter spelled by ``spell`` (and ``joiner`` before its value)."""
        if not self.params:
            return self.template
        return _Wording(spell, joiner).format(self.template, **self.params)

    def for_cli(self) -> str:
        """The message in the command line's words: ``--heads 3`` instead of ``heads=3``."""
        return self.worded(option_name, " ")


class UsageError(MhaError):
    """The caller asked for something impossible: fix the call and retry."""

    exit_code = ExitCode.USAGE


class RunError(MhaError):
    """Something failed while running a valid request (a file, a check)."""

    exit_code = ExitCode.FAILURE

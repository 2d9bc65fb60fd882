"""Where the command line writes: one console for stdout, one for stderr (as rich-cli does).

Stdout may go away early (``mha explain … | head -1``): the run then carries on
silently, so every file asked for is still written, and exits 0.  ``--quiet``
silences everything but errors and a ``--json`` document.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from rich.console import Console
from rich.text import Text


def silence_stdout() -> None:
    """Point stdout at /dev/null, so later writes and Python's exit-time flush find no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (e.g. under CliRunner)
        pass


class _PipeTolerantConsole(Console):
    """A console that goes quiet, instead of exiting with 1, when the reader of stdout has gone."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence_stdout()


console: Console = _PipeTolerantConsole()
err_console = Console(stderr=True)
_quiet = False


def reset() -> None:
    """Fresh state for one invocation (tests run many in one process)."""
    set_quiet(False)


def set_quiet(quiet: bool) -> None:
    """``--quiet``: nothing on stdout but a --json document, no notes, no spinner; errors still show."""
    global _quiet
    _quiet = quiet
    console.quiet = quiet


def is_quiet() -> bool:
    return _quiet


def print_all(*renderables: Any) -> None:
    for r in renderables:
        console.print(r)


def write_stdout(text: str) -> None:
    """Raw text on stdout (a JSON document, Markdown), even with --quiet; a closed pipe ends it quietly."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        console.quiet = True
        silence_stdout()


def error_line(message: str, hint: str | None = None) -> None:
    """One line on stderr: ``mha: error: …`` (plain text, never markup, never an escape code)."""
    from mhacli.core.messages import one_line

    line = Text("mha: error: ", style="bold red")
    line.append(one_line(message))
    if hint:
        line.append(f" {one_line(hint)}", style="dim")
    err_console.print(line, soft_wrap=True, highlight=False, markup=False)


def notes(notices: list[str]) -> None:
    """Things worth knowing that are not errors (a missing glyph, leftover files): once each, on stderr."""
    if _quiet:
        return
    for notice in notices:
        line = Text("mha: note: ", style="bold yellow")
        line.append(notice)
        err_console.print(line, soft_wrap=True, highlight=False)


def report_written(paths: list[str], to_stderr: bool = False) -> None:
    """The list of files written (on stderr when stdout carries a JSON document)."""
    if not paths or _quiet:
        return
    from mhacli.core.tokenize import printable
    from mhacli.render.terminal import files_written

    # A file name may hold anything, escape sequences included: spell those out.
    # soft_wrap: a long path stays on one line, so it can be copied whole.
    (err_console if to_stderr else console).print(files_written([printable(p) for p in paths]),
                                                  highlight=False, soft_wrap=True)


def spinner(message: str) -> AbstractContextManager[Any]:
    """A Rich status spinner on stderr while something slow runs; nothing when quiet or not a terminal."""
    if _quiet or not err_console.is_terminal:
        return nullcontext()
    return err_console.status(message)


def tolerant_streams() -> None:
    """On a terminal that cannot show some character (PYTHONIOENCODING=ascii, an old console),
    print it as an escape (\\u00e9) instead of failing with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf16", "utf32"):
            try:
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):  # not a TextIOWrapper (e.g. CliRunner)
                pass

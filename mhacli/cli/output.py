"""Where the command line writes: one console for stdout, one for stderr (as rich-cli does). When stdout goes
away early (``| head -1``) the run carries on silently, writes every file asked for and exits 0.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.text import Text

from mhacli.attention.messages import printable


def silence_stdout() -> None:
    """Point stdout at /dev/null, so later writes and Python's exit-time flush find no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (e.g. under CliRunner)
        pass


#: The widths mha lays out for: whole at 40 columns; past 1,000 a line is only padding. LINES likewise.
WIDTHS = (40, 1000)
HEIGHTS = (5, 10_000)


def sane_size(environ: dict[str, str] | None = None) -> None:
    """Clamp COLUMNS and LINES into :data:`WIDTHS` and :data:`HEIGHTS` (Rich and Typer break on 0 or 5,000
    digits); a value that is no count (``abc``, ``-3``) is dropped, so the terminal's size is asked."""
    from mhacli.attention.numbers import whole_number

    env = os.environ if environ is None else environ
    for name, (low, high) in (("COLUMNS", WIDTHS), ("LINES", HEIGHTS)):
        raw = env.get(name)
        if raw is None:
            continue
        digits = raw.strip()
        number = whole_number(digits) if digits.isascii() and digits.isdigit() else None
        if digits.isascii() and digits.isdigit() and number is None:
            number = high  # more digits than any integer: as wide as it gets
        if number is None or number <= 0:
            del env[name]
        elif str(min(max(number, low), high)) != raw:
            env[name] = str(min(max(number, low), high))


class _PipeTolerantConsole(Console):
    """A console that goes quiet, instead of exiting with 1, when the reader of stdout has gone, and that writes no
    trailing spaces to a file or a pipe (Rich pads each table line to the width: 69 of 98 lines of an explain)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence_stdout()

    def _render_buffer(self, buffer: Any) -> str:
        text = super()._render_buffer(buffer)
        if self.is_terminal:  # a terminal shows no trailing space; a file, diff or grep would
            return text
        return "\n".join(line.rstrip(" ") for line in text.split("\n"))


sane_size()  # before the consoles below read COLUMNS
console: Console = _PipeTolerantConsole()
err_console = Console(stderr=True)
_quiet = False


def reset() -> None:
    """Fresh state for one invocation (tests run many in one process)."""
    from mhacli.io.files import reset_replaced

    set_quiet(False)
    reset_replaced()
    sane_size()
    for c in (console, err_console):
        # Rich fixes a console's size when it is made: a long-lived process (tests, a notebook) running several
        # commands gets each one's COLUMNS and LINES.
        c.size = Console(file=c.file, stderr=c.stderr).size


def set_quiet(quiet: bool) -> None:
    """``--quiet``: nothing on stdout but a --json document, no notes, no spinner; errors still show."""
    global _quiet
    _quiet = quiet
    console.quiet = quiet


def print_all(*renderables: Any) -> None:
    for r in renderables:
        console.print(r, crop=not getattr(r, "uncropped", False))  # a command to copy stays one line


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
    from mhacli.attention.messages import one_line
    from mhacli.io.files import LEFT_BEHIND, replaced_sentence

    if message.endswith(LEFT_BEHIND):  # an interrupted run says which earlier files it had replaced already
        message += replaced_sentence()
    line = Text("mha: error: ", style="bold red")
    line.append(one_line(message))
    if hint:
        line.append(f" {one_line(hint)}", style="dim")
    err_console.print(line, soft_wrap=True, highlight=False, markup=False)


def notes(notices: list[str]) -> None:
    """Things worth knowing that are not errors (a missing glyph, leftover files), on stderr, each one printable
    line (a note may quote --out or a token)."""
    from mhacli.attention.messages import one_line

    if _quiet:
        return
    for notice in notices:
        line = Text("mha: note: ", style="bold yellow")
        line.append(one_line(notice))
        err_console.print(line, soft_wrap=True, highlight=False, markup=False)


def report_written(paths: list[str], to_stderr: bool = False) -> None:
    """The list of files written (on stderr when stdout carries a JSON document)."""
    if not paths or _quiet:
        return
    from mhacli.attention.messages import printable
    from mhacli.render.terminal import files_written

    # A file name may hold anything, escape sequences included: spell those out.
    # soft_wrap: a long path stays on one line, so it can be copied whole.
    (err_console if to_stderr else console).print(files_written([printable(p) for p in paths]),
                                                  highlight=False, soft_wrap=True)


_UNSAFE = re.compile(r"[^\x20-\x7e\n]")  # what json.dumps(ensure_ascii=False) may leave raw: DEL and non-ASCII


def _json_escape(found: re.Match[str]) -> str:
    ch = found.group()
    if printable(ch) == ch:
        return ch
    import json  # its ASCII escape, a surrogate pair beyond the BMP; DEL is ASCII, which json leaves raw

    return "\\u007f" if ch == "\x7f" else json.dumps(ch)[1:-1]


def json_text(document: Any, **options: Any) -> str:
    """``document`` as strict JSON (no NaN), every control, bidi or invisible character as its ``\\u`` escape, so
    that a token holding ESC or U+202E cannot act on the terminal (json.dumps escapes only what is below U+0020)."""
    import json

    # allow_nan=False: NaN and Infinity are not JSON; a document holding one is a bug to see, never to print.
    # A stdout that cannot carry UTF-8 (PYTHONIOENCODING=ascii, the C locale) gets every non-ASCII character
    # as its \u escape: the same JSON value, where the stream's error handler would have written "\xe9".
    ascii_only = not speaks_unicode(sys.stdout)
    text = json.dumps(document, ensure_ascii=ascii_only, **{**options, "allow_nan": False})
    return _UNSAFE.sub(_json_escape, text)


def json_document(kind: str, document: dict[str, Any], **options: Any) -> str:
    """A command's ``--json`` document, ``format_version`` first (:mod:`mhacli.io.schemas`); see :func:`json_text`."""
    from mhacli.io.schemas import versioned

    return json_text(versioned(kind, document), **options)


def spinner(message: str) -> AbstractContextManager[Any]:
    """A Rich status spinner on stderr while something slow runs; nothing when quiet or not a terminal."""
    if _quiet or not err_console.is_terminal:
        return nullcontext()
    return err_console.status(message)


@contextmanager
def figure_progress(total: int) -> Iterator[Callable[[Path], None]]:
    """The "drawing figures… 3 of 7 written" spinner (nothing when quiet or not a terminal); yields the callback
    that counts a file written."""
    written: list[Path] = []
    with spinner(f"drawing figures… 0 of {total} written") as status:
        def saved(path: Path) -> None:
            written.append(path)
            if status is not None:
                status.update(f"drawing figures… {len(written)} of {total} written")

        yield saved


def speaks_unicode(stream: object) -> bool:
    """Whether ``stream`` encodes every character (a UTF encoding), not only some (ascii, latin-1, cp1252)."""
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return encoding in ("utf8", "utf16", "utf32")


def tolerant_streams() -> None:
    """On a terminal that cannot show some character (PYTHONIOENCODING=ascii, an old console),
    print it as an escape (\\u00e9) instead of failing with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if not speaks_unicode(stream):
            try:
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):  # not a TextIOWrapper (e.g. CliRunner)
                pass

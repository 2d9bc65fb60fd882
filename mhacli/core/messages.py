"""Plain strings for messages: one line, no control characters, a user's value quoted and shortened.

Every message is flattened to one line with no control characters, so nothing
the user typed can reach the terminal as an escape sequence.  The command
line's own wording of Typer's parse errors lives in :mod:`mhacli.cli.messages`.

Pure Python; imported on every start, so it stays light.
"""

from __future__ import annotations

import unicodedata
from typing import Any

MAX_SHOWN = 40  # characters of a user's value echoed back in a message
MAX_LINE = 2000  # a message longer than this is cut: one line must stay one line


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def one_line(message: str) -> str:
    """``message`` on one line with every control or bidi character escaped (ESC becomes ``\\x1b``)."""
    out = []
    for ch in str(message):
        if ch in "\r\n\t\v\f\u2028\u2029\x85":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") and ch not in "\u200c\u200d":
            out.append(_escape_char(ch))
        else:
            out.append(ch)
    line = " ".join("".join(out).split(" ")).strip()
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 1] + "…"
    return line


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """A value the user typed, quoted, escaped and shortened for echoing in a message."""
    text = one_line(str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return "'" + text.replace("'", "\\'") + "'"


MAX_PATH_SHOWN = 80  # a path is echoed longer than a typed value: its end usually matters


def shown_path(path: Any) -> str:
    """A file or folder name, quoted, escaped and shortened for a message."""
    return shown(str(path), MAX_PATH_SHOWN)

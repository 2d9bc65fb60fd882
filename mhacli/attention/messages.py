"""Plain strings for messages: one line, no control characters, a user's value quoted and shortened,
so nothing the user typed reaches the terminal as an escape sequence. The command line's wording of
Typer's parse errors lives in :mod:`mhacli.cli.messages`. Pure Python and imported on every start: keep it light.
"""

from __future__ import annotations

import unicodedata
from typing import Any

MAX_SHOWN = 40  # characters of a user's value echoed back in a message
MAX_LINE = 2000  # a message longer than this is cut: one line must stay one line


def escaped(ch: str) -> str:
    """One character as a Python escape: ``\\x1b``, ``\\u202e``, ``\\U000e0001``."""
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


_KEEP = frozenset("\u200c\u200d")  # joiners belong to the words and emoji they join


def _keep(ch: str) -> bool:
    if ch in _KEEP or 0xE0020 <= ord(ch) <= 0xE007F:  # tag characters spell emoji flags
        return True
    return unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def printable(text: object) -> str:
    """``text`` with every control, bidi, surrogate or unassigned character spelled out (ESC becomes ``\\x1b``).

    Every string the tool shows that it did not write itself (a path, a token, a value typed) passes through here,
    so nothing can act on the terminal or reorder a line.
    """
    return "".join(ch if _keep(ch) else escaped(ch) for ch in str(text))


def _flat(message: str) -> str:
    """``message`` with line breaks as spaces and the rest as :func:`printable`; nothing stripped."""
    return printable("".join(" " if ch in "\r\n\t\v\f\u2028\u2029\x85" else ch for ch in str(message)))


def one_line(message: str) -> str:
    """``message`` as one printable line: line breaks become spaces, the rest as :func:`printable`."""
    line = _flat(message).strip()
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 1] + "…"
    return line


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """A value the user typed, quoted, escaped and shortened for echoing in a message.

    Spaces around it are kept: ``' grammar'`` is refused as typed, never as a name it does not differ from.
    """
    text = _flat(str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return "'" + text.replace("'", "\\'") + "'"


def literal(text: str) -> str:
    """Text put into a message template that has fields (``{heads:name}``): its braces are text, not fields."""
    return text.replace("{", "{{").replace("}", "}}")


def layers_range(n_layers: int) -> str:
    """How many layers there are and their numbers: from 0, as ``outputs.attentions[0]`` and ``layers.0`` count them,
    in every function, option, message, figure and JSON field."""
    return "1 layer (layer 0)" if n_layers == 1 else f"{n_layers} layers (0–{n_layers - 1})"


def layer_of(layer: int, n_layers: int) -> str:
    """Which layer of several: ``layer 2 of 0–11``."""
    return f"layer {layer} of 0–{n_layers - 1}"


MAX_PATH_SHOWN = 80  # a path is echoed longer than a typed value: its end usually matters


def shown_path(path: Any) -> str:
    """A file or folder name, quoted, escaped and shortened for a message."""
    return shown(str(path), MAX_PATH_SHOWN)

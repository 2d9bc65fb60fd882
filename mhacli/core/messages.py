"""One-line error messages: what went wrong and how to fix it, safe to print anywhere.

:class:`mhacli.cli.app.MhaGroup` sends every failure through here.  Typer's own
parse errors ("Invalid value for '--heads' / '-H': Input should be a valid
integer, unable to parse string as an integer") are rewritten in the tool's
voice ("--heads must be a whole number, got 'abc' (for example --heads 4)."),
and every message is flattened to one line with no control characters, so
nothing the user typed can reach the terminal as an escape sequence.

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


_KEEP = frozenset("\u200c\u200d")  # joiners belong to the words and emoji they join


def _keep(ch: str) -> bool:
    if ch in _KEEP or 0xE0020 <= ord(ch) <= 0xE007F:  # tag characters spell emoji flags
        return True
    return unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def printable(text: object) -> str:
    """``text`` with every control, bidi, surrogate or unassigned character spelled out (ESC becomes ``\\x1b``).

    THE escaping function: every string the tool shows that it did not write
    itself (a path, a token, a value the user typed, a note that quotes one)
    passes through here, so nothing can act on the terminal or reorder a line.
    """
    return "".join(ch if _keep(ch) else _escape_char(ch) for ch in str(text))


def one_line(message: str) -> str:
    """``message`` as one printable line: line breaks become spaces, the rest as :func:`printable`."""
    flat = "".join(" " if ch in "\r\n\t\v\f\u2028\u2029\x85" else ch for ch in str(message))
    line = " ".join(printable(flat).split(" ")).strip()
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


def _option_name(param: Any) -> str:
    """The name a user typed for ``param``: its longest ``--flag``, or its metavar for an argument."""
    if param is None:
        return "value"
    opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or list(getattr(param, "opts", []))
    if getattr(param, "param_type_name", "") == "argument" or not opts:
        return (getattr(param, "human_readable_name", None) or getattr(param, "name", "value") or "value").upper()
    return max(opts, key=len)


def _example(name: str, param: Any) -> str:
    default = getattr(param, "default", None)
    if isinstance(default, int) and not isinstance(default, bool):
        return f" (for example {name} {default})"
    return ""


def _pydantic_error(exc: BaseException) -> dict[str, Any] | None:
    """The first validation error behind a Typer ``BadParameter``, if Pydantic raised it."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        try:
            found = errors()
        except Exception:  # noqa: BLE001 - a foreign object; fall back to Typer's text
            return None
        if found and isinstance(found[0], dict):
            return found[0]
    return None


def bad_parameter(exc: Any) -> str | None:
    """A friendly line for a value Typer could not convert, or None to keep Typer's words."""
    param = getattr(exc, "param", None)
    name = _option_name(param)
    err = _pydantic_error(exc)
    if err is None:
        return None
    kind, ctx, value = err.get("type", ""), err.get("ctx") or {}, err.get("input")
    got = shown(value)
    if kind in ("int_parsing", "int_from_float", "int_type", "int_parsing_size"):
        return f"{name} must be a whole number, got {got}{_example(name, param)}."
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"{name} must be a number, got {got}."
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.values()), "?")
        rule = {"greater_than_equal": "at least", "greater_than": "more than",
                "less_than_equal": "at most", "less_than": "less than"}[kind]
        plain = str(value).strip()
        number = plain if plain.lstrip("-").isdigit() and len(plain) < 25 else shown(value)
        return f"{name} must be {rule} {bound}, got {number}."
    if kind in ("enum", "literal_error"):
        expected = str(ctx.get("expected", "")).replace("'", "")
        expected = expected.replace(" or ", ", ")
        return f"{name} must be one of: {expected}; got {got}."
    if kind == "bool_parsing":
        return f"{name} must be yes or no (true/false), got {got}."
    return None


def _is(exc: Any, name: str) -> bool:
    """Whether ``exc`` is a Click exception of that kind (by name: only mhacli.cli.app imports Typer)."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _find_param(group: Any, argv: list[str], opt: str) -> Any:
    """The parameter declared as ``opt`` on the command named in ``argv`` (or on the group)."""
    commands = getattr(group, "commands", {}) or {}
    candidates = [commands[a] for a in argv if a in commands][:1] + ([group] if group is not None else [])
    for command in candidates:
        for param in getattr(command, "params", []):
            if opt in getattr(param, "opts", []) or opt in getattr(param, "secondary_opts", []):
                return param
    return None


def _meant_as_text(argv: list[str], opt: str) -> str | None:
    """The argument that Click read as the option ``opt`` though it looks like text ("-5 degrees")."""
    for arg in argv:
        if arg.startswith(opt) and (" " in arg or arg[1:2].isdigit() or arg[1:2] == "."):
            return arg
    return None


def click_message(exc: Any, command_path: str | None = None, group: Any = None,
                  argv: list[str] | None = None) -> str:
    """One line, in the tool's voice, for any Click/Typer usage exception."""
    argv = list(argv or [])
    if command_path is None and group is not None:
        named = [a for a in argv if a in (getattr(group, "commands", {}) or {})][:1]
        command_path = " ".join(["mha", *named])
    see = f" (see '{command_path} --help')" if command_path else ""
    if _is(exc, "MissingParameter"):
        name = _option_name(getattr(exc, "param", None))
        if name == "TRACE_FILE":
            return "missing the .npz file to read; give one written by 'mha explain TEXT --save-npz FILE'."
        if name.startswith("--"):
            return f"missing option {name}{see}."
        return f"missing {name}{see}."
    if _is(exc, "BadParameter"):
        friendly = bad_parameter(exc)
        if friendly:
            return friendly
        if getattr(exc, "param", None) is not None:
            detail = one_line(str(getattr(exc, "message", "") or exc)).rstrip(".")
            return f"{_option_name(exc.param)}: {_lower_first(detail)}{see}."
    if _is(exc, "NoSuchOption"):
        opt = str(getattr(exc, "option_name", ""))
        text = _meant_as_text(argv, opt)
        if text is not None:
            # A negative number or a sentence starting with '-': it was meant as the text.
            return (f"{shown(text)} looks like an option; if it is the text, put -- before it: "
                    f"mha explain -- {shown(text, 60)}.")
        if opt.lstrip("-").replace("colour", "color") in ("color", "no-color", "colors", "no-colors"):
            return (f"no such option {shown(opt)}; colour follows the terminal: set NO_COLOR=1 to turn it "
                    "off (it is off anyway when the output goes to a file or a pipe).")
        import difflib

        # Click suggests loosely ('--colour' -> '--out'); keep only close guesses.
        guesses = difflib.get_close_matches(opt, sorted(getattr(exc, "possibilities", None) or []), n=3,
                                            cutoff=0.7)
        guess = f"; did you mean {' or '.join(guesses)}?" if guesses else ""
        return f"no such option {shown(opt)}{guess}{see if not guess else ''}".rstrip("?") + (
            "?" if guess else ".")
    if _is(exc, "BadOptionUsage"):
        opt = str(getattr(exc, "option_name", ""))
        param = _find_param(group, argv, opt)
        message = one_line(exc.format_message())
        if "requires" in message:
            example = _example(opt, param) if param is not None else ""
            return f"{opt} needs a value{example}{see if not example else ''}."
        if "does not take a value" in message:
            other = list(getattr(param, "secondary_opts", []) or [])
            choice = f": use {opt} or {other[0]}" if other else f": write just {opt}"
            return f"{opt} is a switch and takes no value{choice}."
        return f"{_lower_first(message.rstrip('.'))}{see}."
    message = one_line(exc.format_message()).rstrip(".")
    if message.startswith("Got unexpected extra argument"):
        import re

        found = re.search(r"argument\(s\) \((.*)\)$", message)
        extra = found.group(1) if found else message
        ctx = getattr(exc, "ctx", None)
        takes_text = any(getattr(p, "name", "") == "text" for p in getattr(getattr(ctx, "command", None), "params", []))
        if takes_text:
            return (f"unexpected extra text {shown(extra)}: put the whole sentence in quotes, "
                    f"e.g. mha explain \"the cat sat on the mat\".")
        return f"unexpected extra argument {shown(extra)}{see}."
    if message.startswith("No such command"):
        message = message.replace(". Did you mean", "; did you mean")
        return f"{_lower_first(message)} (see 'mha --help' for the commands)."
    return f"{_lower_first(message)}{see}."

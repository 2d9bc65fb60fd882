"""Typer's parse errors in the tool's voice, as one line ("--heads must be a whole number, got 'abc' (for example
--heads 4)."); Click's exceptions are recognised by name, so nothing here imports Typer's private modules.
"""

from __future__ import annotations

from typing import Any

from mhacli.attention.messages import one_line, shown
from mhacli.attention.numbers import too_big, whole_number


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
    if default is None:  # an option that is None unless given: the default its help names
        from mhacli.cli.options import DEFAULT

        shown = getattr(param, "show_default", None)
        default = int(shown) if isinstance(shown, str) and shown.isdigit() else \
            getattr(DEFAULT, getattr(param, "name", None) or "", None)
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
    if type(exc).__name__ == "NotWholeNumber":  # cli.options.whole_option: the one integer rule
        plain = exc.typed.strip()
        if too_big(plain):  # 5,000 digits: the first few and the count
            typed = f"{plain[:12]}…({len(plain.lstrip('+-')):,} digits)"
        else:
            typed = plain if whole_number(plain) is not None else shown(exc.typed)
        return f"{name} must be {exc.message}, got {typed}{_example(name, param) if exc.example else ''}."
    if type(exc).__name__ == "EmptyName":  # cli.options: '' is not the current folder
        what = "a folder's name ('.' for the current folder)" if exc.folder else "a file's name"
        return f"{name} is empty (''); give {what}."
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


def is_click(exc: Any, name: str) -> bool:
    """Whether ``exc`` is a Click exception of that kind (by name: Typer keeps the classes in a private module)."""
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
    if is_click(exc, "MissingParameter"):
        name = _option_name(getattr(exc, "param", None))
        if name == "TRACE_FILE":
            return "missing the .npz file to read; give one written by 'mha explain TEXT --save-npz FILE'."
        if name.startswith("--"):
            return f"missing option {name}{see}."
        return f"missing {name}{see}."
    if is_click(exc, "BadParameter"):
        friendly = bad_parameter(exc)
        if friendly:
            return friendly
        if getattr(exc, "param", None) is not None:
            detail = one_line(str(getattr(exc, "message", "") or exc)).rstrip(".")
            return f"{_option_name(exc.param)}: {_lower_first(detail)}{see}."
    if is_click(exc, "NoSuchOption"):
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
    if is_click(exc, "BadOptionUsage"):
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
        if takes_text:  # the example names the command that was typed: 'mha compare the cat' is shown compare's
            typed = getattr(ctx, "info_name", None) or "explain"
            return (f"unexpected extra text {shown(extra)}: put the whole sentence in quotes, "
                    f"e.g. mha {typed} \"the cat sat on the mat\".")
        return f"unexpected extra argument {shown(extra)}{see}."
    if message.startswith("No such command"):
        message = message.replace(". Did you mean", "; did you mean")
        return f"{_lower_first(message)} (see 'mha --help' for the commands)."
    return f"{_lower_first(message)}{see}."

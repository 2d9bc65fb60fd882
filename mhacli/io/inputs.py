"""Where the text comes from: the argument, ``--file``, standard input or a sample; every way a file can be
wrong becomes one :class:`UsageError` line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import shown_path

# ~180,000 English words: far more than N x N attention fits in memory, yet counted in seconds.
MAX_INPUT_BYTES = 2**20

_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF32_BOMS = (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")


def decode(data: bytes, where: str) -> str:
    """UTF-8 text from bytes (a BOM is dropped; CRLF is fine); refuse binary or other encodings."""
    if data.startswith(_UTF32_BOMS) or data.startswith(_UTF16_BOMS):
        kind = "UTF-32" if data.startswith(_UTF32_BOMS) else "UTF-16"
        raise UsageError(
            f"{where} is {kind}, not UTF-8; save it as UTF-8 "
            f"(e.g. iconv -f {kind} -t UTF-8 FILE > FILE.utf8.txt)."
        )
    _refuse_binary(data, where)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"{where} is not valid UTF-8 (byte 0x{data[exc.start]:02x} on line {line}); save it as UTF-8, "
            "e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8.txt."
        ) from None


def _refuse_binary(data: bytes, where: str) -> None:
    if b"\x00" in data[:8192]:
        raise UsageError(f"{where} looks like a binary file (it has NUL bytes); give a UTF-8 text file.")


def _too_big(where: str) -> UsageError:
    return UsageError(
        f"{where} is larger than {MAX_INPUT_BYTES // 2**20} MiB, far more text than attention can "
        "show (every token looks at every other); give an excerpt of a few paragraphs."
    )


def read_file(path: Path, option: str = "--file") -> str:
    """Text of ``--file PATH`` (``--file -`` reads standard input); ``option`` names the file in errors."""
    if str(path) == "-":
        return read_stream(_stdin(), "standard input")
    where = f"{option} {shown_path(path)}"
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except PermissionError:  # a folder on the way may not be entered
        raise UsageError(f"{where} cannot be read (permission denied on a folder of its path).") from None
    except OSError as exc:  # e.g. a name too long for the file system
        raise UsageError(f"{where} cannot be used: {exc.strerror or exc}.") from None
    if not exists:
        hint = _did_you_mean(path)
        raise UsageError(f"{where} does not exist{hint}; check the name and the folder you are in.")
    if is_dir:
        raise UsageError(f"{where} is a folder; give a text file inside it.")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except PermissionError:
        raise UsageError(f"{where} cannot be read (permission denied); check its permissions "
                         "(e.g. chmod u+r FILE).") from None
    except OSError as exc:
        raise UsageError(f"{where} cannot be read: {exc.strerror or exc}.") from None
    if len(data) > MAX_INPUT_BYTES:
        _refuse_binary(data, where)  # /dev/zero is binary before it is big
        raise _too_big(where)
    return decode(data, where)


def _did_you_mean(path: Path) -> str:
    """``(did you mean 'notes.txt'?)`` when a file with a close name sits in the same folder."""
    import difflib

    folder = path.parent if str(path.parent) else Path(".")
    try:
        names = [p.name for p in folder.iterdir()][:2000] if folder.is_dir() else []
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return f" (did you mean {shown_path(folder / close[0])}?)" if close else ""


def _stdin() -> BinaryIO:
    stream = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise UsageError("standard input is closed; pass the text as TEXT or with --file PATH.")
    return stream.buffer if hasattr(stream, "buffer") else stream  # type: ignore[return-value]


def read_stream(stream: BinaryIO, where: str = "standard input") -> str:
    """Text piped on standard input (``TEXT`` given as ``-``)."""
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        # Waiting silently for a terminal looks like a hang: say what to do.
        sys.stderr.write("mha: reading the text from the keyboard; press Ctrl-D on a new line when done.\n")
        sys.stderr.flush()
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        _refuse_binary(data, where)
        raise _too_big(where)
    return decode(data, where)


def argv_text(text: str) -> str:
    """A text argument as typed, when a C locale decoded argv as ASCII (each byte past ASCII a lone surrogate):
    decoded again as UTF-8. Never a path: a path keeps the file system's encoding."""
    if not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    try:
        return os.fsencode(text).decode("utf-8")
    except (UnicodeError, ValueError):
        return text


def resolve_text(text: str | None, file: Path | None, sample: str | None = None) -> str:
    """Exactly one source of text, read and decoded; refuse none, several, or empty."""
    given = [name for name, value in (("TEXT", text), ("--file", file), ("--sample", sample))
             if value is not None]
    if not given:
        raise UsageError("no text given; pass TEXT in quotes, --file PATH, --sample NAME, "
                         "or '-' to read standard input.")
    if len(given) > 1:
        raise UsageError(f"give only one of TEXT, --file and --sample (got {' and '.join(given)}).")
    from_stdin = text == "-" or (file is not None and str(file) == "-")
    if file is not None:
        body = read_file(file)
    elif sample is not None:
        from mhacli.io.samples import load_sample

        body = load_sample(sample).text
    elif text == "-":
        body = read_stream(_stdin(), "standard input")
    else:
        body = argv_text(str(text))
        if len(body.encode("utf-8", "surrogatepass")) > MAX_INPUT_BYTES:
            raise _too_big("the text")
    if not body.strip():
        source = {"TEXT": "the text", "--file": f"--file {shown_path(file or '')}", "--sample": "the sample"}[given[0]]
        if from_stdin:
            source = "standard input"
        raise UsageError(f"{source} is empty or only white space; give at least one word.")
    return body


MAX_QUERY_DIGITS = 18  # no text has 10^18 tokens; int() of 5,000 digits would hit Python's own limit


def check_query(query: str | None) -> str | None:
    """Refuse a ``--query`` position with absurdly many digits before Python's int-string limit does."""
    if query is None:
        return None
    text = str(query).strip()
    digits = text.lstrip("+-")
    if digits.isascii() and digits.isdigit() and len(digits) > MAX_QUERY_DIGITS:  # '²' is a token, not a digit
        from mhacli.attention.messages import one_line

        shown = one_line(f"{text[:12]}…({len(digits):,} digits)")
        raise UsageError(f"--query {shown} is beyond any text; give a 0-based position (such as 3) "
                         "or one of the text's tokens.")
    return argv_text(query)

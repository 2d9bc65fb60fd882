"""Where the text comes from: the argument, ``--file``, standard input or a sample.

Every way a file can be wrong becomes one :class:`UsageError` line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from mhacli.errors import UsageError

MAX_INPUT_BYTES = 50 * 2**20  # far beyond any sentence a class would read; refuse a stray dump


def decode(data: bytes, where: str) -> str:
    """UTF-8 text from bytes (a BOM is dropped; CRLF is fine); refuse binary or other encodings."""
    if b"\x00" in data[:8192]:
        raise UsageError(f"{where} looks like a binary file (it has NUL bytes); give a UTF-8 text file.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{where} is not valid UTF-8 (byte {exc.start}); save it as UTF-8, "
            "e.g. iconv -f latin1 -t utf-8 FILE > FILE.txt."
        ) from None


def read_file(path: Path) -> str:
    """Text of ``--file PATH``."""
    where = f"--file {str(path)!r}"
    if not path.exists():
        raise UsageError(f"{where} does not exist.")
    if path.is_dir():
        raise UsageError(f"{where} is a folder; give a text file.")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except PermissionError:
        raise UsageError(f"{where} cannot be read (permission denied).") from None
    except OSError as exc:
        raise UsageError(f"{where} cannot be read: {exc.strerror or exc}.") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{where} is larger than {MAX_INPUT_BYTES // 2**20} MiB; give a shorter text.")
    return decode(data, where)


def read_stream(stream: BinaryIO) -> str:
    """Text piped on standard input (``TEXT`` given as ``-``)."""
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"standard input is larger than {MAX_INPUT_BYTES // 2**20} MiB.")
    return decode(data, "standard input")


def resolve_text(text: str | None, file: Path | None, sample: str | None = None) -> str:
    """Exactly one source of text, read and decoded; refuse none, several, or empty."""
    given = [name for name, value in (("TEXT", text), ("--file", file), ("--sample", sample))
             if value is not None]
    if not given:
        raise UsageError("no text given; pass TEXT, --file PATH, --sample NAME, or '-' to read standard input.")
    if len(given) > 1:
        raise UsageError(f"give only one of TEXT, --file and --sample (got {' and '.join(given)}).")
    if file is not None:
        body = read_file(file)
    elif sample is not None:
        from mhacli.samples import load_sample

        body = load_sample(sample).text
    elif text == "-":
        body = read_stream(sys.stdin.buffer)
    else:
        body = str(text)
    if not body.strip():
        source = {"TEXT": "the text", "--file": f"--file {str(file)!r}", "--sample": "the sample"}[given[0]]
        if text == "-":
            source = "standard input"
        raise UsageError(f"{source} is empty or only white space; give at least one word.")
    return body

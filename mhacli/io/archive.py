"""The one bounded reader for every file mha reads (traces, attention files, weights, trained models): only a
regular file of bounded size (:func:`open_regular`), an npz refused from what its zip declares before a byte is
inflated (:func:`read_npz`), plain dtypes, never unpickled; each caller words the refusal (``bad``).
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import IO, Callable

import numpy as np

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import shown, shown_path

MAX_MEMBERS = 64  # a trace has ~30 members, a state dict of a 24-layer model a few hundred (raised by callers)
PLAIN_KINDS = "biufUS"  # booleans, integers, floats, text: every dtype an honest array file needs

Refusal = Callable[[str], UsageError]


def open_regular(path: Path, *, noun: str, hint: str, max_bytes: int | None = None,
                 too_big: str = "what mha reads") -> tuple[IO[bytes], int]:
    """Open ``path`` if it is a regular file of at most ``max_bytes``, checked on the opened file (a name swapped
    for a device cannot make the read endless; ``O_NONBLOCK``: a FIFO cannot block); refuse anything else at once."""
    where = f"{noun} {shown_path(path)}"
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UsageError(f"{where} does not exist; {hint}.") from None
    except IsADirectoryError:
        raise UsageError(f"{where} is a folder, not a file; {hint}.") from None
    except PermissionError:
        raise UsageError(f"{where} cannot be read (permission denied).") from None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, a NUL in the name
        raise UsageError(f"{where} cannot be used: {getattr(exc, 'strerror', None) or exc}.") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"{where} is a folder, not a file; {hint}.")
        raise UsageError(f"{where} is not a regular file (a device, a pipe or a socket); {hint}.")
    if max_bytes is not None and info.st_size > max_bytes:
        os.close(fd)
        raise UsageError(f"{where} is {info.st_size:,} bytes, more than the {max_bytes:,} {too_big}.")
    if getattr(os, "O_NONBLOCK", 0):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), info.st_size


def unpack_limit(cap: int | None) -> int:
    """The most an archive may unpack to: ``cap``, and never more than this machine can spare."""
    from mhacli.io.memory import memory_limit_bytes

    limit = memory_limit_bytes()
    return limit if cap is None else min(cap, limit)


def check_declared(archive: zipfile.ZipFile, bad: Refusal, cap: int | None, max_members: int) -> list[zipfile.ZipInfo]:
    """The members of ``archive``, refused from the sizes the zip declares before anything is inflated."""
    from mhacli.attention.config import human_bytes

    infos = archive.infolist()
    if len(infos) > max_members:
        raise bad(f"it has {len(infos):,} members, more than the {max_members:,} such a file needs")
    declared = sum(info.file_size for info in infos)
    if cap is not None and declared > cap:
        raise bad(f"its members would unpack to {human_bytes(declared)} (as the zip declares), more than the "
                  f"{human_bytes(cap)} such a file may hold; it may be a zip bomb")
    limit = unpack_limit(cap)
    if declared > limit:
        raise bad(f"its members would unpack to {human_bytes(declared)} (as the zip declares), more than the "
                  f"{human_bytes(limit)} this machine can spare now")
    return infos


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, bad: Refusal,
            kinds: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one member, from its .npy header alone (nothing else is unpacked)."""
    name = info.filename[:-4]
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(member)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(member)
            else:
                raise ValueError("an .npy version numpy does not write by default")
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, KeyError, SyntaxError, TypeError,
            NotImplementedError, RuntimeError) as exc:
        if isinstance(exc, (zipfile.BadZipFile, EOFError)) or "CRC" in str(exc) or "Bad" in str(exc):
            raise bad(DAMAGED) from None
        raise bad(f"its member {shown(name)} is not .npy array data") from None
    if dtype.hasobject:
        raise bad(f"its member {shown(name)} holds Python objects, which would have to be unpickled; "
                  "mha never unpickles a file (save strings as a plain str array)")
    if dtype.kind not in kinds or dtype.names is not None or dtype.subdtype is not None:
        wanted = "real numbers or text" if "U" in kinds else "real numbers"  # what this kind of file holds, truly
        raise bad(f"its member {shown(name)} holds {_KIND_WORDS.get(dtype.kind, 'records')} ({dtype.str}), "
                  f"not {wanted}")
    return tuple(int(n) for n in shape), dtype


_KIND_WORDS = {"U": "text", "S": "bytes", "b": "true/false values", "i": "whole numbers", "u": "whole numbers",
               "f": "numbers", "c": "complex numbers", "V": "raw bytes", "M": "dates", "m": "time spans"}

DAMAGED = "it is truncated or damaged (was it copied before it was fully written?); write it again"


def read_npz(path: Path, *, noun: str, hint: str, bad: Refusal, cap: int | None,
             max_members: int = MAX_MEMBERS, names_check: Callable[[list[str]], None] | None = None,
             wanted: Callable[[str], bool] | None = None, kinds: str = PLAIN_KINDS) -> dict[str, np.ndarray]:
    """Every ``wanted`` member of the npz at ``path``, each checked from the zip and its header before it is read;
    ``cap`` bounds the file and what it unpacks to; ``names_check`` sees the member names first."""
    handle, _ = open_regular(path, noun=noun, hint=hint, max_bytes=cap,
                             too_big="such a file needs (a teaching run is far smaller)")
    try:
        with handle:
            head = handle.read(6)
            handle.seek(0)
            if head.startswith(b"\x93NUMPY"):
                raise bad("it is a single .npy array, not an npz archive")
            if not head.startswith(b"PK"):
                raise bad("it is not an npz file (text or another format)")
            with zipfile.ZipFile(handle) as archive:
                infos = check_declared(archive, bad, cap, max_members)
                names = [info.filename[:-4] for info in infos if info.filename.endswith(".npy")]
                if names_check is not None:
                    names_check(names)
                arrays: dict[str, np.ndarray] = {}
                for info in infos:
                    name = info.filename[:-4]
                    if not info.filename.endswith(".npy") or (wanted is not None and not wanted(name)):
                        continue
                    shape, dtype = _header(archive, info, bad, kinds)
                    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
                    if expected > info.file_size:
                        raise bad(f"its member {shown(name)} is cut short (its header promises more data "
                                  "than the zip holds)")
                    with archive.open(info) as member:
                        arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    except UsageError:
        raise
    except MemoryError:
        raise bad("its arrays would not fit in this machine's memory") from None
    except (zipfile.BadZipFile, EOFError) as exc:
        raise bad(DAMAGED) from exc
    except (OSError, ValueError, KeyError, NotImplementedError, RuntimeError) as exc:
        if "zip" in str(exc).lower() or "CRC" in str(exc):
            raise bad(DAMAGED) from None
        raise bad(f"it cannot be read as npz ({type(exc).__name__})") from None
    return arrays


def zip_names(path: Path) -> list[str] | None:
    """The ``.npy`` member names of a regular npz (without ``.npy``), read from its directory alone; None if none."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with zipfile.ZipFile(path) as archive:
            return [n[:-4] for n in archive.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile, ValueError):
        return None


def check_zip_archive(path: Path, bad: Refusal, cap: int | None, max_members: int) -> None:
    """A zip that another library will read (PyTorch's .pt): refused from its declared sizes first."""
    try:
        with open(path, "rb") as handle:
            if handle.read(2) != b"PK":
                return  # PyTorch's legacy format is not a zip: its size was already capped
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                check_declared(archive, bad, cap, max_members)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError):
        raise bad(DAMAGED) from None


def torch_pickle(path: Path) -> bytes | None:
    """The pickle a PyTorch zip (``.pt``) holds (its ``data.pkl``), to be read as data, never unpickled; None when
    the file is not such a zip. Call after :func:`check_zip_archive` has capped its declared sizes."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            return archive.read(pickles[0]) if pickles else None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None  # not a zip (PyTorch's legacy format): torch.load says what it is


#: The names an attention file (your model's weights after softmax) may give its attention: the first one present.
WEIGHT_KEYS = ("weights", "attentions", "attention")


def is_attention_npz(names: list[str]) -> bool:
    """An attention file has attention weights and ``tokens`` and none of a trace's step arrays."""
    return any(k in names for k in WEIGHT_KEYS) and "tokens" in names and "Q" not in names

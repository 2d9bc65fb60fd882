"""Writing files so that nothing is ever half-written or clobbered by accident.

Every file the tool writes goes through :func:`atomic_write`: the bytes go to
a temporary file in the same folder, are flushed to disk, and only then
renamed over the target, so a crash or Ctrl-C leaves either the old file or
the new one, never a broken mix.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable

from mhacli.errors import RunError, UsageError


def check_target(path: Path, what: str) -> None:
    """Refuse a target that is a folder or whose folder is missing, before any work is done."""
    if path.is_dir():
        raise UsageError(f"{what} {str(path)!r} is a folder; give a file name such as {str(path / 'trace.npz')!r}.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{what} {str(path)!r}: folder {str(parent)!r} does not exist; create it first.")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{what} {str(path)!r}: folder {str(parent)!r} is not writable.")


def prepare_out_dir(path: Path) -> Path:
    """Create the figures folder if missing; refuse a file or an unwritable folder."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {str(path)!r} is a file, not a folder; choose another --out.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {str(path)!r} cannot be created: {exc.strerror or exc}.") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"--out {str(path)!r} is not writable; choose another --out.")
    return path


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``path`` through ``write(fileobj)`` into a temporary sibling, then rename it into place."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise RunError(f"cannot write {str(path)!r}: {exc.strerror or exc}.") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {str(path)!r}: {exc.strerror or exc}.") from None
    except BaseException:
        # Ctrl-C or any other failure: the temporary file goes, the target is untouched.
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    """:func:`atomic_write` for UTF-8 text."""
    return atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))

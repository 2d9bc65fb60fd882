"""Writing files so that nothing is ever half-written or clobbered by accident: :func:`atomic_write` renames a
flushed temporary sibling over the target, and targets are checked before any work (:func:`check_target`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO, Callable, cast

from mhacli.attention.messages import shown_path
from mhacli.attention.errors import RunError, UsageError

TEMP_SUFFIX = ".tmp"
_EXAMPLE_NAMES = {"--save-npz": "trace.npz", "--html": "attention.html"}


def _stat(path: Path, what: str) -> os.stat_result | None:
    """``os.stat`` of ``path`` or None when it does not exist; a name the OS rejects is a usage error."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise UsageError(f"{what} {shown_path(path)}: a part of that path is a file, not a folder.") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(f"{what} {shown_path(path)}: the name is too long for this file system; "
                             "choose a shorter one.") from None
        raise UsageError(f"{what} {shown_path(path)} cannot be used: {exc.strerror or exc}.") from None


def check_target(path: Path, what: str) -> None:
    """Refuse, before any work, a target that is a folder, a device, in a missing folder or unwritable."""
    path = Path(path)
    info = _stat(path, what)
    if info is not None and stat.S_ISDIR(info.st_mode):
        example = _EXAMPLE_NAMES.get(what, "output")
        raise UsageError(f"{what} {shown_path(path)} is a folder; give a file name such as "
                         f"{shown_path(path / example)}.")
    if info is not None and not stat.S_ISREG(info.st_mode):
        # Replacing /dev/null (as root) or a named pipe with a file would break the system.
        raise UsageError(f"{what} {shown_path(path)} is not a regular file (a device or a pipe); "
                         "give a file name.")
    if info is not None and _unchangeable(path):
        # An immutable or append-only file cannot be replaced, not even by root: say so now, not after the run.
        raise UsageError(f"{what} {shown_path(path)} is marked immutable or append-only (chattr), so it cannot be "
                         "replaced; give another name, or clear the mark (chattr -i).")
    parent = path.parent if str(path.parent) else Path(".")
    parent_info = _stat(parent, what)
    if parent_info is None:
        raise UsageError(f"{what} {shown_path(path)}: folder {shown_path(parent)} does not exist; "
                         f"create it first (mkdir -p {shown_path(parent)}).")
    if not stat.S_ISDIR(parent_info.st_mode):
        raise UsageError(f"{what} {shown_path(path)}: {shown_path(parent)} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {shown_path(path)}: folder {shown_path(parent)} is not writable; "
                         "choose another place.")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    # The temporary sibling is longer than the name itself; both must fit.
    if len(os.fsencode(_temp_prefix(path.name))) + 8 + len(TEMP_SUFFIX) > name_max:
        raise UsageError(f"{what} {shown_path(path)}: the file name is too long for this file system; "
                         "choose a shorter name.")


_FS_IOC_GETFLAGS = 0x80086601  # Linux's ioctl for a file's attributes (lsattr); 0x10 immutable, 0x20 append-only
_UNCHANGEABLE = 0x10 | 0x20


def _unchangeable(path: Path) -> bool:
    """Whether the file at ``path`` carries Linux's immutable or append-only attribute (False where unknown)."""
    import array

    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    flags = array.array("l", [0])
    try:  # fails on a file system without attributes (tmpfs on old kernels, network mounts)
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(flags[0] & _UNCHANGEABLE)


#: The end of every "interrupted" line (mhacli.cli.app, mhacli.io.cleanup): what this module knows follows it.
LEFT_BEHIND = "nothing half-written was left behind."
_replaced: list[str] = []  # files this invocation replaced that existed before it, in order


def reset_replaced() -> None:
    """Forget the files replaced so far (one process may run several commands, as the tests do)."""
    _replaced.clear()


def replaced_sentence() -> str:
    """What an interrupted run must add: the earlier files it had already replaced, or nothing."""
    if not _replaced:
        return ""
    more = f" and {len(_replaced) - 3} more" if len(_replaced) > 3 else ""
    listed = ", ".join(shown_path(p) for p in _replaced[:3]) + more
    earlier = "the earlier file is" if len(_replaced) == 1 else "the earlier files are"
    return f" It had already replaced {listed} with this run's: {earlier} gone."


def prepare_out_dir(path: Path, what: str = "--out", made: list[Path] | None = None) -> Path:
    """Create the output folder if missing (each folder made registered for cleanup while empty, and added to
    ``made``); refuse a file, a device or an unwritable folder."""
    path = Path(path)
    info = _stat(path, what)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{what} {shown_path(path)} is a file, not a folder; choose another {what}.")
    from mhacli.io import cleanup

    # Registered before they exist (no window for a signal); any exit removes each one still empty.
    created = [p for p in (path, *path.parents) if not os.path.lexists(p)]  # deepest first
    cleanup.register_made(created)
    if made is not None:
        made.extend(created)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{what} {shown_path(path)}: a part of that path is a file, not a folder.") from None
    except OSError as exc:
        raise UsageError(f"{what} {shown_path(path)} cannot be created: {exc.strerror or exc}; "
                         f"choose another {what}.") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {shown_path(path)} is not writable; choose another {what}.")
    return path


def _temp_prefix(name: str) -> str:
    return f".{name}."


def _new_file_mode() -> int:
    """The mode a plain ``open(path, 'w')`` would give: 0o666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_confined: set[str] = set()  # folders (real paths) whose symbolic links are never followed out


def confine(folder: Path | str) -> None:
    """Never follow a symbolic link inside ``folder`` (``--out``): :func:`atomic_write` replaces the link itself."""
    _confined.add(os.path.realpath(folder))


def _is_confined(path: Path) -> bool:
    parent = path.parent if str(path.parent) else Path(".")
    return os.path.realpath(parent) in _confined


def _temp_name(path: Path) -> Path:
    """A fresh, unpredictable name for the temporary sibling of ``path``."""
    import secrets

    folder = path.parent if str(path.parent) else Path(".")
    return folder / f"{_temp_prefix(path.name)}{secrets.token_hex(4)}{TEMP_SUFFIX}"


def _create_temp(path: Path) -> tuple[int, Path]:
    """Create the temporary sibling, registered for cleanup *before* it exists (no window for a signal)."""
    from mhacli.io import cleanup

    for _ in range(100):
        tmp = _temp_name(path)
        cleanup.register(tmp)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), tmp
        except FileExistsError:
            cleanup.unregister(tmp)
        except BaseException:
            cleanup.unregister(tmp)
            raise
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))  # pragma: no cover


#: Tests only: a folder holding two FIFOs, ``announce`` and ``resume`` (see :func:`_test_pause`).
PAUSE_ENV = "MHACLI_TEST_PAUSE"
PAUSE_AT_ENV = "MHACLI_TEST_PAUSE_AT"  # optional: pause only in the write of a file of this name
_paused: set[int] = set()  # the processes that have paused already (once each)


def _test_pause(target: Path) -> Callable[[], None] | None:
    """A pause point for tests, mid-write (None, the usual case, without ``MHACLI_TEST_PAUSE``): the first write
    announces the target's path on the ``announce`` FIFO and waits for a byte on ``resume``, so a test signals then."""
    folder = os.environ.get(PAUSE_ENV)
    if not folder or os.getpid() in _paused:
        return None
    wanted = os.environ.get(PAUSE_AT_ENV)
    if wanted and wanted != target.name:
        return None
    _paused.add(os.getpid())

    def pause() -> None:
        import select

        # Opened before announcing: the test's byte cannot come before there is a reader to take it.
        resume = os.open(os.path.join(folder, "resume"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            with open(os.path.join(folder, "announce"), "wb") as announce:
                announce.write(os.fsencode(str(target)) + b"\n")
            select.select([resume], [], [])  # a signal lands here
        finally:
            os.close(resume)
    return pause


class _PausingHandle:
    """The file a writer is given while a test pause is armed: pauses at the first bytes, then forwards."""

    def __init__(self, handle: IO[bytes], pause: Callable[[], None]) -> None:
        self._handle = handle
        self._pause: Callable[[], None] | None = pause

    def write(self, data: bytes) -> int:
        if self._pause is not None and len(data):
            pause, self._pause = self._pause, None
            pause()
        return self._handle.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._handle, name)


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Write ``path`` through ``write(fileobj)`` into a temporary sibling, then rename it into place; on any failure
    the target is left as it was. A link is followed, except inside a folder given to :func:`confine`."""
    from mhacli.io import cleanup

    given = path = Path(path)
    if path.is_symlink() and not _is_confined(path):
        path = Path(os.path.realpath(path))
    folder = path.parent if str(path.parent) else Path(".")
    try:
        existing = path.lstat() if path.is_symlink() else path.stat()
    except OSError:
        existing = None
    if existing is not None and not (stat.S_ISREG(existing.st_mode) or stat.S_ISLNK(existing.st_mode)):
        raise UsageError(f"{shown_path(path)} is not a regular file; give a file name.")
    mode = (stat.S_IMODE(existing.st_mode) if existing is not None and stat.S_ISREG(existing.st_mode)
            else _new_file_mode())
    try:
        fd, tmp = _create_temp(path)
    except OSError as exc:
        raise RunError(f"cannot write {shown_path(path)}: {exc.strerror or exc}.") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            pause = _test_pause(path)
            write(handle if pause is None else cast(IO[bytes], _PausingHandle(handle, pause)))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        if existing is not None and stat.S_ISREG(existing.st_mode) and str(given) not in _replaced:
            _replaced.append(str(given))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {shown_path(path)}: {exc.strerror or exc}.") from None
    except BaseException:
        # Ctrl-C, a signal or any other failure: the temporary file goes, the target is untouched.
        tmp.unlink(missing_ok=True)
        raise
    finally:
        cleanup.unregister(tmp)
    _sync_folder(folder)
    return given


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every system can fsync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """:func:`atomic_write` for bytes made already (a figure encoded in memory)."""
    return atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: Path, text: str) -> Path:
    """:func:`atomic_write` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))

"""One cleanup path for every way a run ends: every temporary file or folder is registered here while it exists,
and :func:`remove_all` deletes what is left, after an exception or at once on a signal (:func:`on_signal`, which
then unwinds the run as Ctrl-C does). Exit codes are 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from mhacli.attention.errors import ExitCode

# path -> True for a folder, False for a file, EMPTY for a folder the run made
_registered: dict[str, bool | str] = {}
EMPTY = "empty"  # removed only while empty: a folder made for files the run did not get to write
_lock = threading.Lock()
_received: list[int] = []  # signals received by this process, in order

_EXIT_CODES: dict[int, int] = {signal.SIGINT: ExitCode.INTERRUPTED, signal.SIGTERM: ExitCode.SIGTERM}
if hasattr(signal, "SIGHUP"):
    _EXIT_CODES[signal.SIGHUP] = ExitCode.SIGHUP
_WHY = {"SIGINT": "interrupted (Ctrl-C)", "SIGTERM": "terminated (SIGTERM)",
        "SIGHUP": "the terminal went away (SIGHUP)"}


class Terminated(BaseException):
    """The run was ended by a signal other than Ctrl-C; a BaseException, so that it unwinds like
    ``KeyboardInterrupt`` and no ``except Exception`` on the way mistakes it for an error of the run."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(message_for(signum))

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.signum)


def exit_code_for(signum: int) -> int:
    """128 + the signal's number, as shells report it (130 for Ctrl-C)."""
    return int(_EXIT_CODES.get(signum, 128 + int(signum)))


def message_for(signum: int) -> str:
    """One line for the error stream: how the run ended and that nothing was left behind."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why = _WHY.get(name, f"ended by {name}")
    return f"{why}; nothing half-written was left behind."


def received() -> int | None:
    """The first signal this process received (None if none): decides the exit code."""
    return _received[0] if _received else None


def reset() -> None:
    """Forget the signals received so far (one process may run several commands, as the tests do)."""
    _received.clear()


def register(path: Path | str, folder: bool = False) -> None:
    """Remember ``path`` (a temporary file, or a folder) until :func:`unregister`: it goes on any exit."""
    with _lock:
        _registered[os.fspath(path)] = folder


def register_made(folders: list[Path]) -> None:
    """Folders the run created (deepest first): any exit removes each one still empty, so a run that fails after
    making ``--out`` leaves no empty folder behind."""
    with _lock:
        for path in folders:
            _registered[os.fspath(path)] = EMPTY


def settle_made(folders: list[Path], failed: bool) -> None:
    """End the registration of ``folders`` outside a command (the API's save_figures), removing each still empty
    when ``failed``."""
    for path in folders:
        unregister(path)
        if failed:
            with contextlib.suppress(OSError):
                os.rmdir(path)


def unregister(path: Path | str) -> None:
    """``path`` was renamed into place or removed: no longer ours to delete."""
    with _lock:
        _registered.pop(os.fspath(path), None)


def pending() -> list[str]:
    """The paths this process would remove now (for tests and for ``--debug``)."""
    with _lock:
        return list(_registered)


def remove_all() -> None:
    """Delete every temporary file and folder this process still has registered (never raises)."""
    with _lock:
        mine = list(_registered.items())
        _registered.clear()
    for path, folder in mine:
        with contextlib.suppress(OSError):
            if folder == EMPTY:
                os.rmdir(path)
            elif folder:
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


@contextmanager
def temporary_folder(prefix: str = "mha-") -> Iterator[Path]:
    """A fresh temporary folder, removed when the block ends, however it ends (signals included)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    register(folder, folder=True)
    try:
        yield Path(folder)
    finally:
        unregister(folder)
        shutil.rmtree(folder, ignore_errors=True)


def on_signal(signum: int, frame: Any = None) -> None:
    """The handler :func:`install` sets: remember the signal, remove every temporary now, unwind."""
    if not _received:
        _received.append(signum)
    # Remove at once: the exception below may land in a finally or a __del__ that swallows it.
    remove_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def is_noise(unraisable: Any) -> bool:
    """Whether Python's "Exception ignored in …" report says nothing the run has not said: a signal landing in a
    ``__del__``, or a destructor failing on what a signal cut short (a zip closing onto a removed file)."""
    if isinstance(unraisable.exc_type, type) and issubclass(unraisable.exc_type, Terminated):
        return True
    return bool(_received)


def _quiet_unraisable(previous: Any) -> Any:
    if getattr(previous, "quiets_noise", False):  # installed already: one filter is enough
        return previous

    def hook(unraisable: Any) -> None:
        if not is_noise(unraisable):
            previous(unraisable)
    hook.quiets_noise = True  # type: ignore[attr-defined]
    return hook


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through :func:`on_signal` (from the main thread, once per run)."""
    import sys

    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - signal() would refuse
        return
    sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None:  # pragma: no cover - SIGHUP on Windows
            continue
        if name != "SIGTERM" and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # nohup, or a background job of a script: ignored on purpose, as Python itself does
        signal.signal(signum, on_signal)

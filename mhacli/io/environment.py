"""The process's surroundings made safe before a run (closed standard streams, an unusable MPLCONFIGDIR) and
ended after it."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

_NAMES = {0: "stdin", 1: "stdout", 2: "stderr"}


def ensure_std_streams() -> list[str]:
    """Open ``/dev/null`` on each closed standard descriptor (0, 1, 2), so that with 1 closed (``>&-``) no file
    opened later becomes stdout; returns the names of those fixed."""
    fixed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        flags = os.O_RDONLY if fd == 0 else os.O_WRONLY
        got = os.open(os.devnull, flags)
        if got != fd:  # a lower descriptor was closed too and got it first: move it into place
            os.dup2(got, fd)
            os.close(got)
        fixed.append(_NAMES[fd])
    for fd, name in _NAMES.items():
        if getattr(sys, name) is None:
            mode = "r" if fd == 0 else "w"
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))
            if name not in fixed:
                fixed.append(name)
    return fixed


def _writable_folder(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _default_config_dir() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "matplotlib"


def usable_mplconfigdir() -> Path | None:
    """Point ``MPLCONFIGDIR`` at a temporary folder (removed however the run ends) if the one matplotlib would use is
    not writable, before matplotlib is imported and prints two lines about it; that folder, or None."""
    given = os.environ.get("MPLCONFIGDIR")
    try:
        wanted = Path(given) if given else _default_config_dir()
    except (RuntimeError, KeyError):  # no home folder at all
        wanted = None
    if wanted is not None and _writable_folder(wanted):
        return None
    from mhacli.io import cleanup

    folder = tempfile.mkdtemp(prefix="mha-matplotlib-")
    cleanup.register(folder, folder=True)
    os.environ["MPLCONFIGDIR"] = folder
    return Path(folder)


def prepare_process() -> None:
    """What an ``mha`` run does first (doing it again changes nothing): standard descriptors that exist, the signal
    handlers of :mod:`mhacli.io.cleanup`, a usable matplotlib config folder."""
    from mhacli.io import cleanup

    ensure_std_streams()
    cleanup.install()
    usable_mplconfigdir()


def end_process() -> None:
    """What an ``mha`` run does last, however it ended: every signal ignored from here on (a late one has nothing
    left to interrupt), every temporary removed."""
    import signal

    from mhacli.io import cleanup

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    cleanup.remove_all()

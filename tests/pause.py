"""Signal a real ``mha`` exactly while it writes a file: the writer's test-only pause point, no polling, no timers.

:func:`paused` starts the command with ``MHACLI_TEST_PAUSE`` naming two FIFOs
(:func:`mhacli.io.files._test_pause`) and returns once the writer has said it
is mid-write, so the test's signal always lands there.  If the command ends
without reaching the pause, the test fails as soon as it has ended (a pidfd).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
from pathlib import Path
from typing import Iterator, Sequence

import pytest


@contextlib.contextmanager
def paused(argv: Sequence[str], *, cwd: Path, env: dict[str, str], name: str | None = None,
           **popen: object) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run ``argv`` until its first write (of a file called ``name``) pauses; yield (process, path being written).

    Leaving the block lets the writer go on (if it is still there) and waits for the process.
    """
    folder = cwd / ".pause"
    folder.mkdir()
    os.mkfifo(folder / "announce")
    os.mkfifo(folder / "resume")
    # Opened for reading first, without blocking: the writer's open then never waits, and until a
    # writer has come, select() sees nothing (Linux reports no hang-up on a FIFO never written to).
    announce = os.open(folder / "announce", os.O_RDONLY | os.O_NONBLOCK)
    extra = {PAUSE: str(folder), **({PAUSE_AT: name} if name else {})}
    # The run gets the default action of every signal a test sends, whatever pytest was started with.
    popen.setdefault("preexec_fn", default_signals)
    proc = subprocess.Popen(list(argv), cwd=cwd, env={**env, **extra}, text=True, **popen)  # type: ignore[call-overload]
    ended = os.pidfd_open(proc.pid)  # readable when the process ends: the other event waited for
    try:
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([announce, ended], [], [])  # no timeout: one of the two comes
            if announce in ready:
                line += os.read(announce, 4096)
            elif ended in ready:
                _, err = proc.communicate()
                pytest.fail(f"the run ended (exit {proc.returncode}) without reaching the write it should pause in: "
                            f"{err or ''}")
        yield proc, os.fsdecode(line.rstrip(b"\n"))
    finally:
        os.close(announce)
        os.close(ended)
        try:  # the writer, if still paused, carries on
            resume = os.open(folder / "resume", os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: nobody is waiting any more (the signal ended it)
            assert exc.errno == errno.ENXIO, exc
        else:
            os.write(resume, b"x")
            os.close(resume)
        if proc.poll() is None:
            try:
                proc.wait(timeout=600)  # a guard against a hang, not a timer the test relies on
            except subprocess.TimeoutExpired:
                proc.kill()
                raise


def default_signals() -> None:
    """In the child before it runs mha: the signals the tests send back to their default action. An inherited
    SIG_IGN survives exec and mha rightly keeps it: a suite started with nohup (SIGHUP ignored) or in a shell's
    background (SIGINT ignored) would otherwise wait forever for a signal its run never sees."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


PAUSE, PAUSE_AT = "MHACLI_TEST_PAUSE", "MHACLI_TEST_PAUSE_AT"

"""Work made ready ahead, in forked processes, while this one works: the figures of ``mha train`` and ``mha explain``.

``mha train`` draws its figures when training ends, and importing matplotlib and drawing them cost as much as
a third of the run (1.2 of the 2.7 CPU seconds of the default task), while training holds numpy to one thread
and the second core waits (``mha explain`` likewise computes and prints its walkthrough first).
:meth:`Ahead.start` forks the drawing processes *before* training (or the run), when no other
thread runs: each one leaves the terminal's session and the signals to its parent, imports what it will need
(matplotlib) on the idle core, and waits.  When training ends, :meth:`Ahead.run` hands each child one job (a
module-level function and its arguments, pickled between these processes: the run's own objects, never a
file's) and collects what it returns.

A child never writes a file and never prints: its stdin, stdout and stderr are ``/dev/null``, and it returns
bytes that the parent writes atomically, as it always did, so however the run ends a child leaves nothing
behind.  The parent adopts its children (:func:`mhacli.io.cleanup.adopt_child`: a signal it receives is passed
on, and they die of it) and kills what is left on every way out (:meth:`Ahead.close`).  A child that fails, or
dies, returns nothing, and the parent runs that job itself: the same function, so the same bytes.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from mhacli.io import cleanup
from mhacli.io.host import cpu_count

Job = tuple[Callable[..., Any], tuple[Any, ...]]


def worth_it() -> bool:
    """Whether a forked helper can pay here: Linux (fork is cheap, and safe before matplotlib is loaded), no
    other thread running, and a core left idle by what already runs on the machine.

    ``MHA_DRAWERS=0`` never forks and ``MHA_DRAWERS=1`` forks whatever the load (to measure one against the
    other, as scripts/bench_train_figures.py does)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return False
    asked = os.environ.get("MHA_DRAWERS")
    if asked in ("0", "1"):
        return asked == "1"
    try:
        busy = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average
        return False
    return cpu_count() > 1 and busy < cpu_count() - 0.5


@dataclass
class _Child:
    """One drawer: its pid and the ends of its two pipes this process holds (-1: closed, or reaped)."""

    pid: int
    job: int  # the job pipe's write end
    result: int  # the result pipe's read end


class Ahead:
    """Forked children, each ready for one job (see the module's text)."""

    def __init__(self) -> None:
        self._children: list[_Child] = []

    @classmethod
    def start(cls, count: int, warm: Sequence[str], check: bool = True) -> "Ahead | None":
        """``count`` children, each importing the modules ``warm`` names and then waiting for a job; None when
        :func:`worth_it` says no (``check=False``: fork anyway, as the tests do inside pytest's threads)."""
        if check and not worth_it():
            return None
        sys.stdout.flush()
        sys.stderr.flush()  # nothing buffered here is written twice
        ahead = cls()
        for _ in range(count):
            try:
                ahead._fork(warm)
            except OSError:  # no process or pipe to be had (ulimit -u, -n): the rest is drawn here
                break
        return ahead if ahead._children else None

    def _fork(self, warm: Sequence[str]) -> None:
        job_read, job_write = os.pipe()
        try:
            result_read, result_write = os.pipe()
        except OSError:
            os.close(job_read)
            os.close(job_write)
            raise
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns about fork where other threads exist (OpenBLAS's idle pool is one; it
                # stops itself at fork). The child only imports, draws into memory and leaves by os._exit.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            for fd in (job_read, job_write, result_read, result_write):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            siblings = [fd for child in self._children for fd in (child.job, child.result) if fd >= 0]
            _serve(job_read, result_write, [job_write, result_read, *siblings], warm)
        os.close(job_read)
        os.close(result_write)
        cleanup.adopt_child(pid)
        self._children.append(_Child(pid, job_write, result_read))

    def run(self, jobs: Sequence[Job]) -> Iterator[Any]:
        """Each job's result, in order, as it comes: ``function(*args)`` computed by the job's child, or here for
        a job without a child, or whose child failed or died. The children work while the caller reads the
        first results (the figures' files are written as each half comes)."""
        for child, job in zip(self._children, jobs):
            _send(child.job, job)
            child.job = -1  # closed by _send: the child reads to its end
        for n, (function, args) in enumerate(jobs):
            answer = self._collect(self._children[n]) if n < len(self._children) else None
            yield answer[1] if answer is not None and answer[0] == "ok" else function(*args)

    def _collect(self, child: "_Child") -> Any:
        chunks = []
        while chunk := os.read(child.result, 1 << 20):
            chunks.append(chunk)
        os.close(child.result)
        child.result = -1
        self._reap(child)
        try:
            return pickle.loads(b"".join(chunks)) if chunks else None  # our own child's answer
        except Exception:  # noqa: BLE001 - a child cut off mid-answer: do its job here
            return None

    def _reap(self, child: "_Child") -> None:
        try:
            os.waitpid(child.pid, 0)
        except ChildProcessError:
            pass
        cleanup.release_child(child.pid)
        child.pid = -1  # gone: its number may be another process's now, never to be signalled

    def close(self) -> None:
        """Kill every child still there and close the pipes still open (every way out: a result, an error, a
        signal); each descriptor is closed once, and a child already reaped is never signalled."""
        for child in self._children:
            for fd in (child.job, child.result):
                if fd >= 0:
                    os.close(fd)
            child.job = child.result = -1
            if child.pid > 0:
                try:
                    os.kill(child.pid, signal.SIGKILL)
                except OSError:  # it ended on its own
                    pass
                self._reap(child)
        self._children.clear()

    def __enter__(self) -> "Ahead":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def started(count: int, warm: Sequence[str], wanted: bool = True) -> Iterator["Ahead | None"]:
    """:meth:`Ahead.start` where ``wanted`` (None otherwise, or where it does not pay), closed however the block
    ends: a result, an error or a signal."""
    ahead = Ahead.start(count, warm) if wanted else None
    try:
        yield ahead
    finally:
        if ahead is not None:
            ahead.close()


def _send(fd: int, job: Job) -> None:
    data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # the child is gone: _collect finds nothing and the job runs here
        pass
    finally:
        os.close(fd)  # end of the job: the child reads to here


def _serve(job_read: int, result_write: int, inherited: list[int], warm: Sequence[str]) -> None:
    """The child's whole life: leave the terminal and the parent's handlers, import, do one job, answer."""
    code = 0
    try:
        os.setsid()  # its own session: Ctrl-C and SIGHUP go to the parent, which ends this process
        for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE"):  # the parent's handlers would remove its files
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)  # never a line on the parent's streams, never holding its pipes open
        sys.stdin = sys.stdout = sys.stderr = open(os.devnull, "r+", encoding="utf-8")  # and Python's own
        for fd in inherited:  # the parent's ends and a sibling's: EOF reaches each child when its parent goes
            os.close(fd)
        for module in warm:
            importlib.import_module(module)
        chunks = []
        while chunk := os.read(job_read, 1 << 20):
            chunks.append(chunk)
        if chunks:  # no job (the parent ended first): nothing to do
            function, args = pickle.loads(b"".join(chunks))  # the parent's own objects, through its pipe
            data = pickle.dumps(("ok", function(*args)), protocol=pickle.HIGHEST_PROTOCOL)
            while data:
                data = data[os.write(result_write, data):]
    except BaseException:  # noqa: BLE001 - the parent does the job itself
        code = 1
    finally:
        os._exit(code)  # never back into the parent's code, its atexit handlers or its buffers


__all__ = ["Ahead", "Job", "started", "worth_it"]

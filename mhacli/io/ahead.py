"""Work made ready ahead, in forked processes, while this one works: the figures of ``mha train`` and ``mha explain``.

``mha train`` draws its figures when training ends, and importing matplotlib and drawing them cost as much as
a third of the run (1.2 of the 2.7 CPU seconds of the default task), while training holds numpy to one thread
and the second core waits (``mha explain`` likewise computes and prints its walkthrough first).
:meth:`Ahead.start` forks the first drawing process *before* training (or the run), when no other
thread runs: it leaves the terminal's session and the signals to its parent, imports what the drawers will
need (matplotlib) on the idle core, then forks the other drawers, which share those modules and die with it.
:meth:`Ahead.hand` gives each child one job (a module-level function and its arguments, pickled between these
processes: the run's own objects, never a file's) as soon as the run is known, and :meth:`Ahead.run` collects
what they return.

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
    other thread running, and more than one core to run on.

    The machine's load is not asked. A busy machine is where the drawers pay most: measured interleaved on 2
    cores beside two busy loops (load 2.6), ``mha explain`` with its figures took 3.07 s with them and 5.45 s
    without, for 3 % more CPU (docs/performance.md); and the load average of the last minute counts the user's
    own previous commands, which had ended: a class running ``mha explain`` twice in a row lost the drawers.

    ``MHA_DRAWERS=0`` never forks and ``MHA_DRAWERS=1`` always does (to measure one against the other, as
    ``mha bench --startup`` and scripts/bench_train_figures.py do)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return False
    asked = os.environ.get("MHA_DRAWERS")
    if asked in ("0", "1"):
        return asked == "1"
    return cpu_count() > 1


@dataclass
class _Child:
    """One drawer: the ends of its two pipes this process holds (-1: closed) and its pid (-1: reaped, or a
    drawer the first one forked, which that one reaps and which dies with it)."""

    pid: int
    job: int  # the job pipe's write end
    result: int  # the result pipe's read end
    unsent: bytes = b""  # what of its job the pipe could not take yet: written by run()


class Ahead:
    """Forked children, each ready for one job (see the module's text)."""

    def __init__(self) -> None:
        self._children: list[_Child] = []
        self._jobs: list[Job] | None = None

    @classmethod
    def start(cls, count: int, warm: Sequence[str], check: bool = True) -> "Ahead | None":
        """``count`` children ready for a job each, the modules ``warm`` names imported; None when
        :func:`worth_it` says no (``check=False``: fork anyway, as the tests do inside pytest's threads), or
        when no process or pipe is to be had (ulimit -u, -n: the figures are drawn here).

        One child is forked here; it imports ``warm`` and then forks the others, which share what it imported
        (importing matplotlib twice cost 0.4 CPU seconds more, on the core the walkthrough or training needs)."""
        if check and not worth_it():
            return None
        sys.stdout.flush()
        sys.stderr.flush()  # nothing buffered here is written twice
        pipes: list[tuple[int, int, int, int]] = []  # each drawer's job read, job write, result read, result write
        try:
            for _ in range(count):
                job_read, job_write = os.pipe()
                pipes.append((job_read, job_write, *_pipe_or_close(job_read, job_write)))
            with warnings.catch_warnings():
                # Python 3.12+ warns about fork where other threads exist (OpenBLAS's idle pool is one; it
                # stops itself at fork). The child only imports, draws into memory and leaves by os._exit.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            for ends in pipes:
                for fd in ends:
                    os.close(fd)
            return None
        if pid == 0:  # the first drawer: never returns
            _serve(pipes, warm)
        cleanup.adopt_child(pid)
        ahead = cls()
        for n, (job_read, job_write, result_read, result_write) in enumerate(pipes):
            os.close(job_read)
            os.close(result_write)
            ahead._children.append(_Child(pid if n == 0 else -1, job_write, result_read))
        return ahead

    def hand(self, jobs: Sequence[Job]) -> None:
        """Give each child its job now, to be collected by :meth:`run` (``mha explain`` hands the figures over
        as soon as the run is computed, and prints its walkthrough while they are drawn). Never waits for a
        child still importing: what its pipe cannot take yet is written by :meth:`run`."""
        if self._jobs is not None:
            raise ValueError("each drawer takes one job: these were handed theirs already")
        self._jobs = list(jobs)
        for child, job in zip(self._children, self._jobs):
            child.unsent = _send(child.job, pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL), wait=False)
            if not child.unsent:
                child.job = -1  # closed by _send: the child reads to its end

    @property
    def handed(self) -> bool:
        """Whether :meth:`hand` gave the children their jobs already."""
        return self._jobs is not None

    def run(self, jobs: Sequence[Job] | None = None) -> Iterator[Any]:
        """Each job's result, in order, as it comes: ``function(*args)`` computed by the job's child, or here for
        a job without a child, or whose child failed or died. ``jobs`` are handed first (None: the jobs
        :meth:`hand` gave). The children work while the caller reads the first results (the figures' files
        are written as each half comes); every child is reaped once all have answered."""
        if jobs is not None:
            self.hand(jobs)
        if self._jobs is None:
            raise ValueError("no job was handed to the drawers")
        for child in self._children:
            if child.job >= 0:  # the rest of a job its pipe could not take at once
                _send(child.job, child.unsent, wait=True)
                child.job, child.unsent = -1, b""
        for n, (function, args) in enumerate(self._jobs):
            answer = self._collect(self._children[n]) if n < len(self._children) else None
            yield answer[1] if answer is not None and answer[0] == "ok" else function(*args)
        for child in self._children:  # the first reaps the others before it ends
            self._reap(child)

    def _collect(self, child: "_Child") -> Any:
        chunks = []
        while chunk := os.read(child.result, 1 << 20):
            chunks.append(chunk)
        os.close(child.result)
        child.result = -1
        try:
            return pickle.loads(b"".join(chunks)) if chunks else None  # our own child's answer
        except Exception:  # noqa: BLE001 - a child cut off mid-answer: do its job here
            return None

    def _reap(self, child: "_Child") -> None:
        if child.pid < 0:
            return
        try:
            os.waitpid(child.pid, 0)
        except ChildProcessError:
            pass
        cleanup.release_child(child.pid)
        child.pid = -1  # gone: its number may be another process's now, never to be signalled

    def close(self) -> None:
        """Kill every child still there and close the pipes still open (every way out: a result, an error, a
        signal); each descriptor is closed once, and a child already reaped is never signalled. The drawers
        the first one forked die with it."""
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


_MATPLOTLIB = ("matplotlib.figure", "matplotlib.backends.backend_agg")  # what every drawer draws with
_EXPLAIN = (2, (*_MATPLOTLIB, "mhacli.render.figures"))
#: Each drawing command's drawers: how many, and what they import while the command starts.
DRAWERS: dict[str, tuple[int, tuple[str, ...]]] = {
    "explain": _EXPLAIN,
    "compare": (1, _EXPLAIN[1]),  # single-vs-multi, drawn while the comparison prints
    "demo": _EXPLAIN,  # the same figures, drawn while the lesson is on screen
    # and its last slide, one-vs-many (forked when the lesson starts, never ahead of the command line)
    "one-vs-many": (1, (*_MATPLOTLIB, "mhacli.render.figures.one_vs_many")),
    "train": (2, (*_MATPLOTLIB, "mhacli.render.figures.training", "mhacli.render.figures.card")),
}
#: Words that say a command draws nothing (or only prints its help): no drawer is forked ahead of it.
_DRAWS_NOTHING = frozenset({"--no-plots", "--help", "-h"})
#: The commands whose drawers are forked as the script starts (the other keys of DRAWERS are forked by a command).
_EARLY = frozenset({"explain", "compare", "train", "demo"})
#: Commands that draw only when given a folder (``mha demo --out DIR``): no drawer is forked ahead of them without.
_DRAWS_WITH_OUT = frozenset({"demo"})
_early: dict[str, Ahead] = {}  # a command's name -> the drawers forked for it at the start, until it takes them


def start_early(argv: Sequence[str]) -> None:
    """The script's first act, before typer, rich and numpy are imported: fork the drawers of a command that will
    draw (the first word of ``argv`` that is no option: ``explain``, ``compare``, ``train``, or ``demo`` with
    ``--out``), so that matplotlib is imported on the idle core while the command line is parsed and the run is
    computed (and, for ``demo``, the figures are drawn while the lesson is on screen). Where :func:`worth_it` says
    no, nothing is forked. The command takes them (:func:`started`); drawers it did not take are closed at the end
    (:func:`close_early`), and a wrong guess costs only their import on the idle core."""
    command = next((word for word in argv if not word.startswith("-")), None)
    if command in _DRAWS_WITH_OUT and not any(w in ("--out", "-o") or w.startswith("--out=") for w in argv):
        return
    if command in _EARLY and command not in _early and not _DRAWS_NOTHING.intersection(argv):
        ahead = Ahead.start(*DRAWERS[command])
        if ahead is not None:
            _early[command] = ahead


def close_early() -> None:
    """Close the drawers :func:`start_early` forked that no command took."""
    while _early:
        _early.popitem()[1].close()


@contextmanager
def started(command: str, wanted: bool = True) -> Iterator["Ahead | None"]:
    """``command``'s drawers (:data:`DRAWERS`) where ``wanted``: those forked at the start, or :meth:`Ahead.start`
    now (None where it does not pay); closed however the block ends: a result, an error or a signal."""
    early = _early.pop(command, None)
    if early is not None and not wanted:
        early.close()
        early = None
    ahead = early or (Ahead.start(*DRAWERS[command]) if wanted else None)
    try:
        yield ahead
    finally:
        if ahead is not None:
            ahead.close()


def _pipe_or_close(*opened: int) -> tuple[int, int]:
    try:
        return os.pipe()
    except OSError:
        for fd in opened:
            os.close(fd)
        raise


#: The most a job pipe is grown to (Linux's /proc/sys/fs/pipe-max-size for an unprivileged process, by default),
#: so that a run's job (27 kB for the cat sentence, 136 kB for the grammar's, 0.7 MB for 60 tokens and 8 heads)
#: is handed whole while the drawer still imports.
_PIPE_MAX = 1 << 20


def _send(fd: int, data: bytes, wait: bool) -> bytes:
    """Write ``data`` into the job pipe ``fd`` and close it; with ``wait=False``, write what the pipe takes now
    (grown to fit first, where the system allows) and return the rest, leaving it open. A child that is gone
    takes nothing: its job is then done here (its answer is empty)."""
    rest = memoryview(data)  # each write takes what the pipe holds; slicing bytes would copy the rest each time
    try:
        if not wait:
            try:
                import fcntl

                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(max(len(data), 1 << 16), _PIPE_MAX))
            except (ImportError, AttributeError, OSError):  # no F_SETPIPE_SZ, or a lower limit: the rest waits
                pass
        os.set_blocking(fd, wait)
        while rest:
            rest = rest[os.write(fd, rest):]
    except BlockingIOError:
        return bytes(rest)
    except OSError:  # the child is gone: _collect finds nothing and the job runs here
        pass
    os.close(fd)  # end of the job: the child reads to here
    return b""


def _serve(pipes: list[tuple[int, int, int, int]], warm: Sequence[str]) -> None:
    """The first drawer's whole life: leave the terminal and the parent's handlers, import, fork the other
    drawers, do its own job, answer, and reap them."""
    code, others = 0, []
    try:
        os.setsid()  # its own session: Ctrl-C and SIGHUP go to the parent, which ends this process
        for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE"):  # the parent's handlers would remove its files
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)  # never a line on the parent's streams, never holding its pipes open
        if devnull > 2:
            os.close(devnull)
        sys.stdin = sys.stdout = sys.stderr = open(os.devnull, "r+", encoding="utf-8")  # and Python's own
        # Only its own ends stay open: EOF reaches a drawer when its parent goes, and no drawer holds another's
        # pipe (a drawer forked later would keep an earlier one's job pipe open, which would wait for it forever).
        _close_all_but({sys.stdin.fileno(), *(fd for job_read, _, _, result_write in pipes
                                              for fd in (job_read, result_write))})
        for module in warm:
            importlib.import_module(module)
        first = os.getpid()
        for n in range(1, len(pipes)):
            pid = _fork_sibling(pipes, n, first)
            if pid > 0:
                others.append(pid)
            os.close(pipes[n][0])  # the sibling's ends; a sibling not forked leaves its job to the parent
            os.close(pipes[n][3])
        _work(pipes[0][0], pipes[0][3])
    except BaseException:  # noqa: BLE001 - the parent does the job itself
        code = 1
    finally:
        try:
            for pid in others:  # its answer's pipe is closed: the parent reads theirs meanwhile
                os.waitpid(pid, 0)
        finally:
            os._exit(code)  # never back into the parent's code, its atexit handlers or its buffers


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor above 2 but ``keep`` (Linux closes a range with one call)."""
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _fork_sibling(pipes: list[tuple[int, int, int, int]], n: int, first: int) -> int:
    """In the first drawer: fork drawer ``n`` (it shares the modules imported) and return its pid, or -1 when no
    process is to be had. The sibling holds its own two ends only and dies with the first drawer."""
    try:
        pid = os.fork()
    except OSError:
        return -1
    if pid > 0:
        return pid
    code = 0
    try:
        for m, (job_read, _, _, result_write) in enumerate(pipes):
            if m == 0 or m > n:  # the first drawer's and the later siblings' (the earlier ones': closed already)
                os.close(job_read)
                os.close(result_write)
        _die_with(first)
        os.setsid()  # a session of its own, as the first has (Linux gives each session its share of the cores)
        _work(pipes[n][0], pipes[n][3])
    except BaseException:  # noqa: BLE001 - the parent does the job itself
        code = 1
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` (the first drawer) ends: the parent of the run kills that one on
    every way out, and a signal it passes on ends that one too (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    pr_set_pdeathsig = 1
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # it ended before the line above
        raise ProcessLookupError(parent)


def _work(job_read: int, result_write: int) -> None:
    """Read one job to its end, do it and write its answer (nothing to do when the parent ended first)."""
    try:
        chunks = []
        while chunk := os.read(job_read, 1 << 20):
            chunks.append(chunk)
        if chunks:
            function, args = pickle.loads(b"".join(chunks))  # the parent's own objects, through its pipe
            answer = memoryview(pickle.dumps(("ok", function(*args)), protocol=pickle.HIGHEST_PROTOCOL))
            while answer:
                answer = answer[os.write(result_write, answer):]
    finally:  # the parent reads to here, however the job ended, before the first drawer waits for its siblings
        os.close(job_read)
        os.close(result_write)


__all__ = ["DRAWERS", "Ahead", "Job", "close_early", "start_early", "started", "worth_it"]

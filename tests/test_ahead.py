"""mhacli.io.ahead: the forked drawers of ``mha train``'s and ``mha explain``'s figures.

Each job is done once, in order, by its child or (where the child cannot) here, with the same result; a child
never prints, never outlives its parent's run, and a signal to the parent ends them too. The first drawer
imports, then forks the others: they share its modules and die with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mhacli.io import ahead, cleanup
from mhacli.io.ahead import Ahead

MHA = Path(sys.executable).with_name("mha")
PARENT = os.getpid()


def doubled(x: int) -> tuple[int, int]:
    """A job: who did it, and its answer."""
    return os.getpid(), 2 * x


def loud(x: int) -> int:
    print("a child's line on stdout")
    print("a child's line on stderr", file=sys.stderr)
    return x


def measured(data: bytes) -> tuple[bool, int, int]:
    """A job: whether a child did it, and the size and byte sum of what it was handed."""
    return os.getpid() != PARENT, len(data), sum(data)


def fails_in_a_child(parent: int) -> str:
    if os.getpid() != parent:
        raise RuntimeError("a drawer's error")
    return "done here"


def imported(name: str) -> tuple[int, int, bool]:
    """A job: who did it, who forked that process, and whether it holds the module ``name``."""
    return os.getpid(), os.getppid(), name in sys.modules


def gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # reaped: not our child any more
    return False


def _state(pid: int) -> str | None:
    """A process's state letter (Z: dead, waiting to be reaped), None when there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def ended(pid: int) -> bool:
    """Whether ``pid`` ends (or is dead already): a drawer the first one forked is SIGKILLed as that one dies,
    and its parent is then init, which reaps it in its own time. Waits for it, at most a minute."""
    for _ in range(6000):
        if _state(pid) in (None, "Z"):
            return True
        time.sleep(0.01)
    return False


def _sibling_of(first: int) -> int:
    """The drawer the first one forked, once it has (it imports its modules first)."""
    for _ in range(6000):
        found = _children_of(first)
        if found:
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"drawer {first} forked no sibling in a minute")


def test_each_job_is_done_by_its_own_child_in_order_and_every_child_is_reaped():
    with Ahead.start(2, [], check=False) as drawers:  # type: ignore[union-attr]
        first = drawers._children[0].pid
        results = list(drawers.run([(doubled, (1,)), (doubled, (2,)), (doubled, (3,))]))
    assert [answer for _, answer in results] == [2, 4, 6]
    who = [pid for pid, _ in results]
    assert who[0] == first and who[1] not in (first, os.getpid()) and who[2] == os.getpid()  # the third: here
    assert gone(first) and first not in cleanup._children
    assert _state(who[1]) is None  # reaped by the first drawer before it ended


def test_the_first_drawer_imports_once_and_forks_the_others_which_share_its_modules():
    assert "mailbox" not in sys.modules  # imported by the drawers only
    with Ahead.start(3, ["mailbox"], check=False) as drawers:  # type: ignore[union-attr]
        first = drawers._children[0].pid
        results = list(drawers.run([(imported, ("mailbox",))] * 3))
    assert results[0] == (first, os.getpid(), True)
    assert [(parent, held) for _, parent, held in results[1:]] == [(first, True), (first, True)]
    assert len({pid for pid, _, _ in results}) == 3 and "mailbox" not in sys.modules


def test_closing_after_a_run_closes_only_what_is_still_open_and_signals_no_reaped_pid(tmp_path, monkeypatch):
    """run() has closed the job pipes and reaped the children: a file opened since may hold one of those
    descriptor numbers, and close() must leave it open (and never kill a pid that may be another process's)."""
    opened = set(os.listdir("/proc/self/fd"))
    drawers = Ahead.start(2, [], check=False)
    assert drawers is not None
    assert [answer for _, answer in drawers.run([(doubled, (1,)), (doubled, (2,))])] == [2, 4]
    mine = [os.open(tmp_path / f"f{k}", os.O_CREAT | os.O_RDWR) for k in range(4)]  # the lowest free numbers
    killed: list[int] = []
    monkeypatch.setattr(ahead.os, "kill", lambda pid, sig: killed.append(pid))
    drawers.close()
    for fd in mine:
        os.fstat(fd)  # still open: close() did not close a number it had closed before
        os.close(fd)
    assert killed == [] and set(os.listdir("/proc/self/fd")) == opened


def test_a_child_never_writes_on_the_parent_s_streams(capfd):
    with Ahead.start(1, [], check=False) as drawers:  # type: ignore[union-attr]
        assert list(drawers.run([(loud, (7,))])) == [7]
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_a_job_that_fails_in_its_child_is_done_here_instead():
    with Ahead.start(1, [], check=False) as drawers:  # type: ignore[union-attr]
        assert list(drawers.run([(fails_in_a_child, (os.getpid(),))])) == ["done here"]


def test_a_drawer_that_died_before_its_job_leaves_only_its_job_to_the_parent():
    with Ahead.start(2, [], check=False) as drawers:  # type: ignore[union-attr]
        first = drawers._children[0].pid
        os.kill(_sibling_of(first), signal.SIGKILL)
        results = list(drawers.run([(doubled, (5,)), (doubled, (6,))]))
    assert results == [(first, 10), (os.getpid(), 12)]


def test_the_first_drawer_dying_takes_the_others_with_it_and_the_parent_does_every_job():
    with Ahead.start(2, [], check=False) as drawers:  # type: ignore[union-attr]
        first = drawers._children[0].pid
        sibling = _sibling_of(first)
        os.kill(first, signal.SIGKILL)
        assert ended(sibling)  # SIGKILLed as the first died (PR_SET_PDEATHSIG)
        results = list(drawers.run([(doubled, (5,)), (doubled, (6,))]))
    assert results == [(os.getpid(), 10), (os.getpid(), 12)]


def test_a_child_without_a_job_is_killed_and_reaped_when_the_run_ends():
    drawers = Ahead.start(2, ["json"], check=False)
    assert drawers is not None
    first = drawers._children[0].pid
    sibling = _sibling_of(first)
    drawers.close()
    assert gone(first) and drawers._children == [] and ended(sibling)


def test_a_job_larger_than_a_pipe_is_handed_without_waiting_for_a_drawer_still_importing(tmp_path, monkeypatch):
    """hand() returns while the drawer still imports (here: a module that waits for a file), whatever the job's
    size; run() writes what the pipe could not take, and the answer is whole."""
    gate = tmp_path / "go"
    (tmp_path / "importing_until_told.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.01)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with Ahead.start(1, ["importing_until_told"], check=False) as drawers:  # type: ignore[union-attr]
        big = bytes(range(256)) * 8192  # 2 MB: more than a pipe holds, even grown
        drawers.hand([(measured, (big,))])
        assert drawers._children[0].unsent  # the rest is kept for run()
        gate.touch()
        assert list(drawers.run()) == [(True, len(big), sum(big))]  # done by the drawer, whole


def test_handing_a_job_copies_none_of_it():
    """hand() writes without waiting, and while a drawer reads, each write takes only what the pipe holds: the
    rest was sliced off as new bytes every time, so a long text's run (about 330 MB for 2,000 tokens) was copied
    hundreds of times over: 98 s with the drawers against 6.3 s without. Counted, not timed: what Python
    allocates while 32 MB go out 64 kB a write."""
    import tracemalloc

    read_end, write_end = os.pipe()
    data, taken = bytes(32 << 20), []
    real_write = ahead.os.write

    def partial(fd: int, chunk) -> int:  # a drawer reading as fast as the command writes
        taken.append(min(len(chunk), 1 << 16))
        return taken[-1]

    tracemalloc.start()
    ahead.os.write = partial  # only around the call: pytest writes through os.write too
    try:
        rest = ahead._send(write_end, data, wait=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        ahead.os.write = real_write
        tracemalloc.stop()
        os.close(read_end)
    assert rest == b"" and sum(taken) == len(data) and len(taken) == 512  # whole, 64 kB a write, pipe closed
    assert peak < 1 << 20, peak  # slicing bytes allocated the rest again at each write: 32 MB and more


def test_a_run_too_big_for_the_drawers_is_drawn_here_and_ends_them(tmp_path, monkeypatch):
    """Each drawer gets a pickled copy of the whole run, while the figures are cut to their window: beyond
    DRAWERS_MAX_BYTES the drawers are ended and the figures drawn here, the same files."""
    import importlib

    from mhacli.pipeline import prepare, shown

    saving = importlib.import_module("mhacli.render.figures.save")  # the module, not the package's save()
    run = shown(prepare("the cat sat on the mat", heads=2, d_model=8, seed=3).run(single=True))
    arrays = saving._array_bytes(run.trace) + saving._array_bytes(run.single)
    assert arrays > run.trace.weights.nbytes and saving._array_bytes(None) == 0
    monkeypatch.setattr(saving, "DRAWERS_MAX_BYTES", arrays)
    assert saving.for_the_drawers(run)
    monkeypatch.setattr(saving, "DRAWERS_MAX_BYTES", arrays - 1)
    assert not saving.for_the_drawers(run)
    here = saving.save_figures(run, tmp_path / "here", dpi=30)
    for handed_first in (True, False):  # mha explain hands the figures early; the API hands them at the save
        with Ahead.start(2, [], check=False) as drawers:  # type: ignore[union-attr]
            pids = [child.pid for child in drawers._children if child.pid > 0]
            if handed_first:
                saving.hand_figures(drawers, run, "png", 30)
            out = tmp_path / f"big-{handed_first}"
            saved = saving.save_figures(run, out, dpi=30, ahead=drawers)
            assert drawers._children == [] and all(gone(pid) for pid in pids)  # ended, not left waiting
        assert [p.name for p in saved] == [p.name for p in here]
        assert all(p.read_bytes() == q.read_bytes() for p, q in zip(saved, here))


def test_a_module_a_child_cannot_import_only_costs_it_its_job():
    with Ahead.start(1, ["no_such_module_anywhere"], check=False) as drawers:  # type: ignore[union-attr]
        assert list(drawers.run([(doubled, (4,))])) == [(os.getpid(), 8)]


def test_a_machine_that_gives_no_process_gets_its_figures_drawn_here(monkeypatch):
    """fork() refused (ulimit -u): no drawer and no pipe left open; after one drawer, the rest is drawn here."""
    opened = set(os.listdir("/proc/self/fd"))

    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(ahead.os, "fork", refused)
    assert Ahead.start(2, [], check=False) is None
    assert set(os.listdir("/proc/self/fd")) == opened
    monkeypatch.undo()
    real, calls = os.fork, []

    def once() -> int:
        calls.append(1)
        return real() if len(calls) == 1 else refused()

    monkeypatch.setattr(ahead.os, "fork", once)
    with Ahead.start(2, [], check=False) as drawers:  # type: ignore[union-attr]
        results = list(drawers.run([(doubled, (1,)), (doubled, (2,))]))  # the first drawer could fork no other
    assert results[0][0] != os.getpid() and results[1] == (os.getpid(), 4)


@pytest.mark.parametrize(("asked", "forks"), [("0", False), ("1", True)])
def test_mha_drawers_says_whether_to_fork_whatever_the_load(monkeypatch, asked, forks):
    monkeypatch.setattr(ahead.threading, "active_count", lambda: 1)
    monkeypatch.setattr(ahead.sys, "platform", "linux")
    monkeypatch.setenv("MHA_DRAWERS", asked)
    assert ahead.worth_it() is forks
    monkeypatch.setattr(ahead.threading, "active_count", lambda: 2)
    assert ahead.worth_it() is False  # never beside another thread: fork would copy it half-way


def test_without_being_asked_the_drawers_fork_wherever_a_second_core_is_whatever_the_load(monkeypatch):
    """A busy machine is where they pay most (docs/performance.md), and the load average of the last minute
    counts the user's own commands that have ended: it is never read."""
    monkeypatch.setattr(ahead.threading, "active_count", lambda: 1)
    monkeypatch.setattr(ahead.sys, "platform", "linux")
    monkeypatch.delenv("MHA_DRAWERS", raising=False)

    def unread():
        raise AssertionError("the load average was read")

    monkeypatch.setattr(ahead.os, "getloadavg", unread)
    monkeypatch.setattr(ahead, "cpu_count", lambda: 2)
    assert ahead.worth_it()
    monkeypatch.setattr(ahead, "cpu_count", lambda: 1)  # one core (or an affinity mask of one): nothing to gain
    assert not ahead.worth_it()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "100", **extra}


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="the drawers fork on Linux only")
def test_mha_train_s_figures_from_the_drawers_are_the_bytes_drawn_in_one_process(tmp_path):
    """The installed mha, its drawers forced on and off: the same PNG files, byte for byte, said in the same
    order (the table's training seconds differ from run to run, so the rest of stdout is not compared)."""
    runs = {}
    for asked in ("1", "0"):
        out = tmp_path / f"drawers-{asked}"
        done = subprocess.run([str(MHA), "train", "--steps", "60", "--out", str(out)], capture_output=True, text=True,
                              env=_env(MHA_DRAWERS=asked, COLUMNS="400"),  # a long path on one line
                              stdin=subprocess.DEVNULL, timeout=300)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
        files = {p.name: p.read_bytes() for p in out.iterdir()}
        runs[asked] = ([line.replace(str(out), "OUT") for line in wrote], files)
    assert runs["1"][0] == runs["0"][0] == ["wrote OUT/training.png", "wrote OUT/training-heads.png"]
    assert sorted(runs["1"][1]) == ["training-heads.png", "training.png"] and runs["1"][1] == runs["0"][1]


@pytest.mark.skipif(sys.platform != "linux", reason="the drawers fork on Linux only")
def test_sigterm_while_the_drawers_wait_ends_them_with_the_run(tmp_path):
    """Paused while --save writes (training done, both drawers ready): SIGTERM ends the run, both drawers and
    every file, with the one line a signal gets."""
    from pause import paused

    argv = [str(MHA), "train", "--steps", "60", "--save", "model.npz", "--out", "figs"]
    with paused(argv, cwd=tmp_path, env=_env(MHA_DRAWERS="1"), name="model.npz", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, _):
        drawers = _children_of(proc.pid)
        assert len(drawers) == 1, drawers
        drawers.append(_sibling_of(drawers[0]))  # ready: training is done
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate()
    assert proc.returncode == 143 and len(err.strip().splitlines()) == 1 and "nothing half-written" in err, err
    assert not Path(f"/proc/{drawers[0]}").exists() and ended(drawers[1])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".pause") == []


_EXPLAINED = ["head-1", "head-2", "heads", "magnifiers", "split"]


@pytest.mark.skipif(sys.platform != "linux", reason="the drawers fork on Linux only")
@pytest.mark.parametrize(("argv", "fmt", "names"), [
    (["explain", "the cat sat on the mat", "--format", "svg"], "svg", _EXPLAINED),
    (["demo", "--no-pause", "--dpi", "30"], "png", [*_EXPLAINED, "one-vs-many"]),  # drawn while the lesson shows
    (["compare", "the cat sat on the mat", "--dpi", "30"], "png", ["single-vs-multi"]),  # while its grids print
])
def test_the_figures_from_the_drawers_are_the_bytes_drawn_in_one_process(tmp_path, argv, fmt, names):
    """The installed mha, drawers forced on and off: every file byte for byte, and the same stdout."""
    runs = {}
    for asked in ("1", "0"):
        out = tmp_path / f"drawers-{asked}"
        done = subprocess.run([str(MHA), *argv, "--heads", "2", "--out", str(out)],
                              capture_output=True, text=True, env=_env(MHA_DRAWERS=asked), stdin=subprocess.DEVNULL,
                              timeout=300)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        runs[asked] = (done.stdout.replace(str(out), "OUT"), {p.name: p.read_bytes() for p in out.iterdir()})
    assert runs["1"][0] == runs["0"][0]
    assert sorted(runs["1"][1]) == sorted(f"{n}.{fmt}" for n in names)
    assert runs["1"][1] == runs["0"][1]


@pytest.mark.skipif(sys.platform != "linux", reason="the drawers fork on Linux only")
def test_ctrl_c_while_explain_writes_what_its_drawers_drew_ends_them_and_leaves_no_temporary(tmp_path):
    from pause import paused

    argv = [str(MHA), "explain", "the cat sat on the mat", "--out", "figs"]
    with paused(argv, cwd=tmp_path, env=_env(MHA_DRAWERS="1"), name="heads.png", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, _):
        drawers = _children_of(proc.pid)
        assert len(drawers) == 1, drawers  # the first drawer, reaped once every figure is written
        drawers += _children_of(drawers[0])  # its sibling (heads and split), if it has not ended yet
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
    assert proc.returncode == 130 and len(err.strip().splitlines()) == 1 and "nothing half-written" in err, err
    assert not Path(f"/proc/{drawers[0]}").exists() and all(ended(pid) for pid in drawers[1:])
    written = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert written == ["head-1.png", "head-2.png", "head-3.png", "head-4.png"]  # whole files, in order; no temporary


@pytest.mark.skipif(sys.platform != "linux", reason="the drawers fork on Linux only")
def test_a_drawer_forked_later_holds_no_end_of_an_earlier_drawers_pipes():
    """mha demo forks one-vs-many's drawer after the figures' drawers. A later drawer that kept a copy of an earlier
    one's job pipe would keep that drawer waiting for its job's end, while it waits itself to hand its answer (1 MB,
    more than a pipe holds) to the command, which waits for the first: the command never ended."""
    code = ("from mhacli.io.ahead import Ahead\n"
            "first = Ahead.start(1, (), check=False)\n"
            "second = Ahead.start(1, (), check=False)\n"
            "second.hand([(bytes, (1 << 20,))])\n"
            "print(list(first.run([(abs, (-3,))])), [len(b) for b in second.run()])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.stdout.split() == ["[3]", "[1048576]"], done.stderr

"""The drawers forked at the script's start (mhacli/__main__.py, :func:`mhacli.io.ahead.start_early`): only for a
command that will draw, taken by that command, closed when it did not take them, and gone when mha exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhacli.cli.commands import train as train_command
from mhacli.io import ahead
from mhacli.render.figures.save import HALVES

MHA = Path(sys.executable).with_name("mha")


class FakeAhead:
    """What :meth:`Ahead.start` returns, recording the drawers asked for and whether they were closed."""

    def __init__(self, count: int, warm: tuple[str, ...]) -> None:
        self.count, self.warm, self.closed = count, warm, False

    def close(self) -> None:
        self.closed = True


@pytest.fixture()
def forks(monkeypatch):
    """Every :meth:`Ahead.start` call, answered by a :class:`FakeAhead`; no drawer is left over for another test."""
    made: list[FakeAhead] = []

    def start(count, warm, check=True):
        made.append(FakeAhead(count, warm))
        return made[-1]

    monkeypatch.setattr(ahead.Ahead, "start", staticmethod(start))
    monkeypatch.setattr(ahead, "_early", {})
    yield made
    ahead.close_early()


def test_each_command_has_a_drawer_per_part_of_its_figures():
    # A count below the parts would leave a part to the command; above, a drawer without a job.
    assert ahead.DRAWERS["explain"][0] == len(HALVES)
    assert ahead.DRAWERS["demo"] == ahead.DRAWERS["explain"]  # the lesson's figures are explain's
    assert ahead.DRAWERS["one-vs-many"][0] == 1  # and its last slide, one more
    assert ahead.DRAWERS["compare"][0] == 1  # single-vs-multi alone
    assert ahead.DRAWERS["train"][0] == len(train_command._PARTS)


@pytest.mark.parametrize(("argv", "command"), [
    (["explain", "the cat sat"], "explain"),
    (["--debug", "explain", "the cat sat", "--out", "figs"], "explain"),
    (["train", "--heads", "2"], "train"),
    (["explain", "the cat sat", "--no-plots"], None),
    (["explain", "--help"], None),
    (["train", "-h"], None),
    (["show", "cat.npz"], None),
    (["compare", "the cat sat"], "compare"),
    (["compare", "the cat sat", "--no-plots"], None),
    (["demo", "--no-pause", "--out", "figs"], "demo"),
    (["demo", "--out=figs"], "demo"),
    (["demo", "-o", "figs", "--sample", "pronoun"], "demo"),
    (["demo", "--no-pause"], None),  # a lesson without --out draws nothing
    (["one-vs-many", "--out", "figs"], None),  # the demo's own drawer, not a command
    (["--version"], None),
    ([], None),
])
def test_only_a_command_that_will_draw_gets_drawers_at_the_start(forks, argv, command):
    ahead.start_early(argv)
    if command is None:
        assert forks == [] and ahead._early == {}
    else:
        assert [(f.count, f.warm) for f in forks] == [ahead.DRAWERS[command]]
        assert ahead._early == {command: forks[0]}


def test_the_command_takes_its_early_drawers_instead_of_forking_again(forks):
    ahead.start_early(["explain", "the cat sat"])
    with ahead.started("explain") as taken:
        assert taken is forks[0] and len(forks) == 1 and ahead._early == {}
    assert forks[0].closed  # closed however the block ends, as drawers forked in the command are


def test_early_drawers_a_run_does_not_want_are_closed_at_once(forks):
    ahead.start_early(["train"])
    with ahead.started("train", wanted=False) as taken:
        assert taken is None and forks[0].closed and len(forks) == 1


def test_early_drawers_no_command_took_are_closed_at_the_end(forks):
    ahead.start_early(["explain", "the cat sat"])
    ahead.close_early()
    assert forks[0].closed and ahead._early == {}


def test_without_early_drawers_the_command_forks_its_own(forks):
    with ahead.started("train") as taken:
        assert taken is forks[0] and (forks[0].count, forks[0].warm) == ahead.DRAWERS["train"]


@pytest.mark.skipif(sys.platform != "linux", reason="the drawers fork on Linux only")
def test_a_refused_explain_ends_the_drawers_forked_for_it(tmp_path):
    """``mha explain`` forks its drawers before its options are read; refused (exit 2), it leaves no drawer: they
    carry the command line they were forked with, so a process still holding the folder's name would be one."""
    out = tmp_path / "early-drawers-out"
    done = subprocess.run([str(MHA), "explain", "--worked", "the cat", "--out", str(out)], capture_output=True,
                          text=True, env={**os.environ, "MHA_DRAWERS": "1"}, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("mha: error: --worked brings its own three tokens")
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert left.stdout == "", f"drawers left running: {left.stdout}"
    assert not out.exists()


def test_preparing_the_process_again_changes_nothing(monkeypatch, tmp_path):
    """The script's entry prepares the process before its drawers, and each run does again: one noise filter on
    unraisable exceptions, the same handlers, the same matplotlib folder."""
    import signal

    from mhacli.io.environment import prepare_process

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path))
    try:
        prepare_process()
        hook, installed = sys.unraisablehook, {s: signal.getsignal(s) for s in handlers}
        prepare_process()
        assert sys.unraisablehook is hook and hook is not sys.__unraisablehook__
        assert {s: signal.getsignal(s) for s in handlers} == installed
        assert os.environ["MPLCONFIGDIR"] == str(tmp_path)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def _calls(names: set[str], package: Path | None = None) -> dict[str, set[str]]:
    """Which of ``names`` each module of mhacli (or ``package``) calls (``f(...)`` or ``x.f(...)``), by path."""
    import ast

    package = package or Path(ahead.__file__).resolve().parents[1]
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in names:
                    found.setdefault(str(path.relative_to(package)), set()).add(name)
    return found


def test_only_the_mha_script_s_commands_fork(tmp_path):
    """A fork is safe only before matplotlib and threads: a notebook's kernel, mhacli.run and the figure API never
    reach one. The script's entry forks the early drawers; the commands of cli/ take or fork theirs; io/ahead.py
    alone calls os.fork."""
    forking = _calls({"start_early", "started", "fork"})
    assert {path for path, names in forking.items() if "start_early" in names} == {"__main__.py"}
    assert all(path.startswith("cli/") or path == "io/ahead.py" for path, names in forking.items()
               if "started" in names), forking
    assert {path for path, names in forking.items() if "fork" in names} == {"io/ahead.py"}
    # The check bites: a renderer planted with a call to started() is found.
    (tmp_path / "render").mkdir()
    (tmp_path / "render" / "sneaky.py").write_text("from mhacli.io.ahead import started\n\n\n"
                                                   "def f():\n    with started('explain') as a:\n        return a\n")
    assert _calls({"started"}, tmp_path) == {"render/sneaky.py": {"started"}}


# A signal while the command's modules load: after the script's entry installed mha's handlers, before the command's
# own exit path (MhaGroup.main) exists. An import hook sends it exactly there, as mhacli.cli.app is looked up.
SIGNAL_AT_IMPORT = """
import os, signal, sys

class SignalAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == "mhacli.cli.app":
            os.kill(os.getpid(), signal.{name})
        return None

sys.meta_path.insert(0, SignalAtImport())
sys.argv = ["mha", "explain", "the cat sat on the mat", "--out", "figs"]
from mhacli.__main__ import main
main()
"""


@pytest.mark.parametrize(("name", "code", "said"), [("SIGTERM", 143, "terminated (SIGTERM)"),
                                                    ("SIGINT", 130, "interrupted (Ctrl-C)")])
def test_a_signal_while_the_command_loads_is_one_line_and_its_exit_code(tmp_path, name, code, said):
    """It was a traceback ending in 'Terminated' (seen at 0.06 s after the start of a real mha explain)."""
    from pause import default_sigint

    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT_IMPORT.replace("{name}", name)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, preexec_fn=default_sigint,
                          env={**os.environ, "MHA_DRAWERS": "1"})  # drawers forked at the start: ended too
    assert proc.returncode == code and proc.stdout == "", proc.stderr
    assert proc.stderr == f"mha: error: {said}; nothing half-written was left behind.\n"
    assert list(tmp_path.iterdir()) == []

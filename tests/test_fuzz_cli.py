"""Every command, every option, nasty values: the answer is a run or one clear line, never a crash.

The commands and their options are read from the app itself, so a command or
option added later is fuzzed too without touching this file.  Hypothesis builds
command lines from them with values chosen to hurt (zero, negative, huge,
non-numeric, empty, escape sequences, emoji, folders, devices, foreign files).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from mhacli.cli.app import app

GROUP = get_command(app)
# bench times real work for as long as it is asked to (a valid --max-tokens 99 --repeats 100 takes
# minutes): its refusals are rows of docs/errors.md and its runs have tests/test_bench.py.
COMMANDS = sorted(set(GROUP.commands) - {"bench"})
# Commands that may legitimately end with 1: a check that fails, not a usage error.
MAY_FAIL = {"verify"}
# Options that are expensive to honour and are fuzzed elsewhere: kept off here.
SLOW = {"--plots", "--pause"}
# Defaults that are expensive to honour, set cheap first on every line of the command; a drawn value of
# the same option comes later and wins (click keeps the last), so every option and value is still fuzzed.
# train's default 1,500 steps took 2 s per run, more than half of this file's time; 2 steps take 0.1 s.
CHEAP = {"train": ["--steps", "2"]}

NASTY = ["0", "-1", "1", "2", "3", "4", "8", "16", "99", "10000000", "1" * 40, "2.5", "1e3", "abc", "",
         " ", "-", "--", "\x1b[31m", "\x1b]0;t\x07", "😀", "日本", "the", "cat", "[bold]x", "png", "pdf",
         "jpg", "word", "char", "random", "designed", "float32", "cat", "repeated", "notes.txt", "folder",
         "folder/", "/dev/null", "missing.npz", "trace.npz", "other.npz", "blob.bin", "out/x.npz", "x" * 300]


@pytest.fixture(autouse=True)
def _fixtures(tmp_path, monkeypatch):
    """A folder holding the files NASTY names, as cwd."""
    from mhacli.attention.config import Config
    from mhacli.attention.trace import run_tokens
    from mhacli.io.export import save_npz

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the cat sat on the mat")
    (tmp_path / "folder").mkdir()
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    save_npz(run_tokens(["the", "cat", "sat"], Config()), tmp_path / "trace.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(2))


def _params(command: str) -> tuple[list, list]:
    params = GROUP.commands[command].params
    options = [p for p in params if p.param_type_name == "option" and p.opts[0] not in SLOW
               and p.opts[0] != "--help"]
    arguments = [p for p in params if p.param_type_name == "argument"]
    return options, arguments


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(COMMANDS))
    options, arguments = _params(command)
    argv = [command]
    if "--no-plots" in [o for p in GROUP.commands[command].params for o in p.secondary_opts]:
        argv.append("--no-plots")
    if "--no-pause" in [o for p in GROUP.commands[command].params for o in p.secondary_opts]:
        argv.append("--no-pause")
    argv += CHEAP.get(command, [])
    for param in draw(st.lists(st.sampled_from(options), max_size=4)) if options else []:
        if getattr(param, "is_flag", False):
            flags = list(param.opts) + list(param.secondary_opts)
            argv.append(draw(st.sampled_from(flags)))
        else:
            argv += [draw(st.sampled_from(param.opts)), draw(st.sampled_from(NASTY))]
    for _ in arguments:
        if draw(st.booleans()):
            argv.append(draw(st.sampled_from(NASTY)))
    if draw(st.integers(0, 9)) == 0:
        argv.append(draw(st.sampled_from(NASTY)))  # one word too many
    return argv


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
@pytest.mark.slow
def test_any_command_line_runs_or_says_one_line(argv):
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    allowed = {0, 2} | ({1} if argv[0] in MAY_FAIL else set())
    assert result.exit_code in allowed, (argv, result.exit_code, result.stderr)
    assert "Traceback" not in result.output
    assert "unexpected" not in result.stderr or "unexpected extra" in result.stderr, result.stderr
    if result.exit_code != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith("mha: error: ")]
        assert len(errors) == 1, (argv, result.stderr)
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert not any(Path(".").glob("**/.*.tmp")), "a temporary file was left behind"


WITH_FIGURES = [c for c in COMMANDS
                if "--plots" in [o for p in GROUP.commands[c].params for o in p.opts] and c != "show"]
FIGURE_TEXT = st.lists(st.sampled_from(["$x^2$", "\\frac", "_", "^", "%s", "{}", "😀", "👨\u200d👩\u200d👧", "日本",
                                         "שלום", "\x1b[31m", "\u202e", "e\u0301", "x" * 80, "the", "[b]"]),
                       min_size=1, max_size=8).map(" ".join)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(WITH_FIGURES), text=FIGURE_TEXT, fmt=st.sampled_from(["png", "svg", "pdf"]),
       causal=st.booleans())
@pytest.mark.slow
def test_figures_of_any_text_are_written_or_refused_in_one_line(command, text, fmt, causal):
    argv = [command, text]
    argv += ["--format", fmt, "--dpi", "30", "--out", "figs", "--causal" if causal else "--no-causal"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code in (0, 2), (argv, result.stderr)
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        written = sorted(Path("figs").glob(f"*.{fmt}"))
        assert written and all(p.stat().st_size > 0 for p in written)
    else:
        assert len([line for line in result.stderr.splitlines() if line.startswith("mha: error: ")]) == 1
    assert not any(Path(".").glob("**/.*.tmp"))

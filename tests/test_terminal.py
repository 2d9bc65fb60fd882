"""Terminals: NO_COLOR, pipes, TERM=dumb, 40 columns, a closed pipe: through the installed ``mha``.

These run the real console script in a subprocess (and under a pseudo-terminal
where colour detection matters), because Rich decides about colour from the real
file descriptors and the environment when the process starts.  What a command
prints at a width, and the token ids it shows, runs in-process through Typer's
CliRunner (:func:`_in_process`): every command sizes its consoles from the
COLUMNS it runs with (``mhacli.cli.output.reset``), so a process adds nothing.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from rich.cells import cell_len

MHA = Path(sys.executable).with_name("mha")
SENTENCE = "The animal didn't cross the street because it was too tired"
CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
OSC = re.compile(r"\x1b\][^\x07\x1b]*(\x07|\x1b\\)")
# SGR parameters that set a colour: 30-38/40-48 (and 38;5 / 48;5 / 38;2), 90-97, 100-107.
COLOUR_PARAM = re.compile(r"^(3[0-8]|4[0-8]|9[0-7]|10[0-7])$")

pytestmark = pytest.mark.skipif(not MHA.exists(), reason="the mha console script is not installed")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM", "CLICOLOR_FORCE")}
    env.update(extra)
    return env


def _piped(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MHA), *args], capture_output=True, text=True, cwd=cwd, env=_env(**extra),
                          timeout=300)


def _in_process(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """``args`` through Typer's CliRunner in ``cwd``, with the environment :func:`_piped` gives the script
    (the terminal variables removed, then ``extra``); stdout and stderr apart, as a pipe keeps them."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    env: dict[str, str | None] = {k: None for k in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM",
                                                      "CLICOLOR_FORCE")}
    env.update(extra)
    here = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, args, env=env)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _in_pty(args: list[str], cwd: Path, columns: int = 80, **extra: str) -> tuple[int, str]:
    """Run ``mha`` on a pseudo-terminal of ``columns`` columns; return its exit code and screen bytes."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    p = subprocess.Popen([str(MHA), *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                         env=_env(**extra), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=300)
    os.close(master)
    return p.returncode, b"".join(chunks).decode("utf-8", "replace")


def _sgr_params(text: str) -> set[str]:
    params: set[str] = set()
    for seq in CSI.findall(text):
        if seq.endswith("m"):
            params.update(p for p in seq[2:-1].split(";") if p)
    return params


def _visible(text: str) -> str:
    return OSC.sub("", CSI.sub("", text))


@pytest.fixture()
def cwd(tmp_path):
    return tmp_path


COMMANDS = [
    ["explain", SENTENCE, "--no-plots"],
    ["explain", SENTENCE, "--no-plots", "--causal", "--show-values", "-d", "8", "-H", "2"],
    ["explain", "", "--no-plots"],  # an error
    ["--help"],
    ["explain", "--help"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:30])
@pytest.mark.slow
def test_no_escape_codes_when_piped(cwd, args):
    p = _piped(args, cwd, TERM="xterm-256color")
    assert p.returncode in (0, 2)
    assert "\x1b" not in p.stdout and "\x1b" not in p.stderr
    assert "Traceback" not in p.stderr


def test_colour_on_a_real_terminal_but_not_with_no_color(cwd):
    code, screen = _in_pty(["explain", SENTENCE, "--no-plots"], cwd, TERM="xterm-256color")
    assert code == 0
    assert any(COLOUR_PARAM.match(p) for p in _sgr_params(screen)), "a terminal should get colour"
    code, screen = _in_pty(["explain", SENTENCE, "--no-plots"], cwd, TERM="xterm-256color", NO_COLOR="1")
    assert code == 0
    colours = {p for p in _sgr_params(screen) if COLOUR_PARAM.match(p)}
    assert colours == set(), f"NO_COLOR must turn colour off, got SGR {sorted(colours)}"


# Colour and TERM on a real terminal: test_colour_on_a_real_terminal_but_not_with_no_color keeps the family in the
# default tier; the error line under NO_COLOR and TERM=dumb are the slow tier's (issue 46.5).
@pytest.mark.slow
def test_no_color_also_covers_errors_on_a_terminal(cwd):
    code, screen = _in_pty(["explain", "hi", "--heads", "0", "--no-plots"], cwd, TERM="xterm-256color",
                           NO_COLOR="1")
    assert code == 2
    assert not any(COLOUR_PARAM.match(p) for p in _sgr_params(screen))
    assert _visible(screen).strip() == "mha: error: --heads must be at least 1, got 0."


@pytest.mark.slow
def test_term_dumb_gets_plain_text(cwd):
    code, screen = _in_pty(["explain", SENTENCE, "--no-plots"], cwd, TERM="dumb")
    assert code == 0
    assert "\x1b" not in screen
    assert "Multi-head attention" in screen


@pytest.mark.parametrize("args", [
    ["explain", SENTENCE, "--no-plots"],
    ["explain", SENTENCE, "--no-plots", "--show-values", "-d", "8", "-H", "2"],
    ["explain", "x" * 300, "--no-plots"],
    ["explain", "--sample", "japanese", "--no-plots"],
    ["--help"],
    ["explain", "--help"],
    ["samples"],
    ["shapes"],
    ["quiz", "--sample", "cat", "--answers"],
    ["compare", "--sample", "cat", "--no-plots"],
    ["demo", "--sample", "cat", "--no-pause"],
], ids=lambda a: " ".join(a)[:30])
def test_forty_columns_when_piped(cwd, args):
    p = _in_process(args, cwd, COLUMNS="40")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout + p.stderr
    wide = [line for line in p.stdout.splitlines() if cell_len(line) > 40]
    assert wide == [], wide[:3]


def test_forty_columns_on_a_terminal(cwd):
    code, screen = _in_pty(["explain", SENTENCE, "--no-plots"], cwd, columns=40, TERM="xterm-256color")
    assert code == 0
    lines = _visible(screen).replace("\r\n", "\n").split("\n")
    assert max(cell_len(line) for line in lines) <= 40


# The error console takes COLUMNS as every console does (mhacli.cli.output.reset): in-process in the default tier,
# the installed script's run in the slow tier (issue 46.5).
@pytest.mark.parametrize("run", [_in_process, pytest.param(_piped, marks=pytest.mark.slow)],
                         ids=["in-process", "installed"])
def test_an_error_line_is_never_wrapped_even_at_forty_columns(cwd, run):
    p = run(["explain", "hi", "--d-model", "360", "--heads", "7", "--no-plots"], cwd, COLUMNS="40")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and len(p.stderr) > 40


# The reader gone mid-output: test_cli_conventions.py's closed stdout (every file still written) keeps the family in
# the default tier, this 2 MB JSON in the slow tier (issue 46.5).
@pytest.mark.slow
def test_json_to_a_closed_pipe_is_quiet(cwd):
    # 100 words print 2 MB of JSON, 30 pipe buffers: the reader is gone long before the last write
    # (300 words, 16 MB, took three times as long to compute and check the same thing).
    words = " ".join(f"w{i}" for i in range(100))
    p = subprocess.Popen([str(MHA), "explain", words, "--no-plots", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=_env())
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=300)
    assert err == "" and p.returncode == 0


def test_a_terminal_that_cannot_show_unicode_gets_escapes_not_a_crash(cwd):
    p = _piped(["explain", "café 😀 日本", "--no-plots"], cwd, PYTHONIOENCODING="ascii")
    assert p.returncode == 0, p.stderr
    assert "caf\\xe9" in p.stdout and "\\U0001f600" in p.stdout
    assert "Traceback" not in p.stderr and "UnicodeEncodeError" not in p.stderr


# --------------------------------------------------------------------------
# No word breaks at 40 columns: the walkthrough, the demo, compare, the quiz, samples
# --------------------------------------------------------------------------

WORD = re.compile(r"\w+")


def _rendered(parts: list, width: int) -> str:
    from io import StringIO

    from rich.console import Console

    console = Console(file=StringIO(), width=width, color_system=None, legacy_windows=False)
    for part in parts:
        console.print(part)
    return console.file.getvalue()


def _broken_words(parts: list, width: int = 40) -> list[str]:
    """Pieces of words at ``width`` that the same renderables never show whole on an endless line."""
    from collections import Counter

    narrow = _rendered(parts, width)
    assert max(cell_len(line) for line in narrow.splitlines()) <= width
    wide = _rendered(parts, 2000)
    whole = set(WORD.findall(wide))

    def ink(text: str) -> Counter[str]:  # marks a squeezed column or a cut title would lose (✓ · ● …)
        return Counter(ch for ch in text if not ch.isspace() and not ch.isascii() and not ch.isalnum()
                       and not "\u2500" <= ch <= "\u257f")

    # A record layout may repeat a column's header, but it never drops a mark or cuts a text short with "…".
    lost = sorted((ink(wide) - ink(narrow)).elements()) + ["…"] * (ink(narrow) - ink(wide))["…"]
    return sorted({w for w in WORD.findall(narrow) if w not in whole}) + lost


def _everything(sample: str, weights: str, **options: object) -> dict[str, list]:
    import mhacli
    from mhacli.measures.analysis import analyse
    from mhacli.measures.compare import compare, single_head
    from mhacli.measures.lesson import lesson_numbers
    from mhacli.measures.quiz import make_quiz
    from mhacli.io.samples import load_sample
    from mhacli.render.compare import comparison_panel
    from mhacli.render.lesson import lesson, step_panel
    from mhacli.render.quiz import quiz_view
    from mhacli.render.samples import sample_table_or_view
    from mhacli.render.terminal import walkthrough

    trace = mhacli.run(load_sample(sample).text, weights=weights, **options)
    a = analyse(trace)
    steps = lesson(trace, a, lesson_numbers(trace), width=40, split_diff=trace.split_equals_direct())
    out: dict[str, list] = {
        "walkthrough": walkthrough(trace, a, trace.split_equals_direct(), width=40, show_values=True),
        "hidden": walkthrough(trace, a, trace.split_equals_direct(), width=40, hide_rules=True),
        "compare": [comparison_panel(compare(trace, single_head(trace)))],
        "quiz": quiz_view(demo_quiz := make_quiz(trace, 0, 20), True, "title", "mha explain --sample x"),
        "samples": [sample_table_or_view(None), sample_table_or_view(sample)],
    }
    assert demo_quiz
    for number, step in enumerate(steps, 1):
        if step.key != "mask":  # a narrow mask grid shows fewer tokens: checked on its own below
            out[f"demo step {number} ({step.key})"] = [step_panel(step, number, len(steps)), step.shows]
    return out


@pytest.mark.parametrize("width", [40, 30, 80])
def test_a_narrow_mask_grid_shows_fewer_tokens_whole(width):
    import mhacli
    from mhacli.io.samples import load_sample
    from mhacli.render.lesson import mask_grid

    result = mhacli.run(load_sample("code").text, causal=True)
    trace = result.trace
    out = _rendered([mask_grid(trace, result.analysis)], width)
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit() and "│" in line]
    shown = len(rows)
    assert 3 <= shown <= 10 and (f"(first {shown} of {trace.n_tokens} tokens)" in out)
    for q, cells in enumerate(rows):
        assert [c for c in cells if c in "✓·"] == ["✓" if k <= q else "·" for k in range(shown)], cells
    assert max(cell_len(line) for line in out.splitlines()) <= width


@pytest.mark.parametrize("sample,weights,options", [
    ("cat", "random", {}), ("repeated", "designed", {}), ("paragraph", "random", {}),
    ("pronoun", "trained", {}), ("code", "designed", {"causal": True}),
    ("pronoun", "random", {"heads": 8, "d_model": 64, "causal": True}),
], ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.slow
def test_no_word_breaks_at_forty_columns(sample, weights, options):
    broken = {name: found for name, parts in _everything(sample, weights, **options).items()
              if (found := _broken_words(parts))}
    assert broken == {}


def test_the_fitted_table_keeps_its_columns_when_they_fit():
    from rich.table import Table

    from mhacli.render.fit import fitted_table

    table = Table("head", "top key follows")
    table.add_row("● 1", "previous token")
    assert "top key follows" in _rendered([fitted_table(table)], 80).splitlines()[1]
    narrow = _rendered([fitted_table(table)], 16)
    assert "top key follows:" in narrow.replace("\n", " ") or "top key" in narrow  # a record, not a column
    assert _broken_words([fitted_table(table)], 16) == []


def test_each_command_in_one_process_takes_the_columns_it_is_run_with():
    # Rich fixes a console's width when COLUMNS is set as it is made; mhacli's consoles are made when
    # mhacli.cli.output is first imported, which in a test runner may be inside a COLUMNS=40 command.
    from typer.testing import CliRunner

    from mhacli.cli import output
    from mhacli.cli.app import app

    output.console.width = 40  # as if the module had been imported under COLUMNS=40
    output.err_console.width = 40
    wide = CliRunner().invoke(app, ["shapes", "--tokens", "9"], env={"COLUMNS": "120"})
    assert wide.exit_code == 0 and max(map(len, wide.stdout.splitlines())) > 80, wide.stdout
    narrow = CliRunner().invoke(app, ["shapes", "--tokens", "9"], env={"COLUMNS": "40"})
    assert narrow.exit_code == 0 and max(map(len, narrow.stdout.splitlines())) <= 40, narrow.stdout


def test_token_ids_are_the_grammar_models_vocabulary_ids(cwd):
    """The id column and ``token_ids`` are rows of the model's embedding table, not positions of first appearance:
    "The" and "the" share one (the grammar model folds capitals), and the table's note says so."""
    import json

    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

    model = load_trained(shipped_model_path(name="grammar"))[0]
    words = SENTENCE.split()
    p = _in_process(["explain", SENTENCE, "--weights", "grammar", "--no-plots", "--json"], cwd)
    assert p.returncode == 0, p.stderr
    ids = json.loads(p.stdout)["token_ids"]
    assert ids == [model.vocabulary.index(w.lower()) for w in words]
    assert ids[0] == ids[4] and ids[1] != 1  # "The" and "the" share an id; "animal" is not position 1
    p = _in_process(["explain", SENTENCE, "--weights", "grammar", "--no-plots"], cwd, COLUMNS="80")
    table = p.stdout.split("1. Tokens", 1)[1].split("2. Steps", 1)[0]
    rows = {int(pos): (tok, int(i)) for pos, tok, i in re.findall(r"(\d+)\s+(\S+)\s+(\d+)", table)}
    assert [rows[k][1] for k in range(len(words))] == ids
    note = " ".join(table.split())
    assert "10 distinct ids" in note and "folds capitals" in note
    assert "order of first appearance" not in note


def test_token_ids_of_the_toy_embedding_are_first_appearances(cwd):
    """Without a trained vocabulary the id numbers the distinct strings, and the note says exactly that."""
    p = _in_process(["explain", "the cat saw the dog", "--no-plots"], cwd, COLUMNS="80")
    table = " ".join(p.stdout.split("1. Tokens", 1)[1].split("2. Steps", 1)[0].split())
    assert "order of first appearance" in table and "folds capitals" not in table


def test_a_saved_grammar_trace_keeps_its_model_s_ids_and_says_so(cwd):
    """A .npz of a grammar run keeps the model's vocabulary ids (token_ids, folds_case): `mha show` shows the
    same ids as explain and calls them the trained model's, capitals folded."""
    saved = _in_process(["explain", SENTENCE, "--weights", "grammar", "--no-plots", "--save-npz", "g.npz"], cwd,
                   COLUMNS="80")
    assert saved.returncode == 0, saved.stderr
    shown = _in_process(["show", "g.npz", "--no-plots"], cwd, COLUMNS="80")
    tables = [" ".join(out.split("1. Tokens", 1)[1].split("2. Steps", 1)[0].split())
              for out in (saved.stdout, shown.stdout)]
    assert tables[0] == tables[1], tables
    assert "trained model's vocabulary" in tables[1] and "folds capitals" in tables[1]
    assert "order of first appearance" not in tables[1]

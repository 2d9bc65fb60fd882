"""Terminals: NO_COLOR, pipes, TERM=dumb, 40 columns, a closed pipe: through the installed ``mha``.

These run the real console script in a subprocess (and under a pseudo-terminal
where colour detection matters), because Rich decides about colour and width
from the real file descriptors and the environment.
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


def test_no_color_also_covers_errors_on_a_terminal(cwd):
    code, screen = _in_pty(["explain", "hi", "--heads", "0", "--no-plots"], cwd, TERM="xterm-256color",
                           NO_COLOR="1")
    assert code == 2
    assert not any(COLOUR_PARAM.match(p) for p in _sgr_params(screen))
    assert _visible(screen).strip() == "mha: error: --heads must be at least 1, got 0."


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
    p = _piped(args, cwd, COLUMNS="40")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout + p.stderr
    wide = [line for line in p.stdout.splitlines() if cell_len(line) > 40]
    assert wide == [], wide[:3]


def test_forty_columns_on_a_terminal(cwd):
    code, screen = _in_pty(["explain", SENTENCE, "--no-plots"], cwd, columns=40, TERM="xterm-256color")
    assert code == 0
    lines = _visible(screen).replace("\r\n", "\n").split("\n")
    assert max(cell_len(line) for line in lines) <= 40


def test_an_error_line_is_never_wrapped_even_at_forty_columns(cwd):
    p = _piped(["explain", "hi", "--d-model", "360", "--heads", "7", "--no-plots"], cwd, COLUMNS="40")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and len(p.stderr) > 40


def test_json_to_a_closed_pipe_is_quiet(cwd):
    words = " ".join(f"w{i}" for i in range(300))
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

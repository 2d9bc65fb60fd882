"""Command-line conventions: -h, shell completion, a reader that stops early (| head -1), --quiet,
and options declared once (no private Typer import, no help-time rewriting of parameters)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from mhacli.cli.app import COMMANDS, app

CAT = "the cat sat on the mat"
CLI = Path(__file__).resolve().parent.parent / "mhacli" / "cli"


def _mha() -> str:
    exe = shutil.which("mha", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the mha console script is not installed in this environment")
    return exe


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_MHA_", "COMP_"))}
    env.update(MPLBACKEND="Agg", MPLCONFIGDIR=str(tmp_path / ".mpl"), NO_COLOR="1", COLUMNS="80")
    return env


def _command_names() -> list[str]:
    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


# --- -h and --help ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [[], *[[name] for name in _command_names()]], ids=lambda c: " ".join(c) or "mha")
def test_dash_h_is_help_everywhere(runner, command):
    short = runner.invoke(app, [*command, "-h"])
    long = runner.invoke(app, [*command, "--help"])
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.output == long.output and "Usage:" in short.output


def _stray_text(help_text: str, width: int) -> list[str]:
    """Lines of a help page that show a type label ('<bool>') or run past the width."""
    return [line for line in help_text.splitlines() if "<bool>" in line or len(line) > width]


@pytest.mark.parametrize("width", [80, 40])
def test_every_help_page_shows_no_type_label_and_fits_the_width(runner, width):
    """Our flags, and -h/--help, --install-completion, --show-completion too, show no '<bool>'."""
    for command in [[], *[[name] for name in _command_names()]]:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(width)})
        assert result.exit_code == 0, result.output
        assert "--help" in result.stdout and _stray_text(result.stdout, width) == [], (command, result.stdout)


@pytest.mark.parametrize("width", [80, 40])
def test_every_option_s_name_and_help_are_whole_at_any_width(runner, width):
    """Typer's boxes cut names and help to '…' on a narrow terminal ('--install-c…', 'whitespac…'); below
    60 columns the page is click's own layout, which wraps between words and cuts nothing."""
    group = typer.main.get_command(app)
    for command in [[], *[[name] for name in _command_names()]]:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(width)})
        page = "".join(w for w in result.stdout.split() if w != "│")  # wrapping only moves words to new lines
        target = group.commands[command[0]] if command else group  # type: ignore[attr-defined]
        for param in target.params:
            if getattr(param, "hidden", False) or not getattr(param, "help", None):
                continue
            named = param.param_type_name == "argument" and param.metavar is not None  # an argument shows as FILE
            shown = [param.metavar] if named else param.opts
            assert all(name in result.stdout for name in shown), (command, shown, result.stdout)
            help_text = re.sub(r"\[/?(bold|dim|italic)\]", "", param.help)
            assert "".join(help_text.split()) in page, (command, param.opts, result.stdout)


@pytest.mark.parametrize("width", [80, 40])
@pytest.mark.parametrize("command", [[], ["explain"], ["bench"]], ids=lambda c: " ".join(c) or "mha")
@pytest.mark.slow
def test_the_installed_help_shows_no_type_label_and_fits_the_width(tmp_path, command, width):
    """The real process reads its width from the environment as a terminal gives it; the root (with the
    completion options), the command with the most options and the one with the longest help stand in
    for all (the test above reads every page in-process)."""
    env = {**_env(tmp_path), "COLUMNS": str(width)}
    proc = subprocess.run([_mha(), *command, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "--help" in proc.stdout, proc.stderr
    assert _stray_text(proc.stdout, width) == [], proc.stdout


def test_every_registered_command_is_in_the_app():
    assert _command_names() == sorted(c.__name__ for c in COMMANDS)


# --- shell completion ---------------------------------------------------------------------------

@pytest.mark.slow
def test_completion_options_are_offered_and_work(runner, tmp_path):
    root_help = runner.invoke(app, ["--help"]).output
    assert "--install-completion" in root_help and "--show-completion" in root_help
    mha, env = _mha(), _env(tmp_path)
    # Typed in bash, as a person does: --show-completion names the shell it finds among mha's parents, and a
    # suite started where no shell is among them (its shell gone, or a service) would see "Shell  not supported".
    # The `; exit $?` keeps bash from replacing itself with mha, so bash stays the parent.
    script = subprocess.run(["bash", "-c", '"$0" --show-completion; exit $?', mha], capture_output=True, text=True,
                            env=env)
    assert script.returncode == 0 and "_MHA_COMPLETE=complete_bash" in script.stdout, script.stderr
    asked = {**env, "_MHA_COMPLETE": "complete_bash", "COMP_WORDS": "mha explain --hea", "COMP_CWORD": "2"}
    completed = subprocess.run([mha], capture_output=True, text=True, env=asked)
    assert completed.returncode == 0 and completed.stdout.split() == ["--heads"], completed


# --- the reader of stdout goes away --------------------------------------------------------------

FILES = ["head-1.png", "head-2.png", "heads.png", "magnifiers.png", "split.png", "t.npz", "t.html"]


def _explain_argv(folder: Path) -> list[str]:
    folder.mkdir()
    return [_mha(), "explain", CAT, "--heads", "2", "--dpi", "30", "--out", str(folder),
            "--save-npz", str(folder / "t.npz"), "--html", str(folder / "t.html")]


def test_a_closed_stdout_exits_0_and_every_file_is_still_written(tmp_path):
    """The reader is gone before the first line: every write to stdout fails, the run carries on."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        p = subprocess.run(_explain_argv(tmp_path / "a"), stdout=write_end, stderr=subprocess.PIPE, text=True,
                           env=_env(tmp_path), timeout=300)
    finally:
        os.close(write_end)
    assert (p.returncode, p.stderr) == (0, "")
    assert sorted(FILES) == sorted(f.name for f in (tmp_path / "a").iterdir() if f.is_file())


@pytest.mark.slow
def test_piped_into_head_1_exits_0_and_writes_every_file(tmp_path):
    """A real shell pipeline, as a person types it: ``mha explain … | head -1``."""
    if shutil.which("bash") is None or shutil.which("head") is None:
        pytest.skip("needs bash and head")
    command = " ".join(map(_quote, _explain_argv(tmp_path / "b"))) + " | head -1; exit ${PIPESTATUS[0]}"
    p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1 and "Multi-head attention" in p.stdout
    assert p.stderr == ""
    assert sorted(FILES) == sorted(f.name for f in (tmp_path / "b").iterdir() if f.is_file())


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


# --- --quiet ------------------------------------------------------------------------------------

def test_quiet_prints_nothing_but_still_writes_the_files(runner, quiet_drawn):
    # conftest: the session's one `explain CAT --save-npz new/run.npz --quiet --out new --dpi 30` (test_wiring reads
    # it too): figures and a trace written, nothing printed
    assert quiet_drawn.argv == ("explain", CAT, "--save-npz", "new/run.npz", "--quiet")
    assert quiet_drawn.exit_code == 0 and quiet_drawn.stdout == "" and quiet_drawn.stderr == ""
    trace = quiet_drawn.out / "run.npz"
    assert (quiet_drawn.out / "heads.png").exists() and trace.exists()
    loud = runner.invoke(app, ["verify", str(trace)])
    quiet = runner.invoke(app, ["verify", str(trace), "--quiet"])
    assert loud.stdout.strip() and (quiet.exit_code, quiet.stdout) == (0, "")


def test_quiet_keeps_json_and_errors(runner, tmp_path):
    r = runner.invoke(app, ["compare", CAT, "--quiet", "--json", "--no-plots"])
    assert r.exit_code == 0 and r.stderr == ""
    assert json.loads(r.stdout)["files"] == []
    bad = runner.invoke(app, ["explain", CAT, "--quiet", "--heads", "3", "--no-plots"])
    assert bad.exit_code == 2 and bad.stderr.startswith("mha: error: --d-model 16 is not divisible by --heads 3")
    again = runner.invoke(app, ["explain", CAT, "--no-plots"])
    assert "Multi-head attention" in again.stdout, "--quiet must not stick to the next run"


# --- options declared once ----------------------------------------------------------------------

def test_the_cli_uses_only_typers_public_api_and_never_rewrites_parameters():
    for path in CLI.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"\b_click\b", source), f"{path.name} imports Typer's private click"
        assert not re.search(r"\bparam\.(metavar|rich_help_panel)\s*=", source), f"{path.name} rewrites a parameter"


def test_model_defaults_come_from_config():
    """A model option is None unless given (the weights or Config decide); its help names Config's default."""
    from mhacli.cli.options import FLAG
    from mhacli.attention.config import Config

    group = typer.main.get_command(app)
    explain = group.commands["explain"]  # type: ignore[attr-defined]
    params = {p.name: p for p in explain.params}
    for name, value in vars(Config()).items():
        assert params[name].default is None, name
        if value is None:  # decided by another option (--kv-heads: --heads): the help says what it then is
            assert "(the default)" in (params[name].help or ""), name
            continue
        shown = value if params[name].metavar != FLAG else f"--{'' if value else 'no-'}{name}"
        assert f"Default {shown}" in (params[name].help or ""), name


# --- a spinner while the figures are drawn ------------------------------------------------------

def _stderr_on_a_terminal(argv: list[str], tmp_path: Path) -> bytes:
    import pty

    leader, follower = pty.openpty()
    try:
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=follower, env=_env(tmp_path), timeout=300)
    finally:
        os.close(follower)
    seen = b""
    try:
        while chunk := os.read(leader, 65536):
            seen += chunk
    except OSError:  # the terminal is closed once everything is read
        pass
    os.close(leader)
    assert p.returncode == 0, seen
    return seen


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.slow
def test_a_spinner_shows_on_a_terminal_while_figures_are_drawn_but_not_with_quiet(tmp_path):
    argv = [_mha(), "explain", CAT, "--heads", "2", "--dpi", "30", "--out", str(tmp_path / "f")]
    assert b"drawing figures" in _stderr_on_a_terminal(argv, tmp_path)
    assert b"drawing figures" not in _stderr_on_a_terminal([*argv, "--quiet"], tmp_path)

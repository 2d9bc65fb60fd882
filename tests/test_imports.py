"""Start-up rules: which modules each command loads (never how long it takes).

In class every second before the first line counts, and the heavy libraries are
most of it (measured on the 2-core machine: matplotlib ~0.4 s, numpy ~0.07 s).
So help screens, ``mha shapes`` and ``mha samples`` load neither numpy nor
matplotlib, ``mha explain --no-plots`` never loads matplotlib, and the numerical
core loads no terminal, plotting or command-line library.  Each rule is checked
in a fresh interpreter with ``python -X importtime``, which names every module
the process imported, however deep or late.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer

from mhacli.cli.app import app

HEAVY = ("numpy", "matplotlib")
CAT = "the cat sat on the mat"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(COLUMNS="100", MPLBACKEND="Agg", NO_COLOR="1", TERM="dumb")
    return env


def loaded_packages(*argv: str, code: str | None = None) -> set[str]:
    """Top-level packages a fresh ``python -m mhacli ARGV`` (or ``python -c CODE``) imported."""
    command = ["-c", code] if code is not None else ["-m", "mhacli", *argv]
    proc = subprocess.run([sys.executable, "-X", "importtime", *command], capture_output=True,
                          text=True, env=_clean_env(), timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{argv or code} failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    names = set()
    for line in proc.stderr.splitlines():
        # "import time:       412 |       2163 |   numpy.core"; the first such line is the header
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name.split(".")[0])
    assert "mhacli" in names or code is not None, "importtime listed nothing: the parser is broken"
    return names


def command_names() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


def test_the_probe_sees_lazy_imports():
    """The check can fail: a command that computes does show numpy, imported inside the command."""
    assert "numpy" in loaded_packages("explain", CAT, "--no-plots")


def test_help_screens_and_version_load_no_heavy_library():
    """``mha --help`` in its own process, then --version, -h and every command's --help in one more."""
    assert not loaded_packages("--help") & set(HEAVY)
    screens = [["--version"], ["-h"], *[[name, "--help"] for name in command_names()]]
    code = ("from typer.testing import CliRunner; from mhacli.cli.app import app; r = CliRunner()\n"
            f"for argv in {screens!r}:\n"
            "    assert r.invoke(app, argv).exit_code == 0, argv")
    assert not loaded_packages(code=code) & set(HEAVY)


@pytest.mark.parametrize("argv", [
    ("shapes",),
    ("shapes", "--tokens", "4096", "--d-model", "512", "--heads", "8", "--causal"),
    ("shapes", "--markdown"),
    ("samples",),
], ids=" ".join)
@pytest.mark.slow
def test_shapes_and_samples_load_neither_numpy_nor_matplotlib(argv):
    if argv[0] not in command_names():
        pytest.skip(f"mha {argv[0]} does not exist in this build")
    assert not loaded_packages(*argv) & set(HEAVY)


def test_samples_of_one_text_loads_neither_numpy_nor_matplotlib():
    if "samples" not in command_names():
        pytest.skip("mha samples does not exist in this build")
    from mhacli.io.samples import sample_names  # the list of ready-made texts, without running anything

    name = sorted(sample_names())[0]
    assert not loaded_packages("samples", name) & set(HEAVY)


@pytest.mark.parametrize("argv", [
    ("explain", CAT, "--no-plots"),
    ("explain", CAT, "--no-plots", "--json"),
    ("explain", CAT, "--no-plots", "--dtype", "float32", "--causal"),
], ids=" ".join)
@pytest.mark.slow
def test_explain_without_plots_never_loads_matplotlib(argv):
    loaded = loaded_packages(*argv)
    assert "matplotlib" not in loaded
    assert "PIL" not in loaded  # matplotlib's image library would mean a figure was started


def test_core_loads_no_terminal_plotting_or_cli_library():
    """STYLE.md: the numerical core never prints or plots, so it must not even import those libraries."""
    code = ("import mhacli.attention.trace, mhacli.measures.verify; from mhacli.attention.config import Config; "
            "mhacli.attention.trace.run_tokens(['the', 'cat', 'sat'], Config(heads=2))")
    loaded = loaded_packages(code=code)
    assert {"numpy", "mhacli"} <= loaded
    assert not loaded & {"rich", "matplotlib", "typer", "click", "PIL"}


def test_big_core_run_loads_no_terminal_plotting_or_cli_library():
    """A long text takes the same path; it must not widen the imports either."""
    code = ("import mhacli.attention.trace as c; from mhacli.attention.config import Config; "
            "c.run_tokens(['w'] * 1100, Config(heads=1))")
    loaded = loaded_packages(code=code)
    assert not loaded & {"rich", "matplotlib", "typer", "click", "PIL"}


def test_importing_the_package_is_cheap():
    """``import mhacli`` (which every command does first) loads no numpy: its numerical names are lazy."""
    assert not loaded_packages(code="import mhacli; mhacli.__version__") & set(HEAVY)

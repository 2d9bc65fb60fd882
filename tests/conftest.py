"""Shared fixtures: figures without a display, and a CLI runner."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("MPLBACKEND", "Agg")
# No example fails for the time it took: the machines are shared, and hypothesis's default deadline (200 ms) was
# exceeded by a 1 ms example on a loaded machine (its first call, 320 ms), failing the README's pytest. On CI every
# run draws the same examples, so a red build can be reproduced; locally hypothesis keeps exploring new ones.
settings.register_profile("untimed", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("untimed"), derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "untimed")


# --- hypothesis properties in both tiers (issue 46.5) --------------------------------------------------
# Every property (@given) runs twice: in the default tier with a fifth of its examples (at least one), as
# ``test[examples=fifth]``, and in the slow tier (`pytest -m slow`, .ci/run) with the full count its settings
# give, as ``test[examples=full]``. The property, its strategies and its assertions are the same object both
# times; only ``max_examples`` differs. A property already marked slow runs once, in full.
EXAMPLES_IN_THE_DEFAULT_TIER = 5  # the divisor


def _is_property(function: object) -> bool:
    return bool(getattr(function, "is_hypothesis_test", False))


def pytest_generate_tests(metafunc):
    if not _is_property(metafunc.function) or metafunc.definition.get_closest_marker("slow") is not None:
        return
    metafunc.fixturenames.append("_examples")
    metafunc.parametrize("_examples", ["fifth", pytest.param("full", marks=pytest.mark.slow)],
                         ids=lambda v: f"examples={v}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("_examples") != "fifth":
        yield
        return
    wrapper = item.obj
    full = wrapper._hypothesis_internal_use_settings
    wrapper._hypothesis_internal_use_settings = settings(
        full, max_examples=max(1, -(-full.max_examples // EXAMPLES_IN_THE_DEFAULT_TIER)))
    try:
        yield
    finally:
        wrapper._hypothesis_internal_use_settings = full


@pytest.fixture()
def runner():
    from typer.testing import CliRunner

    return CliRunner()


@pytest.fixture(scope="session", autouse=True)
def app_built_once():
    """Typer's CliRunner builds the click command from the app again at every invoke (11 ms on the
    2-core machine, most of a hypothesis example through the CLI; 12 CPU s of the whole suite, measured
    with py-spy); a real process builds it once, and so does the suite, for every test. One command
    shared by every call is, if anything, stricter: a run that changed it would show in the next.
    (typer.testing imports get_command under this name; if that changes, setattr fails loudly instead
    of silently doing nothing.)"""
    import typer.testing
    from typer.main import get_command

    from mhacli.cli.app import app

    built = get_command(app)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", lambda a: built if a is app else get_command(a))
        yield built


@pytest.fixture(scope="session", autouse=True)
def shipped_pairs_scored_once():
    """``mha demo`` scores the four shipped models on their held-out sentences at every run
    (``classroom.shipped_pairs``: about two thirds of a demo's CPU in process, measured with cProfile), and
    the suite runs demo dozens of times. The pairs are a function of the shipped files alone, so each worker
    scores them once per version of those files (path, size and mtime: a test that points the package at
    other files gets those files' pairs), and hands every caller the same pairs with their arrays made
    read-only: a run that changed them would fail, not feed another test changed numbers."""
    import numpy as np

    from mhacli.cli.commands import classroom
    from mhacli.models.shipped import shipped_model_path

    scored = classroom.shipped_pairs
    memo: dict[tuple, tuple] = {}

    def files() -> tuple:
        paths = [shipped_model_path(alone=alone, name=name) for name in ("trained", "grammar") for alone in (1, 0)]
        return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in paths)

    @functools.wraps(scored)
    def once():
        try:
            key = files()
        except OSError:
            return scored()  # a missing file: the product's own error
        if key not in memo:
            pairs = scored()
            for pair in pairs:
                for value in vars(pair).values():
                    if isinstance(value, np.ndarray):
                        value.flags.writeable = False
            memo[key] = pairs
        return memo[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(classroom, "shipped_pairs", once)
        yield


def _model_key(model) -> tuple:
    """A trained model as its held-out measures see it: configuration, readouts and the parameters' bytes."""
    import hashlib

    digest = hashlib.sha1()
    for name in sorted(model.params):
        value = model.params[name]
        digest.update(f"{name}{value.dtype}{value.shape}".encode())
        digest.update(value.tobytes())
    return repr(model.config), tuple(model.targets), tuple(model.vocabulary), digest.hexdigest()


@pytest.fixture(scope="session", autouse=True)
def held_out_measured_once():
    """A saved model keeps its held-out accuracy and crowd split (``metrics.held_out``, read back by the product),
    but the models the suite trains in memory, often the same short training hundreds of times, are measured on
    2,000 sentences each time: their score (``grammar.score.score``), report card (``grammar.heldout.report_card``)
    and crowd split (``grammar.score.crowd``). All three are functions of the model's configuration, vocabulary,
    readouts and parameters and of the sentences drawn, so each worker measures each such model once (keyed on a
    hash of its parameters' bytes) and hands back the same result, its arrays read-only; a different model is
    measured afresh. tests/test_recorded.py checks the product's records against the unwrapped functions."""
    import numpy as np

    from mhacli.grammar import heldout as carding
    from mhacli.grammar import score as scoring

    def once(measure):
        memo: dict[tuple, object] = {}

        @functools.wraps(measure)  # the same name and docs: mhacli's public names are checked by them
        def measured(model, sentences=scoring.CARD_SENTENCES, seed=scoring.CARD_SEED):
            try:
                key = (*_model_key(model), sentences, seed)
            except (AttributeError, TypeError):
                return measure(model, sentences, seed)  # not a model: the product's own refusal
            if key not in memo:
                result = measure(model, sentences, seed)
                for value in vars(result).values():
                    if isinstance(value, np.ndarray):
                        value.flags.writeable = False
                memo[key] = result
            return memo[key]

        return measured

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scoring, "score", once(scoring.score))
        mp.setattr(carding, "report_card", once(carding.report_card))
        mp.setattr(scoring, "crowd", once(scoring.crowd))
        yield


# What a missing PyTorch (or transformers) skips: a test that skips for want of them must say so with the
# `torch` marker, so .ci/run's second leg (`pytest -m "torch or torch_aware"`, PyTorch installed) runs it.
_TORCH_REASON = re.compile(r"\b(torch|pytorch|transformers)\b", re.I)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("torch") is None and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if _TORCH_REASON.search(reason):
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} skips without PyTorch ({reason}) but has no @pytest.mark.torch: "
                               "mark it, so the PyTorch leg of .ci/run runs it")


# --- real processes, counted against a budget (issue 29.4) ---------------------------------------------
# A new `mha` or Python process costs ~0.35 s before it does anything, and its figures are drawn again rather
# than shared, so CLI behaviour is tested in-process through Typer's CliRunner; a real process is kept for
# what only a process shows (signals, exit codes of the installed script, a closed stdout, the README's
# commands, the environment and locale). Every test that starts one is counted, and a run of the whole suite
# that counts more than PROCESS_BUDGET fails, naming them. Counted on 2026-12-03: 189 tests without PyTorch,
# then 137 once what a process did not show moved to CliRunner (widths, token ids, refused files, file names,
# the quiz's check command); on 2026-12-04, 118 once the installed-script duplicates of in-process cases moved
# too (hard inputs, a smoke test per command, four of five warning-while-drawing runs). What stays: signals
# and the pause point, a closed or vanished stdout, a pseudo-terminal, colour and TERM decided as the consoles
# are made, COLUMNS, the locale and the encoding at start-up, imports in a fresh interpreter, peak memory, an
# unprivileged user, hangs guarded by a timeout, the built wheel, the README's and docs' commands, and one
# installed-script case per family of errors. With PyTorch installed, up to nine more start one (the six .pt
# tensor kinds and three in test_real_models, all marked torch). The budget is that and a little room, to be
# lowered as tests move in-process, never raised to let one more in.
PROCESS_BUDGET = 130


def starts_mha_or_python(argv: object) -> bool:
    """Whether ``argv`` (as given to ``subprocess.Popen``) runs the installed ``mha`` or a Python interpreter,
    directly or through a shell; other programs (git, chromium, pdftotext) are not what is counted."""
    import shlex
    import sys

    words = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]  # type: ignore[union-attr]
    if not words:
        return False
    program = Path(words[0]).name
    if program in ("sh", "bash", "setpriv", "env", "nice", "timeout"):
        return any(Path(w).name in ("mha", "python", "python3") or w == sys.executable for w in words[1:])
    return program == "mha" or program.startswith("python") or words[0] == sys.executable


# A command run without --out writes its figures into ./mha-output: a test that ran one in the work tree
# left seven 150-dpi figures there (ignored by git, so unseen) and drew them at full size.
_WORK_TREE_OUT = Path(__file__).resolve().parent.parent / "mha-output"


_OUT_EXISTED = pytest.StashKey[bool]()


def pytest_sessionstart(session):
    session.config.stash[_OUT_EXISTED] = _WORK_TREE_OUT.exists()


_RUNNING: list[pytest.Item] = []


def pytest_configure(config):
    import subprocess

    start = subprocess.Popen.__init__
    if getattr(start, "_counted", False):
        return

    def counted(self, args, *a, **kw):
        if _RUNNING and starts_mha_or_python(args):
            item = _RUNNING[-1]
            if ("starts_process", True) not in item.user_properties:
                item.user_properties.append(("starts_process", True))
        return start(self, args, *a, **kw)

    counted._counted = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = counted  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING.append(item)
    try:
        yield
    finally:
        _RUNNING.pop()


_STARTED: set[str] = set()


def pytest_runtest_logreport(report):
    """Called where the reports arrive: in the one process, and in pytest-xdist's controller."""
    if ("starts_process", True) in report.user_properties:
        _STARTED.add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    if not config.stash.get(_OUT_EXISTED, True) and _WORK_TREE_OUT.exists():
        terminalreporter.write_line(f"a test wrote {_WORK_TREE_OUT}: run commands that draw in tmp_path "
                                    "(monkeypatch.chdir)", red=True)
    if not _STARTED:
        return
    over = len(_STARTED) > PROCESS_BUDGET
    terminalreporter.write_line(
        f"{len(_STARTED)} tests started a real mha or Python process (budget {PROCESS_BUDGET}, tests/conftest.py)"
        + (": over budget, test the new ones in-process with CliRunner" if over else ""), red=over)
    if over:
        for nodeid in sorted(_STARTED):
            terminalreporter.write_line(f"  {nodeid}")


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker sees only its share
        return
    if len(_STARTED) > PROCESS_BUDGET and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not session.config.stash.get(_OUT_EXISTED, True) and _WORK_TREE_OUT.exists():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- each kind of run's figures, drawn once per session (issue 29.4) ------------------------------------
# A figure run costs about a second whatever the --dpi (text layout, not pixels), so the tests that only
# read what a standard run wrote and printed share one run of each kind instead of drawing their own.
# The runs go through Typer's CliRunner in a folder of their own, their --out given relative to it, as a
# user would type it; a test never writes into a shared folder (it reads, or copies it first).
@dataclasses.dataclass(frozen=True)
class Drawn:
    """One command run once with ``--out NAME``: ``out`` is the folder, ``shown`` the name the command was given."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    out: Path
    shown: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def names(self) -> list[str]:
        return sorted(p.name for p in self.out.iterdir())


def _draw_once(tmp_path_factory: pytest.TempPathFactory, name: str, argv: list[str]) -> Drawn:
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    base = tmp_path_factory.mktemp(f"drawn-{name}")
    here = Path.cwd()
    os.chdir(base)
    try:
        result = CliRunner().invoke(app, [*argv, "--out", name, "--dpi", "30"])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    for p in (base / name).iterdir():
        p.chmod(0o444)  # shared: a test that overwrote a figure would fail, not change another test's input
    return Drawn(tuple(argv), result.exit_code, result.stdout, result.stderr, base / name, name)


CAT_SENTENCE = "the cat sat on the mat"


@pytest.fixture(scope="session")
def explain_drawn(tmp_path_factory) -> Drawn:
    """``mha explain "the cat sat on the mat" --out figs --dpi 30``: 4 heads, seven PNGs."""
    return _draw_once(tmp_path_factory, "figs", ["explain", CAT_SENTENCE])


@pytest.fixture(scope="session")
def compare_drawn(tmp_path_factory) -> Drawn:
    """``mha compare "the cat sat on the mat" --out cmp --dpi 30``: 4 heads against one, one PNG."""
    return _draw_once(tmp_path_factory, "cmp", ["compare", CAT_SENTENCE])


@pytest.fixture(scope="session")
def demo_drawn(tmp_path_factory) -> Drawn:
    """``mha demo --no-pause --sample repeated --weights designed --out lesson --dpi 30``: the lesson's figures."""
    return _draw_once(tmp_path_factory, "lesson", ["demo", "--no-pause", "--sample", "repeated", "--weights",
                                                   "designed"])


@pytest.fixture(scope="session")
def quiet_drawn(tmp_path_factory) -> Drawn:
    """``mha explain "the cat sat on the mat" --save-npz new/run.npz --quiet --out new --dpi 30``: figures and a
    trace written into a folder the run makes, nothing printed. Read by test_wiring (a file inside an --out folder
    yet to be made) and test_cli_conventions (--quiet still writes every file)."""
    return _draw_once(tmp_path_factory, "new", ["explain", CAT_SENTENCE, "--save-npz", "new/run.npz", "--quiet"])


@pytest.fixture(scope="session")
def one_vs_many_drawn():
    """``one_vs_many_drawn(hide_rules=False)``: ``one_vs_many_figure(shipped_pairs(), hide_rules=...)``, the demo's
    slide from the shipped pairs, built once per session for each ``hide_rules`` (about 1.5 CPU s a build: its
    56 panels and their texts). The tests that read its titles and texts share it; none draws on it."""
    from mhacli.cli.commands.classroom import shipped_pairs
    from mhacli.render.figures.one_vs_many import one_vs_many_figure

    built: dict[bool, object] = {}

    def drawn(hide_rules: bool = False):
        if hide_rules not in built:
            built[hide_rules] = one_vs_many_figure(shipped_pairs(), hide_rules=hide_rules)
        return built[hide_rules]

    return drawn


# --- one headless Chromium per worker ------------------------------------------------------------------
# Starting Chromium under Playwright costs about 1.5 CPU s (the browser and Playwright's driver); the page tests
# (test_html_browser), the notebook displays (test_view_groups), the escaped tooltips (test_hard_inputs_three) and
# the exported notebook (test_notebook) each started their own. Each test opens its own context (its own cookies,
# storage and viewport) and closes it.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-default-apps", "--mute-audio"]


def chromium_path() -> str | None:
    """Debian's chromium, or the one ``MHA_CHROMIUM`` names."""
    import shutil

    for candidate in (os.environ.get("MHA_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium driven by Playwright, started once per worker; SKIPPED with the reason without it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright's Python package is not installed (pip install playwright; no browser download "
                    "is needed, the system chromium is used)")
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium found at /usr/bin/chromium or on PATH (apt-get install -y chromium, "
                    "or set MHA_CHROMIUM)")
    with sync_playwright() as pw:
        try:
            b = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        except Exception as exc:  # noqa: BLE001 - any launch failure is a reason to skip, stated
            pytest.skip(f"Chromium at {path} would not start under Playwright: {str(exc).splitlines()[0]}")
        yield b
        b.close()

# ------------------------------------------------------------------ retrained shipped models (helper "heads")
# The tests that retrain a shipped model with its documented command (test_grammar, test_trained_shipped,
# test_trained_alone) each took a full training run; a TrainConfig is frozen and hashable and a TrainResult
# read-only, so one run per config per session serves them all, and every test still compares that run's
# arrays with the shipped file's.


@pytest.fixture(scope="session")
def retrained():
    """``retrained(config)``: :func:`mhacli.grammar.train.train`'s result for ``config``, trained once per session."""
    from functools import cache

    from mhacli.grammar.train import train

    return cache(train)

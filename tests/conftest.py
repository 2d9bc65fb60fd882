"""Shared fixtures: figures without a display, and a CLI runner."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import settings

os.environ.setdefault("MPLBACKEND", "Agg")

# On CI every run draws the same examples, so a red build can be reproduced; locally
# hypothesis keeps exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture()
def runner():
    from typer.testing import CliRunner

    return CliRunner()


@pytest.fixture(scope="module")
def app_built_once():
    """Typer's CliRunner builds the click command from the app again at every invoke (11 ms on the
    2-core machine, most of a hypothesis example through the CLI); a real process builds it once, and
    so do the modules that use this. One command shared by every call is, if anything, stricter: a run
    that changed it would show in the next. (typer.testing imports get_command under this name; if
    that changes, setattr fails loudly instead of silently doing nothing.)"""
    import typer.testing
    from typer.main import get_command

    from mhacli.cli.app import app

    built = get_command(app)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", lambda a: built if a is app else get_command(a))
        yield built


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


# ------------------------------------------------------------------ retrained shipped models (helper "heads")
# The tests that retrain a shipped model with its documented command (test_grammar, test_trained_shipped,
# test_trained_alone) each took a full training run; a TrainConfig is frozen and hashable and a TrainResult
# read-only, so one run per config per session serves them all, and every test still compares that run's
# arrays with the shipped file's.


@pytest.fixture(scope="session")
def retrained():
    """``retrained(config)``: :func:`mhacli.core.train.train`'s result for ``config``, trained once per session."""
    from functools import cache

    from mhacli.core.train import train

    return cache(train)

"""Shared fixtures: figures without a display, and a CLI runner."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture()
def runner():
    from typer.testing import CliRunner

    return CliRunner()

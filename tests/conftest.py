"""Shared fixtures: figures without a display, and a CLI runner."""

from __future__ import annotations

import os

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

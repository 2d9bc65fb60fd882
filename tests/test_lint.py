"""The architecture's boundaries, enforced by ruff's banned-api rule (see pyproject.toml).

The numerical core, the exports and the analysis must not import rich, matplotlib
or typer; only the renderers and the CLI may. Pyflakes catches unused imports and
undefined names on the way.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str]:
    exe = Path(sys.executable).parent / "ruff"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install '.[test]' brings it)")
    return [found]


def test_ruff_finds_no_boundary_or_pyflakes_violation():
    p = subprocess.run([*_ruff(), "check", "--no-cache", "mhacli", "tests"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_core_may_not_import_matplotlib(tmp_path):
    """The rule itself bites: a core-like module importing matplotlib is reported."""
    bad = tmp_path / "mhacli" / "sneaky.py"
    bad.parent.mkdir()
    bad.write_text("import matplotlib\n")
    p = subprocess.run([*_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 1 and "TID251" in p.stdout, p.stdout + p.stderr

"""mypy (not strict) finds no type error in the package: the configuration is in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean():
    pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install '.[test]'")
    # mypy's own incremental cache (.mypy_cache, git-ignored): a fresh clone checks everything (18 s on the
    # 2-core machine), a second run only what changed (1 s); mypy keys the cache on each file's hash.
    p = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]

"""The suite runs on a newcomer's machine without PyTorch, and .ci/run's second leg runs what needs it.

A test that skips for want of PyTorch or transformers must carry ``@pytest.mark.torch`` (tests/conftest.py
turns an unmarked one into a failure), so ``pytest -m "torch or torch_aware"`` with PyTorch installed runs
every one of them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = '''
import pytest

def test_unmarked_skip_for_torch():
    pytest.skip("PyTorch is optional")

@pytest.mark.torch
def test_marked_skip_for_torch():
    pytest.skip("PyTorch is optional")

def test_unmarked_skip_for_something_else():
    pytest.skip("no Chromium at /usr/bin/chromium")
'''


@pytest.mark.slow
def test_a_test_that_skips_for_want_of_torch_without_its_marker_fails(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_cases.py").write_text(CASES, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    torch: needs PyTorch\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-rA", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "FAILED test_cases.py::test_unmarked_skip_for_torch" in out and "has no @pytest.mark.torch" in out
    assert "SKIPPED" in out and "1 failed, 2 skipped" in out, out


def test_ci_runs_the_readme_s_command_without_torch_then_the_torch_leg():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'pip install ".[test]" && pytest' in readme and 'pip install ".[test]" && pytest\n' in ci
    leg1, leg2 = ci.index('pip install ".[test]" && pytest\n'), ci.index('pytest -m "torch or torch_aware"')
    assert ci.index("torch_wheel=") > leg1 and leg2 > leg1  # PyTorch comes in only after the newcomer's run
    assert 'python -c "import torch"' in ci[:leg1]  # and leg 1 checks it is really absent
    markers = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"torch: ' in markers and '"torch_aware: ' in markers

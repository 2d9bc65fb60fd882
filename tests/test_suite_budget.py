"""The suite's own budget of real processes (tests/conftest.py): what it counts, and that it is stated."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import PROCESS_BUDGET, starts_mha_or_python


@pytest.mark.parametrize("argv", [
    [str(sys.executable), "-c", "import mhacli"],
    ["/venv/bin/mha", "explain", "the cat"],
    "mha --help",
    ["sh", "-c", '"$0" "$@" >&-', "/venv/bin/mha", "explain", "x"],
    ["setpriv", "--reuid", "65534", "/venv/bin/python3", "-m", "mhacli"],
    ["python3.11", "-m", "build"],
])
def test_a_process_of_mha_or_python_is_counted(argv):
    assert starts_mha_or_python(argv)


@pytest.mark.parametrize("argv", [["git", "status"], ["pdftotext", "a.pdf", "-"], ["sh", "-c", "ulimit -v 1"],
                                  ["/usr/bin/chromium", "--headless"], []])
def test_other_programs_are_not(argv):
    assert not starts_mha_or_python(argv)


pytest_plugins = ["pytester"]

TWO_PROCESSES = """
import subprocess, sys
def test_one(): subprocess.run([sys.executable, "-c", "pass"], check=True)
def test_two(): subprocess.run(["sh", "-c", '"$0" -c pass', sys.executable], check=True)
def test_none(): subprocess.run(["true"], check=True)
"""


@pytest.mark.parametrize(("budget", "code"), [(1, 1), (2, 0)])
@pytest.mark.slow
def test_a_run_over_the_budget_fails_and_names_its_tests(pytester, budget, code):
    """The suite's conftest in a folder of three tests, two of them starting Python: over budget the run fails."""
    conftest = Path(__file__).with_name("conftest.py").read_text(encoding="utf-8")
    stated = f"PROCESS_BUDGET = {PROCESS_BUDGET}\n"
    assert conftest.count(stated) == 1
    pytester.makeconftest(conftest.replace(stated, f"PROCESS_BUDGET = {budget}\n"))
    pytester.makepyfile(test_two=TWO_PROCESSES)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:xdist")
    assert result.ret == code
    result.assert_outcomes(passed=3)
    counted = f"*2 tests started a real mha or Python process (budget {budget}, tests/conftest.py)"
    if code:
        result.stdout.fnmatch_lines([counted + ": over budget*", "*test_two.py::test_one", "*test_two.py::test_two"])
    else:
        result.stdout.fnmatch_lines([counted])
        result.stdout.no_fnmatch_line("*over budget*")

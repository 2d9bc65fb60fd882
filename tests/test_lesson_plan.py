"""docs/lesson-plan.md against the tool: its times add up to 45 minutes, every number it quotes comes out of
the command it names, every command runs as written, and the names stay hidden where the class names heads.

Everything is parsed from the document, so a changed plan or a changed number (a retrained shipped model,
a new narration) fails here.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mhacli.cli.app import app

PLAN = Path(__file__).resolve().parents[1] / "docs" / "lesson-plan.md"
TEXT = PLAN.read_text(encoding="utf-8")
LESSON_MINUTES = 45
# The numbers a reader would take as facts: percentages, numbers with thousands separators and sizes in bytes.
QUOTABLE = re.compile(
    r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\w.])\d+(?:\.\d+)?%|(?<![\w.])\d+(?:\.\d+)? [KMG]iB\b"
)


def _sentence() -> str:
    """The value of S, as the plan sets it in bash."""
    found = re.search(r'^S="([^"]+)"$', TEXT, flags=re.M)
    assert found, "the plan sets S in a code block"
    return found.group(1)


def _rows(header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header row starts with ``header``."""
    lines = TEXT.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _class_rows() -> list[list[str]]:
    return _rows("| time | minutes |")


def _quoted_rows() -> list[tuple[str, str]]:
    return [(value, command.strip("`")) for value, command in _rows("| quoted | from |")]


def _argv(command: str) -> list[str]:
    """A plan command as the shell would split it, ``$S`` expanded, a trailing redirection dropped."""
    command = command.split(" > ")[0].replace('"$S"', shlex.quote(_sentence()))
    argv = shlex.split(command)
    assert argv[0] == "mha", command
    return argv[1:]


@lru_cache(maxsize=None)
def _output(command: str) -> str:
    result = CliRunner().invoke(app, _argv(command), env={"COLUMNS": "80"})
    assert result.exit_code == 0, f"{command}\n{result.output}"
    return re.sub(r"\s+", " ", re.sub(r"\s*│\s*", " ", result.output))  # narration wraps inside borders


def _commands() -> list[str]:
    """Every mha command the plan gives: code-block lines and `mha …` spans, in order, once each."""
    found: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S):
        found += [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("mha ")]
    found += re.findall(r"`(mha [^`]+)`", TEXT)
    return list(dict.fromkeys(found))


def test_the_class_fills_45_minutes_without_gaps():
    rows = _class_rows()
    assert rows, "the plan has its timetable"
    clock = 0
    for row in rows:
        start, end = (int(t) for t in row[0].split("–"))
        assert start == clock, f"the row {row[0]} does not start where the last one ended ({clock})"
        assert int(row[1]) == end - start, f"the row {row[0]} says {row[1]} minutes"
        clock = end
    assert clock == LESSON_MINUTES
    assert sum(int(row[1]) for row in rows) == LESSON_MINUTES
    assert f"# A {LESSON_MINUTES}-minute class" in TEXT


@pytest.mark.parametrize("value,command", _quoted_rows())
def test_every_quoted_number_comes_out_of_the_command_it_names(value, command):
    assert value in _output(command), f"{command} does not print {value}"


def test_every_number_the_plan_quotes_is_in_the_checked_table():
    checked = {value for value, _ in _quoted_rows()}
    table_start = TEXT.index("| quoted | from |")
    table_end = TEXT.index("\n\n", table_start)
    elsewhere = TEXT[:table_start] + TEXT[table_end:]
    for number in QUOTABLE.findall(elsewhere):
        assert number in checked, f"{number} is quoted but not checked"
    for value in checked:  # also the plain numbers the table checks (2.83, 768), standing alone in the prose
        assert re.search(rf"(?<![\w.,]){re.escape(value)}(?![\w]|[.,]\d)", elsewhere), f"{value} is no longer quoted"
    assert "2.83" in elsewhere


def test_the_quoted_accuracies_are_the_shipped_models_held_out_accuracy():
    """The plan's accuracies are the shipped models' one held-out accuracy (core.score: mean over relations, the
    card's sentences), not only numbers the demo happens to print; the parameter counts are the files' records."""
    import json

    import numpy as np

    from mhacli.grammar.score import percent, score
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

    def scored(name: str, alone: bool):
        return score(load_trained(shipped_model_path(alone=alone, name=name))[0])

    def metrics(name: str, alone: bool) -> dict:
        return json.loads(str(np.load(shipped_model_path(alone=alone, name=name))["metrics"]))

    row = next(r for r in _class_rows() if "One against many" in r[2])[2]
    letters, grammar_alone = scored("trained", True), scored("grammar", True)
    assert "mean over the relations" in row
    assert percent(letters.accuracy) in row and percent(grammar_alone.accuracy) in row
    by = dict(zip(grammar_alone.relations, grammar_alone.by_relation))
    assert percent(by["referent"]) in row and percent(by["recipient"]) in row
    assert f"{metrics('trained', True)['parameters']:,}" in row and f"{metrics('grammar', True)['parameters']:,}" in row
    for name in ("trained", "grammar"):
        assert percent(scored(name, False).accuracy) in row


def test_names_stay_hidden_wherever_the_class_names_what_a_head_does():
    naming = [r for r in _class_rows() if "name what each head" in (r[2] + r[4]).lower()]
    assert naming, "the plan has the naming activity"
    for row in naming:
        before_reveal = row[3].split("then")[0]
        assert "--hide-rules" in before_reveal and "slides/" in before_reveal
    # The figures the activity shows are drawn with the names hidden; the named ones go elsewhere.
    for command in _commands():
        if "--out slides" in command:
            assert "--hide-rules" in command, command
    demo_rows = [r for r in _class_rows() if re.search(r"step 1\b", r[3])]
    assert demo_rows and all("--hide-rules" in r[3] for r in demo_rows)


# Slow or long-running commands the plan names for outside the 45 minutes: checked to parse, not run here.
NOT_RUN = ("mha train",)


def _draws(argv: list[str]) -> bool:
    """Whether the command writes figures: explain and show unless --no-plots, demo and compare with --out."""
    if "--no-plots" in argv or "--help" in argv or "--step" in argv:
        return False
    return argv[0] in ("explain", "show") or (argv[0] in ("demo", "compare") and "--out" in argv)


@pytest.mark.parametrize("command", _commands())
@pytest.mark.slow
def test_every_command_in_the_plan_runs_as_written(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if command.startswith(NOT_RUN):
        result = CliRunner().invoke(app, [*_argv(command), "--help"])
        assert result.exit_code == 0, result.output
        return
    if "--step" not in command and command.startswith("mha demo") and "--no-pause" not in command:
        command += " --no-pause"  # the class presses Enter; standard input here is not a terminal anyway
    argv = _argv(command)
    if _draws(argv):
        # The plan's figures are drawn and written as the class would get them, at the smallest --dpi: what is
        # checked here is that the command runs, not its pixels (drawing four runs at 150 dpi was most of this
        # file's time). The default --dpi is drawn elsewhere (tests/test_figures.py).
        argv += ["--dpi", "30"]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "80"})
    assert result.exit_code == 0, f"{command}\n{result.output}"

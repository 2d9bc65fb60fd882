"""``mha train`` through CliRunner: table, conclusion, JSON, files, bad input, Ctrl-C."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli.commands import train as train_cli
from mhacli.cli.app import app
from mhacli.cli import options
from mhacli.grammar.tasks import TASKS
from mhacli.grammar.model import TrainConfig
from mhacli.models.trained import load_trained

runner = CliRunner()
FAST = ["--steps", "30", "--batch", "8"]


def test_cli_defaults_and_task_names_are_the_cores() -> None:
    defaults = {name: p.default for name, p in inspect.signature(train_cli.train).parameters.items()}
    core = TrainConfig()
    for name, value in options.TRAIN_DEFAULTS.items():
        # d, steps and lr default to None in the command: the task's own defaults fill them (TrainConfig.for_task)
        assert defaults[name] == (None if name in options.GRAMMAR_DEFAULTS else value), name
        assert value == getattr(core, name) == getattr(TrainConfig.for_task(core.task), name), name
    grammar = TrainConfig.for_task("grammar")
    assert all(getattr(grammar, name) == value for name, value in options.GRAMMAR_DEFAULTS.items())
    assert options.TASK_NAMES == tuple(TASKS)
    from mhacli.grammar.model import TRAIN_LIMITS

    assert all(TRAIN_LIMITS[name] == most for name, most in options.TRAIN_MOST.items())


def test_compare_prints_the_table_and_a_conclusion_from_its_numbers(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--compare", "1,2", *FAST, "--out", str(tmp_path / "figs"),
                                 "--save", str(tmp_path / "figs" / "model.npz")], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) == {"─"})  # under the header
    rows = [line.split() for line in lines[rule + 1:rule + 3]]
    assert [r[0] for r in rows] == ["1", "2"] and "1," in rows[0][2]  # heads, then 1,xxx parameters
    assert rows[0][2] == rows[1][2]  # equal parameter counts
    assert "With the same" in result.output and "head 1 " in result.output
    for name in ("training.png", "training-heads.png", "model.npz"):
        assert (tmp_path / "figs" / name).stat().st_size > 1000, name
    model, metrics = load_trained(tmp_path / "figs" / "model.npz")
    assert model.config.heads == 2 and f"{metrics['accuracy']:.1%}" in rows[1]


@pytest.mark.parametrize("task", ["neighbours", "grammar"])
def test_the_results_show_every_number_whole_at_80_and_40_columns(task: str) -> None:
    """A table at 80 columns (every task's), a record per run at 40: never a number cut to "…"."""
    from mhacli.render.train import fitted_results
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import train
    from rich.console import Console

    results = [train(TrainConfig.for_task(task, heads=h, steps=2)) for h in (1, 4)]
    numbers = [[f"{r.parameters:,}", f"{r.loss:.4f}", f"{r.accuracy:.1%}", *(f"{a:.1%}" for a in r.relation_accuracy)]
               for r in results]
    for width in (80, 40):
        console = Console(width=width, record=True, color_system=None)
        console.print(fitted_results(results))
        text = console.export_text()
        assert "…" not in text and max(map(len, text.splitlines())) <= width
        table = any(set(line) == {"─"} for line in text.splitlines())
        assert table == (width == 80), text  # the table where it fits, records where it does not
        for r, shown in zip(results, numbers):
            if table:
                assert any(line.split()[:1] == [str(r.heads)] and all(n in line.split() for n in shown)
                           for line in text.splitlines()), text
            else:
                assert f"{r.heads} head" in text and all(f": {n}" in text for n in shown), text


def test_json_is_one_document_with_every_run() -> None:
    result = runner.invoke(app, ["train", "--json", "--no-plots", "--compare", "1,4", *FAST])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["task"] == "neighbours" and [r["heads"] for r in doc["runs"]] == [1, 4]
    for run in doc["runs"]:
        assert {"heads", "d_model", "parameters", "loss", "accuracy", "steps", "seconds"} <= set(run)
        assert run["steps"] == 30 and 0 <= run["accuracy"] <= 1
    assert doc["runs"][0]["parameters"] == doc["runs"][1]["parameters"]


def test_same_seed_saves_identical_arrays(tmp_path: Path) -> None:
    for name in ("a.npz", "b.npz"):
        result = runner.invoke(app, ["train", "--no-plots", "--heads", "2", *FAST, "--save", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        for key in a.files:
            if key != "metrics":  # holds the seconds
                assert np.array_equal(a[key], b[key]), key


# Bad options of mha train (--task sorting, --steps 0, --lr inf, --compare two, …) are rows of
# docs/errors.md, checked by the one table-driven test in tests/test_errors.py.


def test_ctrl_c_exits_130_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mhacli.grammar.train as core

    real = core.train_stack

    def interrupted(configs, on_step=None):
        def stop(step: int, loss, accuracy) -> None:
            if step == 5:
                raise KeyboardInterrupt
        return real(configs, on_step=stop)

    monkeypatch.setattr(core, "train_stack", interrupted)
    out = tmp_path / "out"
    result = runner.invoke(app, ["train", *FAST, "--out", str(out), "--save", str(out / "model.npz")])
    assert result.exit_code == 130
    assert "interrupted" in result.output
    assert not out.exists()  # the folder made for the run goes with it


@pytest.mark.parametrize("heads", [1, 4])
def test_training_heads_png_texts_are_10_px_at_the_saved_size_and_its_rows_close_up(tmp_path: Path,
                                                                                    heads: int) -> None:
    """Every text of training-heads.png (tokens, titles, names, colour bar) is at least 10 px tall both as the
    file is (one file pixel, one projector pixel on 1920 × 1080) and fitted when larger; the rows of maps are
    no further apart than the columns (no empty bands)."""
    from matplotlib.text import Text
    from PIL import Image

    from mhacli.grammar.train import train
    from mhacli.render.figures.training import training_heads_figure

    result = train(TrainConfig(task="grammar", heads=heads, length=17, d_model=32, steps=2, batch=2, snapshots=5))
    fig = training_heads_figure(result)
    path = tmp_path / "training-heads.png"
    fig.savefig(path, format="png")  # as mha train saves it: the figure's own dpi
    dpi = fig.dpi
    with Image.open(path) as im:
        width, height = im.size
    scale = min(1.0, 1920 / width, 1080 / height)  # a smaller file is shown pixel for pixel, a larger one fitted
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip() and t.get_visible()]
    assert min(sizes) * dpi / 72 * scale >= 10.0, min(sizes)
    maps = [ax for ax in fig.axes if ax.images]  # row by row: a head's moments, then the next head's
    moments = len(result.snapshot_steps)
    assert len(maps) == heads * moments
    if heads > 1:
        w, h = fig.get_size_inches()
        first, below, right = (maps[0].get_position(), maps[moments].get_position(), maps[1].get_position())
        assert (first.y0 - below.y1) * h <= (right.x0 - first.x1) * w + 0.02


@pytest.mark.parametrize("args, words", [
    (["--task", "grammar", "--kv-heads", "3"], "--kv-heads 3 must divide --heads 4"),
    (["--kv-heads", "1,2"], "add --task grammar"),
    (["--task", "grammar", "--kv-heads", "1,2", "--compare", "1,4"], "leave one of them out"),
    (["--task", "grammar", "--kv-heads", "1", "--save", "m.npz"], "leave one of them out"),
    (["--task", "grammar", "--kv-heads", "1", "--knockout"], "leave one of them out"),
    (["--task", "grammar", "--kv-heads", "0"], "at least 1"),
])
def test_kv_heads_is_refused_in_one_line_where_it_cannot_be_measured(args: list[str], words: str) -> None:
    result = runner.invoke(app, ["train", *args, *FAST])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], result.output


def test_kv_heads_prints_each_g_s_accuracy_and_spread_over_the_seeds(tmp_path: Path) -> None:
    """Each g is the same layer with shared keys and values, its attention parameters 2d² + 2·d·g·d/h."""
    result = runner.invoke(app, ["train", "--task", "grammar", "--kv-heads", "1,2,4", "--seeds", "0-1", *FAST,
                                 "--out", str(tmp_path / "figs")], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()
            if line.split() and line.split()[0] in ("1", "2", "4")}
    assert [rows[g][1] for g in ("1", "2", "4")] == ["MQA", "GQA", "MHA"]
    assert [rows[g][2] for g in ("1", "2", "4")] == ["2,560", "3,072", "4,096"]  # 2d² + 2·d·g·d/h at d = 32
    assert "instead of 4" in result.output and "over the seeds" in result.output
    assert not (tmp_path / "figs").exists()  # no figures


@pytest.mark.slow
def test_kv_heads_json_holds_each_run_and_g_equal_to_h_is_the_plain_run() -> None:
    """g = h is the article's layer, exactly as trained without the option (its accuracy is the plain run's)."""
    import json

    doc = json.loads(runner.invoke(app, ["train", "--task", "grammar", "--kv-heads", "1,4", "--seeds", "0-1",
                                         *FAST, "--json"]).output)
    kv = doc["kv_sweep"]
    assert kv["kv_heads"] == [1, 4] and kv["seeds"] == [0, 1] and len(doc["runs"]) == 4
    assert [r.get("kv_heads") for r in doc["runs"]] == [1, None, 1, None]
    plain = json.loads(runner.invoke(app, ["train", "--task", "grammar", "--seed", "1", *FAST, "--json",
                                           "--no-plots"]).output)
    assert doc["runs"][3]["accuracy"] == plain["runs"][0]["accuracy"]
    assert kv["mean_accuracy"][1][1] == pytest.approx(plain["runs"][0]["accuracy"])

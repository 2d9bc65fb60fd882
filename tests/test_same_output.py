"""The same input gives the same output, before and after a refactoring: a run's JSON, its terminal text and
every figure's texts, size and image sums, for a few commands, against a record made on the code before
(tests/data/same_output.json; ``MHA_RECORD=1 pytest tests/test_same_output.py`` writes it again)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

RECORD = Path(__file__).resolve().parent / "data" / "same_output.json"
LONG = "the cat sat on the mat because the dog ran to the door and the bird flew away"

#: name -> (arguments, whether the command writes figures into an --out folder)
CASES = {
    "explain-json": (["explain", "the cat sat", "--heads", "2", "--d-model", "8", "--json", "--no-plots"], False),
    "explain-figures": (["explain", "the cat sat on the mat", "--heads", "2", "--causal"], True),
    "explain-window": (["explain", LONG, "--heads", "2", "--max-tokens", "6", "--query", "12"], True),
    "explain-designed": (["explain", "a b a b c", "--weights", "designed", "--heads", "4", "--max-tokens", "4"],
                         True),
    "compare-json": (["compare", "the cat sat on the mat", "--heads", "2", "--json", "--no-plots"], False),
    "compare-figures": (["compare", LONG, "--heads", "2", "--max-tokens", "8"], True),
    "demo": (["demo", "the cat sat on the mat", "--no-pause"], True),
    "show-figures": (["show", "{npz}", "--max-tokens", "4"], True),
    "show-json": (["show", "{npz}", "--json", "--no-json-arrays", "--no-plots"], False),
}


def _figure_record(fig) -> dict:
    """What a figure shows: its texts in drawing order, its size, and the sums of its images."""
    from matplotlib.image import AxesImage
    from matplotlib.text import Text

    texts = [t.get_text() for t in fig.findobj(Text) if t.get_text()]
    images = [round(float(np.nansum(np.ma.filled(im.get_array(), np.nan))), 6)
              for im in fig.findobj(AxesImage)]
    return {"texts": texts, "inches": [round(float(v), 3) for v in fig.get_size_inches()], "images": images}


def record(tmp_path: Path, monkeypatch) -> dict:
    """Every case's stdout (JSON or terminal text) and figures."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app
    import importlib

    save_module = importlib.import_module("mhacli.render.figures.save")

    figures: dict[str, dict] = {}
    original = save_module.save

    def recording(fig, path, fmt, dpi):
        figures[Path(path).name] = _figure_record(fig)
        return original(fig, path, fmt, 30)

    monkeypatch.setattr(save_module, "save", recording)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)  # relative paths: the same text whatever the temporary folder is
    runner = CliRunner()
    npz = Path("saved.npz")
    made = runner.invoke(app, ["explain", "the cat sat on the mat", "--heads", "2", "--no-plots", "--quiet",
                               "--save-npz", str(npz)])
    assert made.exit_code == 0, made.output
    out: dict[str, dict] = {}
    for name, (args, draws) in CASES.items():
        figures.clear()
        folder = Path(name)
        argv = [a.replace("{npz}", str(npz)) for a in args] + (["--out", str(folder), "--dpi", "30"] if draws else [])
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (name, result.output)
        stdout = result.stdout
        out[name] = {"stdout": json.loads(stdout) if "--json" in args else stdout.splitlines(),
                     "figures": dict(sorted(figures.items()))}
    return out


def test_the_same_input_gives_the_same_output(tmp_path, monkeypatch):
    got = json.loads(json.dumps(record(tmp_path, monkeypatch)))
    if os.environ.get("MHA_RECORD"):
        RECORD.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    want = json.loads(RECORD.read_text(encoding="utf-8"))
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name]["stdout"] == want[name]["stdout"], name
        assert sorted(got[name]["figures"]) == sorted(want[name]["figures"]), name
        for figure, shown in want[name]["figures"].items():
            assert got[name]["figures"][figure] == shown, (name, figure)


def test_the_record_covers_every_figure_kind():
    """The record is not empty: it holds each kind of figure and both kinds of stdout."""
    want = json.loads(RECORD.read_text(encoding="utf-8"))
    names = {f for case in want.values() for f in case["figures"]}
    assert {"head-1.png", "heads.png", "magnifiers.png", "split.png", "single-vs-multi.png"} <= names
    assert isinstance(want["explain-json"]["stdout"], dict) and want["explain-figures"]["stdout"]

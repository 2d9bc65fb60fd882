"""Issue 43: every surface of one run tells one story about its model, in the same words and numbers."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from mhacli.cli.app import app

SENTENCE = "The animal didn't cross the street because it was too tired"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _figure_texts(result, hide_rules: bool = False) -> dict[str, str]:
    """Every text each figure of a run draws, by figure: read from the matplotlib artists themselves."""
    from matplotlib.text import Text as MplText

    from mhacli.pipeline import shown
    from mhacli.render.figures import HeadFigure, drawing
    from mhacli.render.figures.heads import build_heads
    from mhacli.render.figures.magnifiers import build_magnifiers

    result = shown(result)  # the windows the figures draw, chosen by the pipeline as explain --out does
    trace = result.trace
    with drawing() as pen:
        per_head = HeadFigure(trace, result.figures, pen, hide_rules)
        figures = {f"head-{i + 1}": per_head.show(i) for i in range(trace.num_heads)}
        figures["heads"] = build_heads(trace, result.figures, pen, hide_rules)
        figures["magnifiers"] = build_magnifiers(trace, result.single, result.magnified, pen, hide_rules)
        return {name: _flat(" ".join(t.get_text() for t in fig.findobj(MplText))) for name, fig in figures.items()}


def test_the_grammar_model_before_training_never_says_its_weights_are_trained():
    """--weights grammar-untrained: the header, the JSON config, the walkthrough and heads.png's weights line all
    say the weights are untrained (before training); none says "weights trained" or "trained weights"."""
    from mhacli.pipeline import prepare

    runner = CliRunner()
    out = runner.invoke(app, ["explain", SENTENCE, "--weights", "grammar-untrained", "--no-plots"])
    assert out.exit_code == 0, out.output
    text = _flat(out.stdout)
    assert "weights untrained" in text and not re.search(r"weights trained|\btrained weights", text)
    assert "Measured in training" not in text and "Measured before training" in text
    doc = json.loads(runner.invoke(app, ["explain", SENTENCE, "--weights", "grammar-untrained", "--no-plots",
                                         "--json", "--no-json-arrays"]).stdout)
    assert doc["config"]["weights"] == "untrained"
    figures = _figure_texts(prepare(SENTENCE, weights="grammar-untrained").run(single=True))
    assert "untrained weights (before training)" in figures["heads"]
    assert not any(re.search(r"\btrained weights", t) for t in figures.values()), figures
    trained = _flat(runner.invoke(app, ["explain", SENTENCE, "--weights", "grammar", "--no-plots"]).stdout)
    assert "weights trained" in trained and "Measured in training" in trained  # the trained model as before

"""`mha compare --weights trained`: one head trained ALONE on the task beside the h heads trained together.

The package ships the one-head twin of its trained model (same documented command with --heads 1);
compare sets it beside the four heads and says, from both models' training records, what each reached.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli.app import app
from mhacli.measures import narrate
from mhacli.measures.analysis import analyse
from mhacli.measures.compare import TrainedApart, compare, spread
from mhacli.grammar.model import TrainConfig
from mhacli.models.trained import load_trained, shipped_apart, trained_arrays, trained_run, trained_trace
from mhacli.models.weights import shipped_model_path

# docs/training.md: mha train --task relations --heads 1 --seed 0 --no-plots --save mhacli/data/trained-1-head.npz
ALONE = TrainConfig(task="relations", heads=1, seed=0)
TEXT = "a b c d e f a b"


@pytest.mark.slow
def test_retraining_the_one_head_twin_with_the_documented_command_gives_the_shipped_arrays(retrained):
    fresh = trained_arrays(retrained(ALONE))
    with np.load(shipped_model_path(alone=True), allow_pickle=False) as shipped:
        for key in ("in_proj_weight", "out_proj.weight", "embedding", "positions", "readout"):
            # Another CPU's kernels round the last digits differently (see test_trained_shipped.py).
            np.testing.assert_allclose(fresh[key], shipped[key], rtol=0, atol=1e-6, err_msg=key)
        assert list(shipped["relations"]) == list(fresh["relations"])


def test_the_twins_differ_only_in_their_number_of_heads():
    (alone, alone_metrics), (heads, heads_metrics) = (load_trained(shipped_model_path(alone=True)),
                                                      load_trained(shipped_model_path()))
    a, h = alone.config, heads.config
    assert (a.heads, h.heads) == (1, 4)
    assert {**a.__dict__, "heads": 0} == {**h.__dict__, "heads": 0}  # task, d, steps, seed, length …
    assert alone_metrics["parameters"] == heads_metrics["parameters"]  # the article's claim, in the files
    assert alone_metrics["accuracy"] < 0.6 < 0.99 < heads_metrics["accuracy"]  # docs/training.md's numbers


def test_shipped_apart_scores_both_models_and_reads_their_records():
    from mhacli.grammar.score import score

    alone, apart = shipped_apart()
    _, alone_metrics = load_trained(shipped_model_path(alone=True))
    heads, heads_metrics = load_trained(shipped_model_path())
    assert apart.single_accuracy == score(alone).accuracy and apart.heads_accuracy == score(heads).accuracy
    assert apart.single_parameters == alone_metrics["parameters"] == apart.heads_parameters
    assert apart.single_relations == tuple(n for n, _ in alone.relations)
    assert apart.heads_relations == tuple(n for n, _ in heads.relations) and apart.task == "relations"


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


def test_compare_trained_sets_the_lone_head_beside_the_heads_and_says_what_each_reached():
    result = CliRunner().invoke(app, ["compare", TEXT, "--weights", "trained", "--no-plots", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    alone, apart = shipped_apart()
    lone = trained_trace(alone, tuple(TEXT.split()))
    assert data["single_trained_alone"] == apart.to_dict()
    expected = spread(np.asarray(lone.weights[0]), False, "1 head", None, lone.d_k)
    assert data["single_head"]["mean_entropy_bits"] == pytest.approx(expected.mean_entropy, abs=1e-12)
    assert data["single_head"]["pattern"] == analyse(lone).heads[0].pattern

    text = CliRunner().invoke(app, ["compare", TEXT, "--weights", "trained", "--no-plots"], env={"COLUMNS": "100"})
    assert text.exit_code == 0, text.output
    said = " ".join(text.stdout.split())
    assert "1 head alone" in said and "One head of size d = 16, trained alone" in said
    sentence = re.search(r"Trained apart on .*?held-out accuracy, .*?%\.", said)[0]
    assert _numbers(sentence) == pytest.approx([1904, 100 * apart.single_accuracy, 4,
                                                100 * apart.heads_accuracy], abs=0.05)


def test_compare_with_other_weights_keeps_the_same_matrices_as_one_head():
    result = CliRunner().invoke(app, ["compare", TEXT, "--no-plots", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["single_trained_alone"] is None
    text = CliRunner().invoke(app, ["compare", TEXT, "--weights", "designed", "--no-plots"])
    assert "Trained apart" not in text.stdout and "alone" not in text.stdout


@pytest.mark.parametrize("single_acc,relations,closing", [
    (0.514, ("next token", "first token", "previous token", "two back"), True),
    (0.514, ("next token", "next token", "previous token", "two back"), False),  # two heads do the same
    (1.0, ("next token", "first token", "previous token", "two back"), False),  # the lone head did as well
])
def test_apart_sentence_states_only_what_the_records_show(single_acc, relations, closing):
    apart = TrainedApart(task="relations", single_accuracy=single_acc, heads_accuracy=1.0, single_parameters=1904,
                         heads_parameters=1904, single_relations=("first token",), heads_relations=relations)
    text = narrate.apart_sentence(apart, 4)
    assert f"one head alone reached {single_acc:.1%}" in text and "the 4 heads together 100.0%" in text
    assert "the same 1,904 parameters" in text
    assert f"learned {relations[0]}, {relations[1]}, {relations[2]} and {relations[3]}" in text
    assert ("a relation of its own" in text) == closing
    other = narrate.apart_sentence(TrainedApart("relations", 0.5, 1.0, 1904, 2000), 4)
    assert "1,904 and 2,000 parameters" in other and "learned" not in other


def test_the_figure_says_trained_alone_and_both_accuracies():
    from matplotlib.text import Text

    from mhacli.notebook import compare_figure

    alone, apart = shipped_apart()
    heads, _ = load_trained(shipped_model_path())
    trace = trained_run(TEXT, heads)
    lone = trained_trace(alone, trace.tokens)
    texts = " ".join(t.get_text() for t in compare_figure(trace, lone, compare(trace, lone, apart)).findobj(Text))
    flat = " ".join(texts.split())
    assert "1 head alone (d = 16)" in flat and "trained alone" in flat and "same task (relations)" in flat
    assert f"held-out accuracy {apart.single_accuracy:.1%} against {apart.heads_accuracy:.1%}" in flat
    assert "same text, embedding, seed and weight matrices" not in flat  # not true of two trained models

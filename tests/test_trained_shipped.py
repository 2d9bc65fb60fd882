"""The trained model that ships in the package: `--weights trained` works at once, on any text,
and retraining with the documented command gives the same arrays."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli.app import app
from mhacli.measures.analysis import FIRST, NEXT, PREVIOUS, TWO_BACK, analyse
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import train
from mhacli.models.trained import trained_arrays
from mhacli.models.weights import shipped_model_path

# docs/training.md: mha train --task relations --heads 4 --seed 0 --no-plots --save mhacli/data/trained.npz
SHIPPED = TrainConfig(task="relations", heads=4, seed=0)
SENTENCE = "The animal didn't cross the street because it was too tired"


@pytest.mark.slow
def test_retraining_with_the_documented_command_gives_the_shipped_arrays(retrained):
    fresh = trained_arrays(retrained(SHIPPED))  # as mha train runs it: BLAS on one thread (core.train)
    with np.load(shipped_model_path(), allow_pickle=False) as shipped:
        for key in ("in_proj_weight", "out_proj.weight", "embedding", "positions", "readout"):
            # Same machine, same BLAS: the same bits. Another CPU's kernels round the last digits
            # differently and 1,500 Adam steps carry that along: the model shipped from an AMD EPYC
            # (OpenBLAS Zen) retrains on an Intel Xeon (SkylakeX kernel) to within 3.6e-9 of entries up
            # to 7. Another seed, task or step count moves entries by whole units, far outside this.
            np.testing.assert_allclose(fresh[key], shipped[key], rtol=0, atol=1e-6, err_msg=key)
        assert list(shipped["relations"]) == list(fresh["relations"])


@pytest.mark.parametrize("text", [SENTENCE, "a b c d e f g h", "the cat sat on the mat and then it slept"])
def test_each_trained_head_follows_its_own_relation_on_any_text(text):
    """Any words (stand-ins for the ten it was trained on), up to the 12 positions it trained with."""
    t = mhacli.run(text, weights="trained")
    assert t.kind == "trained" and t.num_heads == 4
    patterns = [(h.pattern, h.pattern_share) for h in analyse(t).heads]
    assert [p for p, _ in patterns] == [NEXT, FIRST, PREVIOUS, TWO_BACK], patterns
    assert all(share >= 0.9 for _, share in patterns), patterns


def test_longer_texts_are_said_to_be_beyond_what_the_model_saw():
    from mhacli.models.trained import trained_notes
    from mhacli.models.weights import resolve_weights

    model = resolve_weights("trained")
    long = ("the cat sat on the mat and then it slept " * 3).split()
    notes = trained_notes(model, long)
    assert any("trained on sequences of 12 tokens; this text has 30" in n for n in notes), notes
    assert any("stand in" in n and "'the'" in n for n in notes), notes
    assert trained_notes(model, list("abcdef")) == []


def test_explain_with_the_shipped_weights_from_the_command_line(tmp_path):
    r = CliRunner().invoke(app, ["explain", SENTENCE, "--weights", "trained", "--no-plots",
                                 "--save-npz", str(tmp_path / "t.npz")])
    assert r.exit_code == 0, r.output
    assert "weights trained" in r.output
    r = CliRunner().invoke(app, ["explain", SENTENCE, "--weights", "trained", "--heads", "2", "--no-plots"])
    assert r.exit_code == 2 and "the trained model has --heads 4" in r.output


def test_a_saved_model_file_is_taken_by_path(tmp_path):
    from mhacli.models.trained import save_trained

    result = train(TrainConfig(task="neighbours", heads=2, steps=30, seed=1))
    save_trained(result, tmp_path / "mine.npz")
    t = mhacli.run("x y z w", weights=tmp_path / "mine.npz")
    assert t.num_heads == 2 and t.kind == "trained"
    r = CliRunner().invoke(app, ["explain", "x y z w", "--weights", str(tmp_path / "mine.npz"), "--no-plots"])
    assert r.exit_code == 0 and "h = 2" in r.output


def test_grammar_untrained_is_the_grammar_models_own_layer_before_its_first_step():
    """--weights grammar-untrained: the shipped grammar model's task, width, heads and vocabulary with the
    parameters its training started from (train's step-0 snapshot, same seed), and every surface cautions that
    nothing was learned."""
    import json
    from dataclasses import replace

    from mhacli.models.trained import load_trained
    from mhacli.models.weights import resolve_weights

    trained = load_trained(shipped_model_path(name="grammar"))[0]
    before = resolve_weights("grammar-untrained")
    assert before.config == trained.config and before.vocabulary == trained.vocabulary
    assert {k: v.shape for k, v in before.params.items()} == {k: v.shape for k, v in trained.params.items()}
    assert not np.allclose(before.params["W_q"], trained.params["W_q"])
    first = train(replace(trained.config, steps=1, snapshots=2))  # snapshot 0: the weights before any step
    ids = before.ids(first.snapshot_tokens)[None, :]  # (1, N)
    np.testing.assert_allclose(before.attention(ids)[0], first.snapshots[0], atol=1e-12)
    runner = CliRunner()  # in-process: the installed script's way out is test_errors' and test_cli_conventions'
    out = runner.invoke(app, ["explain", SENTENCE, "--weights", "grammar-untrained", "--no-plots", "--json"])
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["config"]["d_model"], doc["config"]["heads"]) == (trained.config.d_model, trained.config.heads)
    assert "untrained" in json.dumps(doc) and "nothing here was learned" in json.dumps(doc)
    text = runner.invoke(app, ["explain", SENTENCE, "--weights", "grammar-untrained", "--no-plots"]).stdout
    assert "nothing here was learned" in " ".join(text.split())


def test_the_lesson_after_grammar_untrained_points_back_at_it():
    """The demo's what-next commands name --weights grammar-untrained, not the run's kind 'trained' (the d = 16
    letters model, which would refuse --d-model 32)."""
    runner = CliRunner()
    out = runner.invoke(app, ["demo", "the cat saw the dog", "--weights", "grammar-untrained", "--no-pause",
                              "--step", "15"]).output
    flat = " ".join(out.split())
    assert "--weights grammar-untrained" in flat and "--weights trained" not in flat

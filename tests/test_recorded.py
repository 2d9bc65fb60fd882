"""A trained model's held-out measures are measured once, when it is trained, and saved with it for exactly its
parameters: a run reads them back instead of drawing and running 2,000 sentences again (explain with the grammar
model spent about half its CPU there). Read back, they are the numbers a fresh measurement gives."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace

import numpy as np
import pytest

from mhacli.grammar import score as scoring
from mhacli.grammar.score import params_digest
from mhacli.models.shipped import shipped_model_path
from mhacli.models.trained import load_trained

# The product's own functions, never a test session's memo of them (tests/conftest.py): each call here measures.
score, crowd = inspect.unwrap(scoring.score), inspect.unwrap(scoring.crowd)

SHIPPED = [(name, alone) for name in ("trained", "grammar") for alone in (False, True)]


def _fresh(model):
    return replace(model, recorded={})


@pytest.mark.parametrize("name,alone", SHIPPED)
def test_each_shipped_model_carries_the_measures_a_fresh_measurement_gives(name, alone):
    model, _ = load_trained(shipped_model_path(alone=alone, name=name))
    assert model.recorded["params"] == params_digest(model.params)
    kept, measured = score(model), score(_fresh(model))
    assert kept.relations == measured.relations and kept.accuracy == measured.accuracy
    np.testing.assert_array_equal(kept.by_relation, measured.by_relation)
    np.testing.assert_array_equal(kept.queries, measured.queries)
    if model.sentences:
        kept_crowd, measured_crowd = crowd(model), crowd(_fresh(model))  # each measured once, both compared
        np.testing.assert_array_equal(kept_crowd.accuracy, measured_crowd.accuracy)
        np.testing.assert_array_equal(kept_crowd.queries, measured_crowd.queries)
    else:
        assert "crowd" not in model.recorded


def _rewritten(tmp_path, change):
    """The shipped grammar model written again with ``change`` applied to its arrays (a dict)."""
    with np.load(shipped_model_path(name="grammar"), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    path = tmp_path / "edited.npz"
    np.savez(path, **arrays)
    return path


def _metrics(arrays, edit):
    metrics = json.loads(str(arrays["metrics"]))
    edit(metrics)
    arrays["metrics"] = np.array(json.dumps(metrics, sort_keys=True))


def test_a_record_of_other_weights_is_not_read_the_measures_are_made_again(tmp_path):
    def nudge(arrays):
        arrays["readout"] = np.ascontiguousarray(arrays["readout"][:, ::-1])  # other weights, the old record kept

    model, _ = load_trained(_rewritten(tmp_path, nudge))
    assert model.recorded == {}
    shipped, _ = load_trained(shipped_model_path(name="grammar"))
    assert score(model).accuracy != score(shipped).accuracy  # measured on the weights it has, not read


@pytest.mark.parametrize("edit", [
    lambda m: m["held_out"]["score"].pop("relation_accuracy"),
    lambda m: m["held_out"]["score"].__setitem__("queries", "many"),
    lambda m: m["held_out"]["crowd"].__setitem__("accuracy", None),
    lambda m: m.__setitem__("held_out", ["not", "a", "record"]),
], ids=["no rates", "queries not numbers", "crowd emptied", "not a dict"])
def test_an_edited_record_is_measured_again_never_a_traceback(tmp_path, edit):
    model, _ = load_trained(_rewritten(tmp_path, lambda arrays: _metrics(arrays, edit)))
    assert model.recorded == {}
    shipped, _ = load_trained(shipped_model_path(name="grammar"))
    assert score(model).accuracy == score(_fresh(shipped)).accuracy


def test_a_training_records_its_score_and_saving_adds_the_crowd(tmp_path):
    from mhacli.grammar.score import measured
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import train
    from mhacli.models.trained import save_trained

    result = measured(train(TrainConfig(task="grammar", heads=2, steps=20, seed=3, length=17)))
    assert result.model.recorded["params"] == params_digest(result.model.params)
    assert score(result.model).accuracy == result.accuracy == score(_fresh(result.model)).accuracy
    path = save_trained(result, tmp_path / "m.npz")
    back, _ = load_trained(path)
    assert set(back.recorded) == {"params", "score", "crowd"}
    np.testing.assert_array_equal(crowd(back).accuracy, crowd(_fresh(back)).accuracy)


def test_a_model_with_shared_keys_and_values_is_refused_before_a_file_is_written(tmp_path):
    """The file format holds one key and one value matrix per head; a grouped model would be written unreadable."""
    from mhacli.attention.errors import UsageError
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import train
    from mhacli.models.trained import save_trained

    result = train(TrainConfig(task="grammar", heads=2, kv_heads=1, steps=5, seed=1, length=17))
    with pytest.raises(UsageError, match="share 1 key/value heads cannot be saved"):
        save_trained(result, tmp_path / "g.npz")
    assert list(tmp_path.iterdir()) == []


def test_a_model_given_other_parameters_in_memory_keeps_no_stale_record():
    shipped, _ = load_trained(shipped_model_path(name="grammar"))
    params = dict(shipped.params)
    params["readout"] = np.ascontiguousarray(params["readout"][:, ::-1])
    other = replace(shipped, params=params)  # the record still rides along, for the old weights
    assert other.recorded and scoring.kept_score(other) is None and scoring.kept_crowd(other) is None
    assert scoring.score(other).accuracy == score(_fresh(other)).accuracy != scoring.score(shipped).accuracy

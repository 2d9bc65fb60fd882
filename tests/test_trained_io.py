"""Trained-model files: round trip, PyTorch layout, validation, and traces made from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mhacli.attention.errors import UsageError
from mhacli.attention.trace import run_tokens
from mhacli.attention.config import Config
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import train
from mhacli.models.trained import load_trained, save_trained, trained_arrays, trained_run, trained_trace


@pytest.fixture(scope="module")
def result():
    return train(TrainConfig(heads=2, d_model=8, steps=40, batch=8, length=6, held_out=10, positions="learned"))


def test_round_trip_keeps_every_parameter_and_label(result, tmp_path: Path) -> None:
    path = save_trained(result, tmp_path / "model.npz")
    model, metrics = load_trained(path)
    for name, value in result.model.params.items():
        assert np.array_equal(model.params[name], value), name
    assert model.config == result.config and model.vocabulary == result.model.vocabulary
    assert model.relations == result.model.relations
    assert metrics["accuracy"] == result.accuracy and metrics["parameters"] == result.parameters
    with np.load(path, allow_pickle=False) as data:  # plain arrays only
        assert int(data["format_version"]) == 1 and data["in_proj_weight"].shape == (24, 8)


@pytest.mark.torch
def test_saved_weights_reproduce_the_trace_in_pytorch(result, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the nn.MultiheadAttention check needs it")
    tokens = ["a", "c", "b", "a", "j"]
    trace = trained_trace(result.model, tokens)
    arrays = trained_arrays(result)
    mha = torch.nn.MultiheadAttention(8, 2, bias=False, batch_first=True, dtype=torch.float64)
    mha.load_state_dict({"in_proj_weight": torch.tensor(arrays["in_proj_weight"]),
                         "out_proj.weight": torch.tensor(arrays["out_proj.weight"])})
    x = torch.tensor(trace.X)[None]
    out, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(out[0].detach().numpy(), trace.output, atol=1e-12)
    np.testing.assert_allclose(weights[0].detach().numpy(), trace.weights, atol=1e-12)


def test_trained_trace_is_a_normal_trace_with_the_learned_relations(result) -> None:
    trace = trained_run("a b c d", result.model)
    assert trace.config.weights == "trained" and trace.weights.shape == (2, 4, 4)
    assert trace.rules == result.model.labels and "queries" in trace.rules[0]
    np.testing.assert_allclose(trace.weights, result.model.attention(np.array([[0, 1, 2, 3]]))[0])


def _expected_stand_in(word: str, vocabulary: tuple[str, ...]) -> str:
    """The documented rule, computed here independently: SHA-256 of a fixed prefix and the word."""
    import hashlib

    words = [w for w in vocabulary if w != "·"]
    digest = hashlib.sha256(f"mhacli-stand-in\x00{word}".encode("utf-8")).digest()
    return words[int.from_bytes(digest[:8], "little") % len(words)]


def test_text_outside_the_vocabulary_runs_with_stable_stand_ins_and_says_so(result) -> None:
    """Trained weights apply to any text: a word the model never saw is read as one of its words,
    chosen by a stable SHA-256 hash, and the notes name every such word and its stand-in."""
    from mhacli.models.trained import trained_notes

    model = result.model
    assert "cat" not in model.vocabulary and "dog" not in model.vocabulary
    trace = trained_run("a cat dog", model)
    assert trace.tokens == ("a", "cat", "dog")
    stand = model.stand_ins(trace.tokens)
    assert set(stand) == {"cat", "dog"} and "a" not in stand
    for word in ("cat", "dog"):
        assert stand[word] == _expected_stand_in(word, model.vocabulary)
    # The unknown word's row of X is its stand-in's: the run is the stand-ins' run, exactly.
    same = trained_run(f"a {stand['cat']} {stand['dog']}", model)
    np.testing.assert_array_equal(trace.X, same.X)
    np.testing.assert_array_equal(trace.weights, same.weights)
    assert trace.tokens != same.tokens  # ... but the trace keeps the words that were typed
    # Stable: the same words stand in on every run (no Python hash(), no process salt).
    np.testing.assert_array_equal(trained_run("a cat dog", model).weights, trace.weights)
    notes = trained_notes(model, trace.tokens)
    assert len(notes) == 1
    assert f"'cat' → {stand['cat']}" in notes[0] and f"'dog' → {stand['dog']}" in notes[0]
    assert " ".join(model.vocabulary) in notes[0] and "stable hash" in notes[0]
    assert trained_notes(model, ("a", "b")) == []  # known words: nothing to say
    # Learned positions exist only as far as the model was trained: that is still refused.
    with pytest.raises(UsageError, match="positions for 6 tokens, the text has 7"):
        trained_run("a b c d e f g", model)


def test_trained_weights_without_a_model_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="weights='trained' needs a trained model file"):
        run_tokens(["a"], Config(weights="trained"))


def _write(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("make, words", [
    (lambda p: p, "does not exist"),
    (lambda p: (p.write_text("hello"), p)[1], "not an npz file"),
    (lambda p: _write(p, weights=np.zeros((2, 3, 3))), "no 'kind' member"),
    (lambda p: _write(p, kind=np.array("mhacli-trained")), "it lacks format_version"),
])
def test_files_that_are_not_trained_models_are_usage_errors(tmp_path: Path, make, words: str) -> None:
    path = make(tmp_path / "x.npz")
    with pytest.raises(UsageError, match=words):
        load_trained(path)


def test_damaged_members_are_refused(result, tmp_path: Path) -> None:
    arrays = trained_arrays(result)
    for key, bad, words in [("format_version", np.array(2), "format_version"),
                            ("embedding", np.full((11, 8), np.inf), "not finite"),
                            ("out_proj.weight", np.zeros((3, 3)), "shapes do not fit"),
                            ("config", np.array("{}x"), "cannot be read")]:
        path = _write(tmp_path / f"{key}.npz", **{**arrays, key: bad})
        with pytest.raises(UsageError, match=words):
            load_trained(path)

"""from_attention: any model's attention weights, checked at once, as a read-only view."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mhacli
from mhacli.attention.errors import UsageError
from traced import run
from mhacli.measures.view import from_attention, is_causal

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def softmax_rows(rng: np.random.Generator, shape: tuple[int, ...], causal: bool = False) -> np.ndarray:
    s = rng.standard_normal(shape)
    if causal:
        s = np.where(np.triu(np.ones(shape[-2:], dtype=bool), 1), -np.inf, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_one_layer_of_heads():
    w = softmax_rows(np.random.default_rng(0), (4, 6, 6))
    view = from_attention(w, TOKENS)
    assert (view.num_heads, view.n_tokens, view.n_layers, view.causal) == (4, 6, 1, False)
    assert np.array_equal(view.weights, w) and not view.weights.flags.writeable
    assert view.layer_names == ("layer 0",) and view.mask is None


def test_layers_and_the_layer_picker():
    w = softmax_rows(np.random.default_rng(1), (3, 2, 6, 6))
    view = from_attention(w, TOKENS, layer_names=["a", "b", "c"], layer=2)
    assert view.layer == 2 and np.array_equal(view.weights, w[2])
    assert np.array_equal(view.at_layer(0).weights, w[0])
    with pytest.raises(UsageError, match=r"layer=3 is out of range: this attention has 3 layers \(0–2\)"):
        view.at_layer(3)


def test_bertviz_tuple_of_per_layer_batches():
    rng = np.random.default_rng(2)
    per_layer = tuple(softmax_rows(rng, (1, 2, 6, 6)) for _ in range(3))
    view = from_attention(per_layer, TOKENS)
    assert view.n_layers == 3 and np.array_equal(view.layers[1], per_layer[1][0])


def test_anything_with___array___is_taken_without_importing_torch():
    class Tensorish:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a if dtype is None else self.a.astype(dtype)

    w = softmax_rows(np.random.default_rng(3), (2, 6, 6))
    assert np.array_equal(from_attention(Tensorish(w), TOKENS).weights, w)


@pytest.mark.torch
def test_torch_tensors_with_grad_are_taken():
    torch = pytest.importorskip("torch", reason="PyTorch is optional")
    w = torch.softmax(torch.randn(2, 6, 6, requires_grad=True), dim=-1)
    assert from_attention(w, TOKENS).num_heads == 2


def test_causal_is_found_from_the_weights():
    rng = np.random.default_rng(4)
    assert from_attention(softmax_rows(rng, (2, 6, 6), causal=True), TOKENS).causal
    assert not from_attention(softmax_rows(rng, (2, 6, 6)), TOKENS).causal
    with pytest.raises(UsageError, match="causal=True, but some query gives weight to a later key"):
        from_attention(softmax_rows(rng, (2, 6, 6)), TOKENS, causal=True)


def test_the_tools_own_trace_round_trips():
    t = run(" ".join(TOKENS), heads=4, causal=True)
    view = from_attention(t.weights, t.tokens)
    assert view.causal and np.array_equal(view.weights, t.weights) and view.mask is not None


@pytest.mark.parametrize("weights,tokens,message", [
    (np.full((6, 6), 1 / 6), TOKENS, r"must be \(h, N, N\) or \(layers, h, N, N\)"),
    (np.full((2, 6, 5), 1 / 5), TOKENS, "must be square"),
    (np.full((2, 5, 5), 1 / 5), TOKENS, "covers 5 tokens but 6 tokens were given"),
    (np.full((2, 6, 6), 1.0), TOKENS, "sums to 6, not 1"),
    (np.full((2, 6, 6), np.nan), TOKENS, "infinite or NaN"),
    (np.full((2, 6, 6), 1 / 6) - np.eye(6) * 2, TOKENS, "negative values"),
    (np.array([["a"] * 6] * 6 * 2).reshape(2, 6, 6), TOKENS, "not an array of numbers"),
    ((), TOKENS, "empty list"),
])
def test_bad_attention_gets_one_clear_error(weights, tokens, message):
    with pytest.raises(UsageError, match=message):
        from_attention(weights, tokens)


def test_head_names_must_match_the_heads():
    w = softmax_rows(np.random.default_rng(5), (2, 6, 6))
    assert from_attention(w, TOKENS, names=["prev", "next"]).rules == ("prev", "next")
    with pytest.raises(UsageError, match="3 head names for 2 heads"):
        from_attention(w, TOKENS, names=["a", "b", "c"])


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 4), n=st.integers(1, 8), layers=st.integers(1, 3), causal=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_any_valid_attention_is_accepted_and_kept_exactly(h, n, layers, causal, seed):
    w = softmax_rows(np.random.default_rng(seed), (layers, h, n, n), causal)
    view = from_attention(w, [f"t{i}" for i in range(n)])
    assert np.array_equal(view.layers, w)
    assert view.causal == (causal and n > 1) == is_causal(w)


def test_reprs_are_a_few_lines_not_the_arrays():
    t = run(" ".join(TOKENS * 20), heads=4)
    for obj in (t, from_attention(t.weights, t.tokens)):
        text = repr(obj)
        assert len(text.splitlines()) <= 4 and len(text) < 400, text
        assert "120 tokens" in text and "the cat sat" in text


def test_attention_npz_round_trips_with_layers(tmp_path):
    from mhacli.models.attention_file import load_attention, save_attention

    w = softmax_rows(np.random.default_rng(9), (3, 2, 6, 6), causal=True)
    view = from_attention(w, TOKENS, layer_names=["L0", "L1", "L2"], names=["a", "b"])
    save_attention(view, tmp_path / "mine.npz")
    back = load_attention(tmp_path / "mine.npz", layer=1)
    assert np.array_equal(back.layers, w) and back.layer == 1 and back.causal
    assert back.layer_names == ("L0", "L1", "L2") and back.head_names == ("a", "b")
    assert back.source == str(tmp_path / "mine.npz")
    with pytest.raises(UsageError, match="layer=3 is out of range"):
        load_attention(tmp_path / "mine.npz", layer=3)


@pytest.mark.parametrize("arrays,message", [
    ({"weights": np.full((1, 2, 2), 0.5)}, "holds no attention .* and 'tokens'"),
    ({"weights": np.full((1, 2, 2), 0.5), "tokens": np.array([1, 2])}, "must be a 1-d array of strings"),
    ({"weights": np.array([["a", "b"]] * 2)[None], "tokens": np.array(["x", "y"])}, "must hold numbers"),
    ({"weights": np.full((1, 3, 3), 0.5), "tokens": np.array(["x", "y", "z"])}, "sums to 1.5, not 1"),
])
def test_bad_attention_files_get_one_clear_error(tmp_path, arrays, message):
    from mhacli.models.attention_file import load_attention

    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(UsageError, match=message):
        load_attention(tmp_path / "bad.npz")


def test_devices_are_refused_at_once():
    from mhacli.models.attention_file import load_attention

    with pytest.raises(UsageError, match="not a regular file"):
        load_attention("/dev/zero")


def test_a_view_is_measured_like_the_run_it_came_from():
    from mhacli.measures.analysis import analyse

    t = run("the dog saw the cat and the cat saw the dog", heads=4, weights="designed", causal=True)
    mine, theirs = analyse(from_attention(t.weights, t.tokens)), analyse(t)
    assert mine.causal and mine.kind == "your model" and mine.rules is None
    assert [(s.pattern, s.pattern_key, s.pattern_rows, s.pattern_of) for s in mine.heads] == \
        [(s.pattern, s.pattern_key, s.pattern_rows, s.pattern_of) for s in theirs.heads]
    assert np.array_equal(mine.agreement, theirs.agreement) and np.allclose(mine.js, theirs.js)
    named = analyse(from_attention(t.weights, t.tokens, names=["a", "b", "c", "d"]).at_layer(0))
    assert named.rules == ("a", "b", "c", "d")


# ---------------------------------------------------------------------------
# mha show FILE.npz --layer: your model's attention from the command line
# ---------------------------------------------------------------------------


@pytest.fixture()
def attention_npz(tmp_path):
    t = run("the dog saw the cat and the cat saw the dog", heads=4, weights="designed", causal=True)
    w = softmax_rows(np.random.default_rng(11), (3, 4, 11, 11), causal=True)
    w[1] = t.weights
    path = tmp_path / "mine.npz"
    np.savez(path, weights=w.astype(np.float32), tokens=np.array(t.tokens),
             layer_names=np.array(["embed", "block.1", "block.2"]))
    return path, w, t


@pytest.mark.parametrize("layer", ["1", "block.1", "BLOCK.1"])
@pytest.mark.slow
def test_show_draws_the_chosen_layer_into_figures_and_a_page(runner, attention_npz, layer):
    import json
    import re

    from mhacli.cli.app import app

    path, w, t = attention_npz
    out, page = path.parent / "figs", path.parent / "page.html"
    result = runner.invoke(app, ["show", str(path), "--layer", layer, "-o", str(out), "--dpi", "30",
                                 "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["head-1.png", "head-2.png", "head-3.png", "head-4.png",
                                                     "heads.png", "magnifiers.png"]
    from mhacli.io.outputs import figure_names

    assert sorted(figure_names(4, split=False)) == sorted(p.name for p in out.iterdir())  # what was planned
    assert "attention from mine.npz, layer 1 of 0–2 (block.1)" in result.output
    for rule in ("previous token", "earlier copy", "first token", "itself"):
        assert rule in result.output  # each grid is titled with its measured relation
    data = json.loads(re.search(r'id="mha-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["kind"] == "view" and data["layer"] == 1 and data["steps"] is None
    np.testing.assert_allclose(np.array(data["weights"]), w[1], atol=1e-4)


def test_show_json_of_a_layer_is_its_weights_and_measures(runner, attention_npz):
    import json

    from mhacli.cli.app import app

    path, w, _ = attention_npz
    result = runner.invoke(app, ["show", str(path), "--layer", "1", "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["layer"] == 1 and doc["layer_names"] == ["embed", "block.1", "block.2"] and doc["causal"]
    np.testing.assert_allclose(np.array(doc["weights"]), w[1].astype(np.float32), atol=1e-7)
    assert [h["pattern"] for h in doc["head_summaries"]] == ["previous token", "earlier copy", "first token",
                                                             "itself"]


@pytest.mark.parametrize("args,message", [
    (["--layer", "3"], "--layer 3 is out of range: this attention has 3 layers (0–2)."),
    (["--layer", "-1"], "--layer -1 is out of range"),
    (["--layer", "nope"], "--layer 'nope' is not a layer of"),
    (["--show-values"], "an attention file holds only the weights"),
])
def test_show_refuses_a_bad_layer_in_one_line(runner, attention_npz, args, message):
    from mhacli.cli.app import app

    path, _, _ = attention_npz
    result = runner.invoke(app, ["show", str(path), "--no-plots", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 2


def test_layer_of_a_saved_run_is_refused(runner, tmp_path):
    from mhacli.cli.app import app

    npz = tmp_path / "run.npz"
    assert runner.invoke(app, ["explain", "the cat sat", "--no-plots", "--save-npz", str(npz)]).exit_code == 0
    result = runner.invoke(app, ["show", str(npz), "--layer", "2", "--no-plots"])
    assert result.exit_code == 2 and "a saved run of mha explain has one layer" in result.output


def test_show_of_a_view_plans_no_split_figure(attention_npz):
    # The plan (what is checked and counted before any work) names exactly what a view writes.
    from mhacli.cli.flow import plan_outputs

    path, _, _ = attention_npz
    plan = plan_outputs(plots=True, out=path.parent / "figs", fmt="png", heads=4, split=False)
    assert [p.name for p in plan.figures] == ["head-1.png", "head-2.png", "head-3.png", "head-4.png",
                                              "heads.png", "magnifiers.png"]


@pytest.mark.parametrize("kind", ["run", "view"])
@pytest.mark.slow
def test_save_figures_reports_each_file_as_it_is_written(tmp_path, kind):
    import os

    from mhacli.notebook import save_figures

    t = run("the cat sat", heads=2, d_model=8)
    shown = t if kind == "run" else from_attention(t.weights, t.tokens)
    seen = []

    def on_saved(path):  # the file is whole on disk when it is reported
        seen.append((path, os.path.getsize(path)))

    saved = save_figures(shown, tmp_path, dpi=30, on_saved=on_saved)
    assert [p for p, _ in seen] == list(saved) and all(size > 0 for _, size in seen)
    assert len(seen) == (5 if kind == "run" else 4)


def test_show_json_of_a_view_spells_out_bidi_and_escape_characters(runner, tmp_path):
    # The view's JSON goes through json_text like every other document: U+202E and ESC as \u escapes,
    # and the tokens decode back exactly.
    import json

    from mhacli.cli.app import app

    tokens = ["a", "b\u202ec", "d\x1b[2J"]
    w = softmax_rows(np.random.default_rng(3), (1, 2, 3, 3), causal=False)
    np.savez(tmp_path / "odd.npz", weights=w, tokens=np.array(tokens))
    result = runner.invoke(app, ["show", str(tmp_path / "odd.npz"), "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "\u202e" not in result.stdout and "\x1b" not in result.stdout
    assert "\\u202e" in result.stdout and json.loads(result.stdout)["tokens"] == tokens


# --- zero-size and odd inputs (issue 21, family 8) -----------------------------------------------------

@pytest.mark.parametrize("weights,message", [
    (np.zeros((0, 2, 3, 3)), r"empty \(shape \(0, 2, 3, 3\).*attn_implementation=\"eager\""),
    (np.zeros((1, 0, 3, 3)), r"empty \(shape \(1, 0, 3, 3\): 1 layers × 0 heads"),
    (np.zeros((1, 2, 0, 0)), r"empty \(shape \(1, 2, 0, 0\)"),
    (np.zeros((0,)), r"empty \(shape \(0,\)\)"),
])
def test_zero_size_attention_is_one_clear_error(weights, message):
    from mhacli.measures.view import from_attention

    with pytest.raises(UsageError, match=message):
        from_attention(weights, ["a", "b", "c"][: weights.shape[-1]] if weights.ndim == 4 else [])


@pytest.mark.parametrize("layer", [1.5, "1", True, -1, None])
def test_a_layer_that_is_not_a_whole_number_in_range_is_refused_at_once(layer):
    from mhacli.measures.view import from_attention

    with pytest.raises(UsageError, match="layer must be"):
        from_attention(np.full((2, 2, 3, 3), 1 / 3), ["a", "b", "c"], layer=layer)


def test_numpy_integers_pick_a_layer():
    from mhacli.measures.view import from_attention

    assert from_attention(np.full((2, 2, 3, 3), 1 / 3), ["a", "b", "c"], layer=np.int64(1)).layer == 1


@pytest.mark.parametrize("causal", [True, 1, np.True_])
def test_every_spelling_of_true_checks_the_causal_claim(causal):
    """causal=1 and np.True_ skipped the check (it tested ``is True``)."""
    from mhacli.measures.view import from_attention

    with pytest.raises(UsageError, match="some query gives weight to a later key"):
        from_attention(np.full((2, 3, 3), 1 / 3), ["a", "b", "c"], causal=causal)


@pytest.mark.parametrize("causal", ["no", 2, "False"])
def test_a_causal_that_is_not_true_or_false_is_refused(causal):
    from mhacli.measures.view import from_attention

    with pytest.raises(UsageError, match="causal must be True or False"):
        from_attention(np.full((2, 3, 3), 1 / 3), ["a", "b", "c"], causal=causal)


def test_head_weights_of_a_head_that_does_not_exist_raise():
    trace = mhacli.run("the cat sat", heads=2)
    assert trace.head_weights(1)[0].shape == (16, 8)
    for bad in (5, 2, -1):
        with pytest.raises(UsageError, match=f"head {bad} is out of range: this run has 2 heads"):
            trace.head_weights(bad)


# --- tolerances scale with the dtype; messages say what was wrong (family 10) ---------------------------

def _softmax(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.torch
def test_bfloat16_softmax_from_pytorch_is_attention():
    """torch.softmax in bfloat16 gives rows summing to 0.9985 at N = 5: attention, not a mistake."""
    torch = pytest.importorskip("torch", reason="PyTorch makes the bfloat16 softmax")
    from mhacli.measures.view import from_attention

    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(2, 5, 5) * 3, dim=-1).to(torch.bfloat16)
    assert float((weights.float().sum(-1) - 1).abs().max()) > 1e-3  # the old tolerance refused these
    assert from_attention(weights, list("abcde")).num_heads == 2


@pytest.mark.parametrize("dtype,off,accepted", [
    (np.float16, 1e-3, True), (np.float16, 2e-2, False),
    (np.float32, 3e-7, True), (np.float32, 1e-4, False),
    (np.float64, 3e-7, True), (np.float64, 1e-4, False),
])
def test_the_row_sum_tolerance_follows_the_dtype(dtype, off, accepted):
    from mhacli.measures.view import from_attention

    weights = np.full((1, 4, 4), 0.25)
    weights[0, 2, 0] += off  # one row off by `off`, still in [0, 1]
    weights = weights.astype(dtype)
    if accepted:
        assert from_attention(weights, list("abcd")).n_tokens == 4
    else:
        with pytest.raises(UsageError, match="row 2 of head 1 in layer 0 sums to .*rounding allows"):
            from_attention(weights, list("abcd"))


@pytest.mark.parametrize("weights,message", [
    (np.random.default_rng(0).normal(size=(2, 4, 4)), "negative values .* look like scores"),
    (np.abs(np.random.default_rng(0).normal(size=(2, 4, 4))) + 1.0, "above 1 .* look like scores"),
    (np.swapaxes(_softmax(np.tril(np.random.default_rng(1).normal(size=(2, 4, 4)) * 3)), -1, -2),
     "columns sum to 1: the array seems transposed"),
])
def test_the_message_says_what_was_wrong(weights, message):
    from mhacli.measures.view import from_attention

    with pytest.raises(UsageError, match=message):
        from_attention(weights, list("abcd"))


def test_softmax_weights_are_never_told_to_pass_weights_after_softmax():
    """Rows that are a softmax with one key cut off: the message does not say 'pass the weights after softmax'."""
    from mhacli.measures.view import from_attention

    weights = _softmax(np.random.default_rng(2).normal(size=(2, 5, 5)))[:, :4, :4]  # the fifth key cut off
    with pytest.raises(UsageError) as caught:
        from_attention(weights, list("abcd"))
    assert "after softmax" not in str(caught.value) and "keys cut off" in str(caught.value)


# --- attention files as people have them (issue 22, item 3) -------------------------------------------

@pytest.mark.parametrize("key", ["weights", "attentions", "attention"])
def test_the_attention_may_be_named_as_people_name_it(tmp_path, key):
    from mhacli.models.attention_file import is_attention_file, load_attention

    np.savez(tmp_path / "a.npz", **{key: np.full((1, 2, 3, 3), 1 / 3), "tokens": np.array(["a", "b", "c"])})
    assert is_attention_file(tmp_path / "a.npz") and load_attention(tmp_path / "a.npz").num_heads == 2


def test_bytes_tokens_are_decoded_and_object_tokens_refused_never_unpickled(tmp_path):
    from mhacli.models.attention_file import load_attention

    weights = np.full((2, 3, 3), 1 / 3)
    np.savez(tmp_path / "bytes.npz", weights=weights, tokens=np.array([b"caf\xc3\xa9", b"\xff", b"x"]))
    assert load_attention(tmp_path / "bytes.npz").tokens == ("café", "\\xff", "x")
    marker = tmp_path / "unpickled"

    class Boom:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    np.savez(tmp_path / "objects.npz", weights=weights, tokens=np.array([Boom(), "b", "c"], dtype=object))
    with pytest.raises(UsageError, match="'tokens' holds Python objects, which would have to be unpickled"):
        load_attention(tmp_path / "objects.npz")
    assert not marker.exists()


def test_a_batch_in_a_file_needs_an_index_and_gets_the_sequence_it_names(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app
    from mhacli.models.attention_file import load_attention

    rng = np.random.default_rng(3)
    weights = _softmax(rng.normal(size=(2, 3, 2, 4, 4)))  # (layers, batch, heads, N, N)
    np.savez(tmp_path / "batch.npz", attentions=weights, tokens=np.array(list("abcd")))
    with pytest.raises(UsageError, match="batch of 3 sequences; pick one with batch_index"):
        load_attention(tmp_path / "batch.npz")
    assert np.allclose(load_attention(tmp_path / "batch.npz", batch_index=2).layers, weights[:, 2])
    runner = CliRunner()
    r = runner.invoke(app, ["show", str(tmp_path / "batch.npz"), "--no-plots", "--batch-index", "1", "--json"])
    assert r.exit_code == 0, r.output
    import json

    assert np.allclose(json.loads(r.output)["weights"], weights[0, 1])
    for argv, words in ((["--no-plots"], "pick one with --batch-index (0 to 2)"),
                        (["--no-plots", "--batch-index", "3"], "--batch-index 3 is out of range")):
        r = runner.invoke(app, ["show", str(tmp_path / "batch.npz"), *argv])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output


def test_an_empty_attention_tuple_says_how_to_get_weights():
    from mhacli.measures.view import from_attention

    for empty in ((), [], (None, None)):
        with pytest.raises(UsageError, match='attn_implementation="eager" and run it with output_attentions=True'):
            from_attention(empty, ["a", "b"])

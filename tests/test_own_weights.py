"""Your own weights: an nn.MultiheadAttention state dict (biases optional) runs through the core.

The numpy reference (the slow per-head loop, with biases) always runs; PyTorch's own
module is compared when torch is installed (float64, 1e-9).
"""

from __future__ import annotations

import numpy as np
import pytest

import mhacli
from mhacli.attention.errors import UsageError
from mhacli.measures.verify import reference_loop, verify
from mhacli.models.state_dict import from_state_dict, to_state_dict

TEXT = "the cat sat on the mat because it was tired"


def state_dict(d: int, seed: int, biases: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sd = {"in_proj_weight": rng.standard_normal((3 * d, d)) / np.sqrt(d),
          "out_proj.weight": rng.standard_normal((d, d)) / np.sqrt(d)}
    if biases:
        sd["in_proj_bias"] = rng.standard_normal(3 * d)
        sd["out_proj.bias"] = rng.standard_normal(d)
    return sd


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("biases", [False, True])
def test_own_weights_match_the_slow_loop(causal, biases):
    sd = state_dict(12, 3, biases)
    t = mhacli.run(TEXT, weights=sd, heads=3, causal=causal)
    assert t.d_model == 12 and t.config.weights == "pytorch" and bool(t.biases) == biases
    ref = reference_loop(np.asarray(t.X), t.W_q, t.W_k, t.W_v, t.W_o, 3, causal, t.biases)
    for name in ("Q", "K", "V", "weights", "heads", "concat", "output"):
        assert np.max(np.abs(getattr(t, name) - ref[name])) < 1e-12, name
    assert all(c.ok for c in verify(t))


def test_biases_change_the_result():
    """The check above could pass with biases ignored if they were zero: they are not, and they matter."""
    with_b = mhacli.run(TEXT, weights=state_dict(12, 3, True), heads=3)
    without = mhacli.run(TEXT, weights=state_dict(12, 3, False), heads=3)
    assert np.max(np.abs(with_b.output - without.output)) > 0.1


def test_weights_from_a_file_and_back(tmp_path):
    sd = state_dict(8, 1)
    np.savez(tmp_path / "mine.npz", **sd)
    t = mhacli.run(TEXT, weights=tmp_path / "mine.npz", heads=2)
    again = to_state_dict(from_state_dict(sd))
    for key, value in sd.items():
        assert np.array_equal(again[key], value), key
    assert np.array_equal(t.W_q, sd["in_proj_weight"][:8]) and np.array_equal(t.b_o, sd["out_proj.bias"])


def test_a_module_prefix_is_accepted():
    sd = {f"layer.attn.{k}": v for k, v in state_dict(8, 2).items()}
    assert mhacli.run("a b c", weights=sd, heads=4).d_model == 8


@pytest.mark.parametrize("change,message", [
    (lambda sd: sd.pop("in_proj_weight"), "no 'in_proj_weight'"),
    (lambda sd: sd.__setitem__("in_proj_weight", np.zeros((7, 8))), "must be 3d × d"),
    (lambda sd: sd.__setitem__("out_proj.weight", np.zeros((8, 6))), "must be d × d"),
    (lambda sd: sd.__setitem__("in_proj_bias", np.zeros(5)), "3d = 24 numbers"),
    (lambda sd: sd.__setitem__("out_proj.bias", np.full(8, np.inf)), "infinite or NaN"),
    (lambda sd: sd.__setitem__("in_proj_weight", np.array(["a"] * 192).reshape(24, 8)), "not an array of numbers"),
])
def test_bad_weights_get_one_clear_error(change, message):
    sd = state_dict(8, 0)
    change(sd)
    with pytest.raises(UsageError, match=message):
        mhacli.run("a b c", weights=sd, heads=2)


def test_heads_must_divide_the_weights_width():
    with pytest.raises(UsageError, match="d_model=8 is not divisible by heads=3"):
        mhacli.run("a b c", weights=state_dict(8, 0), heads=3)


def test_d_model_that_disagrees_with_the_weights_is_refused():
    with pytest.raises(UsageError, match="weights are for d_model=8 but the run has d_model=16"):
        mhacli.run("a b c", weights=state_dict(8, 0), heads=2, d_model=16)


@pytest.mark.parametrize("name", ["/dev/zero", "missing.npz", "."])
def test_weight_files_that_are_not_files_are_refused_at_once(tmp_path, name):
    path = name if name.startswith("/") else str(tmp_path / name)
    with pytest.raises(UsageError, match="does not exist|not a regular file|is a folder"):
        mhacli.run("a b c", weights=path, heads=2)


def test_a_file_that_is_not_an_npz_is_refused(tmp_path):
    bad = tmp_path / "w.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a readable .npz"):
        mhacli.run("a b c", weights=bad, heads=2)


@pytest.mark.torch
@pytest.mark.parametrize("causal", [False, True])
def test_pytorch_module_with_biases_matches_to_1e9(tmp_path, causal):
    torch = pytest.importorskip("torch", reason="PyTorch is optional; the numpy reference above always runs")
    torch.manual_seed(7)
    module = torch.nn.MultiheadAttention(16, 4, bias=True, batch_first=True).double()
    with torch.no_grad():
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    np.savez(tmp_path / "mha.npz", **{k: v.numpy() for k, v in module.state_dict().items()})
    torch.save(module.state_dict(), tmp_path / "mha.pt")
    for path in (tmp_path / "mha.npz", tmp_path / "mha.pt"):
        t = mhacli.run(TEXT, weights=path, heads=4, causal=causal)
        x = torch.from_numpy(np.array(t.X))[None]
        mask = torch.triu(torch.ones(t.n_tokens, t.n_tokens, dtype=torch.bool), 1) if causal else None
        out, w = module(x, x, x, need_weights=True, average_attn_weights=False, attn_mask=mask)
        assert np.max(np.abs(out[0].detach().numpy() - t.output)) < 1e-9
        assert np.max(np.abs(w[0].detach().numpy() - t.weights)) < 1e-9
        assert all(c.ok for c in verify(t, torch)) and any(c.reference == "PyTorch" for c in verify(t, torch))


@pytest.mark.parametrize("causal", [[], ["--causal"]])
def test_explain_with_a_weights_file_from_the_command_line(tmp_path, causal):
    from typer.testing import CliRunner

    from mhacli.cli.app import app
    from mhacli.io.export import load_trace

    sd = state_dict(8, 4)
    np.savez(tmp_path / "mine.npz", **sd)
    r = CliRunner().invoke(app, ["explain", TEXT, "--weights", str(tmp_path / "mine.npz"), "--heads", "2",
                                 "--no-plots", "--save-npz", str(tmp_path / "run.npz"), *causal])
    assert r.exit_code == 0, r.output
    assert "X W_q^i + b_q^i" in r.output and "d = 8" in r.output
    expected = mhacli.run(TEXT, weights=sd, heads=2, causal=bool(causal))
    saved = load_trace(tmp_path / "run.npz")
    assert np.array_equal(saved.output, expected.output) and np.array_equal(saved.weights, expected.weights)


@pytest.mark.parametrize("name", ["x" * 300, "x" * 300 + ".npz"])
def test_a_weights_name_too_long_for_the_file_system_is_a_usage_error(name):
    # Found by the CLI fuzzer: Path.exists() raises ENAMETOOLONG instead of answering False.
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    r = CliRunner().invoke(app, ["demo", "--no-pause", "--weights", name])
    assert r.exit_code == 2, r.output
    assert "cannot use the weights file" in r.output and "too long" in r.output and "Traceback" not in r.output


# --- every weights object goes through one validation (issue 21, family 5) ---------------------------

class _Module:
    """Looks like an nn.Module to the check (a state_dict method), without needing PyTorch."""

    def state_dict(self) -> dict:
        return {}


@pytest.mark.parametrize("weights,message", [
    (None, "the weights are None; pass a state dict"),
    (42, "the weights are an int; pass a state dict"),
    ([np.zeros((24, 8))], "the weights are a list of 1 item; pass a state dict"),
    (_Module(), r"a PyTorch module \(_Module\), not its state dict; pass module.state_dict\(\) and heads="),
    ({3: np.zeros((24, 8))}, r"keyed by parameter names \(text\), but a key is 3 \(int\)"),
    ({k: v * 1e200 for k, v in state_dict(8, 0).items()}, r"holds values up to .*e\+200; mhacli takes weights within"),
])
def test_anything_passed_as_weights_gets_one_clear_usage_error(weights, message):
    with pytest.raises(UsageError, match=message):
        mhacli.run("a b c", weights=weights, heads=2)


def test_a_state_dict_of_huge_but_finite_weights_prints_no_warning(recwarn):
    """×1e200 used to overflow in the scores: RuntimeWarnings, then 'cannot convert float NaN … (this is a bug)'."""
    with pytest.raises(UsageError):
        mhacli.run("a b c", weights={k: v * 1e200 for k, v in state_dict(8, 0).items()}, heads=2)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_the_largest_accepted_weights_run_to_finite_numbers():
    from mhacli.models.state_dict import MAX_ABS_WEIGHT

    sd = {k: np.clip(v * MAX_ABS_WEIGHT, -MAX_ABS_WEIGHT, MAX_ABS_WEIGHT) for k, v in state_dict(8, 0).items()}
    t = mhacli.run("a b c", weights=sd, heads=2)
    assert np.all(np.isfinite(t.output)) and np.allclose(t.weights.sum(-1), 1.0)


def test_a_bad_weights_file_on_the_command_line_is_one_line_exit_2(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    np.savez(tmp_path / "huge.npz", **{k: v * 1e200 for k, v in state_dict(8, 0).items()})
    r = CliRunner().invoke(app, ["explain", "a b", "--weights", str(tmp_path / "huge.npz"), "--heads", "2",
                                 "--no-plots"])
    assert r.exit_code == 2 and "Traceback" not in r.output and "bug" not in r.output
    assert len(r.output.strip().splitlines()) == 1 and "holds values up to" in r.output, r.output


def test_an_edited_trained_model_with_an_empty_vocabulary_is_refused(tmp_path):
    from mhacli.models.weights import shipped_model_path

    with np.load(shipped_model_path()) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["vocabulary"] = np.array([], dtype=np.str_)
    arrays["embedding"] = np.zeros((0, arrays["embedding"].shape[1]))
    arrays["readout"] = np.zeros((arrays["readout"].shape[0], 0, arrays["readout"].shape[2]))
    np.savez(tmp_path / "empty.npz", **arrays)
    with pytest.raises(UsageError, match="its vocabulary is empty"):
        mhacli.run("a b", weights=tmp_path / "empty.npz")


# --- never silently wrong: the head count (issue 22, item 1) ---------------------------------------

def test_a_state_dict_needs_heads_in_python():
    with pytest.raises(UsageError, match=r"do not record how many heads .* give heads \(one of 1, 2, 4, 8"):
        mhacli.run("a b c", weights=state_dict(8, 0))


def test_a_weights_file_needs_heads_on_the_command_line_naming_the_file(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    np.savez(tmp_path / "h2.npz", **state_dict(8, 0))
    r = CliRunner().invoke(app, ["explain", "a b", "--weights", str(tmp_path / "h2.npz"), "--no-plots"])
    assert r.exit_code == 2 and "'" + str(tmp_path / "h2.npz") in r.output and "give --heads" in r.output
    assert "Traceback" not in r.output


def test_a_file_that_records_its_head_count_needs_no_heads(tmp_path):
    np.savez(tmp_path / "h2.npz", **state_dict(8, 0), num_heads=np.array(2))
    assert mhacli.run("a b c", weights=tmp_path / "h2.npz").num_heads == 2
    with pytest.raises(UsageError, match="heads=4 disagrees with the weights in .*, which record 2 heads"):
        mhacli.run("a b c", weights=tmp_path / "h2.npz", heads=4)


def test_numpy_integers_are_whole_numbers_and_other_flags_are_refused():
    assert mhacli.run("a b c", heads=np.int64(2)).num_heads == 2
    assert mhacli.run("a b c", weights=state_dict(8, 0), heads=np.int32(2)).num_heads == 2
    assert mhacli.run("a b c", causal=np.True_).config.causal is True
    assert mhacli.run("a b c", causal=1).config.causal is True
    for bad in ("no", "False", 2, None):
        with pytest.raises(UsageError, match="causal must be True or False"):
            mhacli.run("a b c", causal=bad)
    with pytest.raises(UsageError, match="heads must be a whole number"):
        mhacli.run("a b c", heads=2.0)


# --- what a state dict holds and mhacli does not model is refused by name ----------------------------

def test_bias_k_and_bias_v_are_refused_by_name():
    sd = {**state_dict(8, 0), "bias_k": np.zeros((1, 1, 8)), "bias_v": np.zeros((1, 1, 8))}
    with pytest.raises(UsageError, match=r"'bias_k': a learned extra key \(add_bias_kv=True\)"):
        mhacli.run("a b c", weights=sd, heads=2)


def test_separate_projections_of_width_d_are_read_and_other_widths_refused():
    sd = state_dict(8, 0)
    w = sd.pop("in_proj_weight")
    separate = {**sd, "q_proj_weight": w[:8], "k_proj_weight": w[8:16], "v_proj_weight": w[16:]}
    same = mhacli.run("a b c", weights=state_dict(8, 0), heads=2)
    assert np.array_equal(mhacli.run("a b c", weights=separate, heads=2).output, same.output)
    separate["k_proj_weight"] = np.zeros((8, 6))
    with pytest.raises(UsageError, match=r"'k_proj_weight' is 8 × 6, not d × d .* \(kdim/vdim\)"):
        mhacli.run("a b c", weights=separate, heads=2)


def test_cross_attention_alone_is_refused_and_skipped_when_picking_layers():
    sd = {f"layers.0.multihead_attn.{k}": v for k, v in state_dict(8, 0).items()}
    with pytest.raises(UsageError, match="only cross-attention .*layers.0.multihead_attn"):
        mhacli.run("a b c", weights=sd, heads=2)
    sd.update({f"layers.0.self_attn.{k}": v for k, v in state_dict(8, 1).items()})
    t = mhacli.run("a b c", weights=sd, heads=2)  # the decoder layer's one self-attention
    assert np.array_equal(t.W_q, state_dict(8, 1)["in_proj_weight"][:8])


# --- a layer of a real model (issue 22, item 2), with hand-made state dicts -------------------------

def encoder_state(layers: int, d: int = 8) -> dict[str, np.ndarray]:
    """An nn.TransformerEncoder's keys (the feed-forward parts are there to be ignored)."""
    out: dict[str, np.ndarray] = {}
    for i in range(layers):
        out.update({f"layers.{i}.self_attn.{k}": v for k, v in state_dict(d, 10 + i).items()})
        out[f"layers.{i}.linear1.weight"] = np.zeros((2 * d, d))
        out[f"layers.{i}.norm1.weight"] = np.ones(d)
    return out


def test_a_layer_is_picked_by_number_or_name_and_several_without_a_pick_are_refused():
    sd = encoder_state(12)
    with pytest.raises(UsageError, match=r"hold the self-attention of 12 layers \(layers.0.self_attn, layers.1"
                                         r".*, …, layers.11.self_attn\); pick one with layer 0 to 11"):
        mhacli.run("a b c", weights=sd, heads=2)
    tenth = state_dict(8, 19)["in_proj_weight"][:8]  # natural order: layers.9 is 9, as its name counts it
    assert np.array_equal(mhacli.run("a b c", weights=sd, heads=2, layer=9).W_q, tenth)
    assert np.array_equal(mhacli.run("a b c", weights=sd, heads=2, layer="layers.9.self_attn").W_q, tenth)
    for bad in (-1, 12, "layers.99.self_attn", 1.5):
        with pytest.raises(UsageError, match="is not a layer of the weights"):
            mhacli.run("a b c", weights=sd, heads=2, layer=bad)


def test_layer_is_refused_where_there_is_nothing_to_pick():
    with pytest.raises(UsageError, match="layer picks one layer of a weights file holding several"):
        mhacli.run("a b c", weights="random", layer=2)
    with pytest.raises(UsageError, match="layer picks one layer"):
        mhacli.run("a b c", weights="trained", layer=2)


def bert_state(layers: int, d: int = 8) -> dict[str, np.ndarray]:
    """Hugging Face BertModel's key names and Linear layout, hand-made (transformers is optional)."""
    rng = np.random.default_rng(5)
    out: dict[str, np.ndarray] = {}
    for i in range(layers):
        at = f"encoder.layer.{i}.attention."
        for p in ("query", "key", "value"):
            out[f"{at}self.{p}.weight"], out[f"{at}self.{p}.bias"] = rng.normal(size=(d, d)), rng.normal(size=d)
        out[f"{at}output.dense.weight"], out[f"{at}output.dense.bias"] = rng.normal(size=(d, d)), rng.normal(size=d)
        out[f"{at}output.LayerNorm.weight"] = np.ones(d)
        out[f"encoder.layer.{i}.output.dense.weight"] = rng.normal(size=(d, 4 * d))  # the feed-forward's: ignored
    return out


def test_a_bert_layer_maps_onto_pytorch_s_layout():
    sd = bert_state(2)
    t = mhacli.run("a b c", weights=sd, heads=2, layer=1)
    at = "encoder.layer.1.attention."
    assert np.array_equal(t.W_q, sd[at + "self.query.weight"]) and np.array_equal(t.W_v, sd[at + "self.value.weight"])
    assert np.array_equal(t.W_o, sd[at + "output.dense.weight"]) and np.array_equal(t.b_k, sd[at + "self.key.bias"])
    sd[at + "self.distance_embedding.weight"] = np.zeros((5, 8))
    with pytest.raises(UsageError, match="distance_embedding.weight': relative position scores"):
        mhacli.run("a b c", weights=sd, heads=2, layer=1)


def test_a_gpt2_layer_is_transposed_from_conv1d_and_runs_causal():
    rng = np.random.default_rng(6)
    d = 8
    sd = {f"h.{i}.attn.{k}": v for i in range(2) for k, v in {
        "c_attn.weight": rng.normal(size=(d, 3 * d)), "c_attn.bias": rng.normal(size=3 * d),
        "c_proj.weight": rng.normal(size=(d, d)), "c_proj.bias": rng.normal(size=d)}.items()}
    t = mhacli.run("a b c", weights=sd, heads=2, layer=0)
    assert np.array_equal(t.W_k, sd["h.0.attn.c_attn.weight"][:, d : 2 * d].T)
    assert np.array_equal(t.W_o, sd["h.0.attn.c_proj.weight"].T)
    assert t.config.causal and np.all(np.triu(t.weights, 1) == 0)

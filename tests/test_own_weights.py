"""Your own weights: an nn.MultiheadAttention state dict (biases optional) runs through the core.

The numpy reference (the slow per-head loop, with biases) always runs; PyTorch's own
module is compared when torch is installed (float64, 1e-9).
"""

from __future__ import annotations

import numpy as np
import pytest

import mhacli
from mhacli.core.errors import UsageError
from mhacli.core.verify import reference_loop, verify
from mhacli.core.weights import from_state_dict, to_state_dict

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
        assert all(c.ok for c in verify(t)) and any(c.reference == "PyTorch" for c in verify(t))


@pytest.mark.parametrize("causal", [[], ["--causal"]])
def test_explain_with_a_weights_file_from_the_command_line(tmp_path, causal):
    from typer.testing import CliRunner

    from mhacli.cli import app
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


def test_an_unknown_weights_name_is_one_line():
    from typer.testing import CliRunner

    from mhacli.cli import app

    r = CliRunner().invoke(app, ["explain", "a b", "--weights", "bogus"])
    assert r.exit_code == 2 and "unknown weights 'bogus'" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("name", ["x" * 300, "x" * 300 + ".npz"])
def test_a_weights_name_too_long_for_the_file_system_is_a_usage_error(name):
    # Found by the CLI fuzzer: Path.exists() raises ENAMETOOLONG instead of answering False.
    from typer.testing import CliRunner

    from mhacli.cli import app

    r = CliRunner().invoke(app, ["demo", "--no-pause", "--weights", name])
    assert r.exit_code == 2, r.output
    assert "cannot use the weights file" in r.output and "too long" in r.output and "Traceback" not in r.output

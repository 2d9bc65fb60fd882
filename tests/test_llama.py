"""Your own grouped model: a Llama-style layer (q_proj, k_proj, v_proj, o_proj, rotary positions) read through
--weights FILE --layer, against an independent numpy writing of transformers' eager LlamaAttention."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mhacli
from mhacli.attention.errors import UsageError

TEXT = "the cat sat on the mat"


def llama_state(d=16, h=4, g=2, layers=2, seed=0, biases=False) -> dict[str, np.ndarray]:
    """A Llama-style model's attention weights, as ``model.state_dict()`` names them."""
    rng = np.random.default_rng(seed)
    dk = d // h
    out: dict[str, np.ndarray] = {}
    for n in range(layers):
        p = f"model.layers.{n}.self_attn."
        for name, rows in (("q_proj", d), ("k_proj", g * dk), ("v_proj", g * dk), ("o_proj", d)):
            out[p + name + ".weight"] = rng.standard_normal((rows, d)) / np.sqrt(d)
            if biases and name != "o_proj":
                out[p + name + ".bias"] = rng.standard_normal(rows) / 4
        out[f"model.layers.{n}.mlp.up_proj.weight"] = rng.standard_normal((2 * d, d))  # not attention: ignored
    return out


def eager_llama(x, w_q, w_k, w_v, w_o, h, g, theta, b=None):
    """transformers' LlamaAttention (eager), written again: rotate_half, cos/sin of [freqs, freqs], repeat_kv."""
    b = b or {}
    n, d = x.shape
    dk = d // h
    q = (x @ w_q.T + b.get("q", 0)).reshape(n, h, dk).transpose(1, 0, 2)
    k = (x @ w_k.T + b.get("k", 0)).reshape(n, g, dk).transpose(1, 0, 2)
    v = (x @ w_v.T + b.get("v", 0)).reshape(n, g, dk).transpose(1, 0, 2)
    inv_freq = 1.0 / (theta ** (np.arange(0, dk, 2) / dk))
    freqs = np.outer(np.arange(n), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rotate_half(t):
        return np.concatenate([-t[..., dk // 2:], t[..., : dk // 2]], axis=-1)

    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = np.repeat(k, h // g, axis=0), np.repeat(v, h // g, axis=0)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(dk) + np.triu(np.full((n, n), -np.inf), 1)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return a, (a @ v).transpose(1, 0, 2).reshape(n, d) @ w_o.T


@pytest.mark.parametrize("g,biases", [(2, False), (1, True), (4, False)])
def test_a_llama_layer_runs_as_transformers_computes_it(g, biases):
    state = llama_state(g=g, biases=biases)
    state["rope_theta"] = np.array(500000.0)
    result = mhacli.run(TEXT, weights=state, heads=4, layer=1)
    t = result.trace
    p = "model.layers.1.self_attn."
    b = {k: state[p + f"{k}_proj.bias"] for k in "qkv"} if biases else None
    weights, output = eager_llama(np.asarray(t.X), *(state[p + f"{m}_proj.weight"] for m in "qkvo"), 4, g,
                                  500000.0, b)
    np.testing.assert_allclose(t.weights, weights, atol=1e-12)
    np.testing.assert_allclose(t.output, output, atol=1e-12)
    assert t.kv_heads == g and t.config.causal and t.rope_theta == 500000.0
    assert not np.any(t.positions)  # positions enter Q and K by rotation, never added to X (so never V)
    keys = [s.key for s in t.steps]
    assert keys.index("key") < keys.index("rotary") < keys.index("scores") and t.steps[0].formula == "X = E[tokens]"
    assert t.split_cost.madds == sum(s.madds for s in t.steps)  # what the sentence under the table says it costs


def test_rotary_positions_enter_q_and_k_never_v():
    t = mhacli.run(TEXT, weights=llama_state(), heads=4, layer=0).trace
    x = np.asarray(t.X)
    w_v = llama_state()["model.layers.0.self_attn.v_proj.weight"]
    w_k = llama_state()["model.layers.0.self_attn.k_proj.weight"]
    np.testing.assert_allclose(t.V[0], x @ w_v[:4].T, atol=1e-12)  # V^1 = X W_v^1: no rotation
    assert np.allclose(t.K[0][0], (x @ w_k[:4].T)[0])  # position 0 turns by 0
    assert not np.allclose(t.K[0][1:], (x @ w_k[:4].T)[1:])  # later positions turn


def test_a_llama_file_through_the_command_line(tmp_path):
    import json

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    path = tmp_path / "llama.npz"
    np.savez(path, **llama_state())
    got = CliRunner().invoke(app, ["explain", TEXT, "--weights", str(path), "--layer", "1", "--heads", "4",
                                   "--json", "--no-plots"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    assert doc["config"]["kv_heads"] == 2 and doc["config"]["causal"] is True
    assert "rotary" in [s["key"] for s in doc["steps"]]
    refused = CliRunner().invoke(app, ["explain", TEXT, "--weights", str(path), "--layer", "1", "--heads", "4",
                                       "--kv-heads", "1", "--no-plots"])
    assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change,message", [
    (lambda s: s.update({"model.layers.0.self_attn.q_norm.weight": np.ones(4)}), "q_norm"),
    (lambda s: s.update({"model.layers.0.self_attn.k_proj.weight": np.ones((6, 16))}), "k_proj"),
    (lambda s: s.pop("model.layers.0.self_attn.o_proj.weight"), "o_proj"),
    (lambda s: s.update({"num_key_value_heads": np.array(4)}), "num_key_value_heads"),
])
def test_what_cannot_be_read_is_refused_by_name(change, message):
    state = llama_state(layers=1)
    change(state)
    with pytest.raises(UsageError, match=message):
        mhacli.run(TEXT, weights=state, heads=4)


def test_heads_are_needed_unless_recorded():
    with pytest.raises(UsageError, match="query heads"):
        mhacli.run(TEXT, weights=llama_state(layers=1))
    state = llama_state(layers=1)
    state["num_attention_heads"] = np.array(4)
    assert mhacli.run(TEXT, weights=state).trace.num_heads == 4


@pytest.mark.torch
def test_a_transformers_llama_layer_gives_the_same_attention():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=32, num_hidden_layers=1, vocab_size=50,
                                      attn_implementation="eager", rope_theta=10000.0)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    attn = model.layers[0].self_attn
    state = {f"layers.0.self_attn.{k}": v.detach().numpy().astype(np.float64)
             for k, v in attn.state_dict().items()}
    t = mhacli.run(TEXT, weights=state, heads=4, dtype="float32").trace
    x = torch.from_numpy(np.array(t.X, dtype=np.float32))[None]
    pos = torch.arange(t.n_tokens)[None]
    cos_sin = model.rotary_emb(x, pos)
    mask = torch.triu(torch.full((t.n_tokens, t.n_tokens), float("-inf")), 1)[None, None]
    with torch.no_grad():
        _, weights = attn(x, position_embeddings=cos_sin, attention_mask=mask)
    np.testing.assert_allclose(t.weights, weights[0].numpy(), atol=1e-5)


def test_a_saved_llama_run_keeps_its_rotary_positions_and_verifies(tmp_path):
    import json

    from typer.testing import CliRunner

    from mhacli.cli.app import app
    from mhacli.io.export import load_trace

    weights, saved = tmp_path / "llama.npz", tmp_path / "run.npz"
    np.savez(weights, **{**llama_state(layers=1), "rope_theta": np.array(1000.0)})
    got = CliRunner().invoke(app, ["explain", TEXT, "--weights", str(weights), "--heads", "4", "--quiet",
                                   "--no-plots", "--save-npz", str(saved)])
    assert got.exit_code == 0, got.output
    loaded = load_trace(saved)
    assert loaded.rope_theta == 1000.0 and loaded.kv_heads == 2 and "rotary" in [s.key for s in loaded.steps]
    checked = CliRunner().invoke(app, ["verify", str(saved), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["ok"] is True


def test_heads_of_odd_width_cannot_turn():
    with pytest.raises(UsageError, match="even width"):
        mhacli.run(TEXT, weights=llama_state(d=12, h=4, g=2, layers=1), heads=4)


def test_the_quiz_asks_a_layer_that_shares_keys_and_values_about_its_groups(tmp_path, monkeypatch):
    """A file's g = 2 < h = 4 gets the questions on g and the cache, and the command it names to check runs."""
    import json
    import shlex

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "llama.npz"
    np.savez(path, **llama_state(layers=1))
    got = CliRunner().invoke(app, ["quiz", TEXT, "--weights", str(path), "--heads", "4", "--json", "--answers"])
    assert got.exit_code == 0, got.output
    asked = json.loads(got.stdout)
    assert [q["topic"] for q in asked["questions"]][:2] == ["sharing", "cache"]
    assert asked["questions"][0]["answer"].startswith("2 (one per group")
    checked = CliRunner().invoke(app, [*shlex.split(asked["check"])[1:], "--no-plots", "--json"])
    assert checked.exit_code == 0, checked.output


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(2, 7), st.floats(10.0, 1e6), st.integers(0, 2**32 - 1))
def test_rotary_keeps_lengths_and_scores_depend_on_the_distance_only(half, n, theta, seed):
    from mhacli.attention.attention import rotary

    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal(2 * half), rng.standard_normal(2 * half)
    rq, rk = rotary(np.tile(q, (n, 1)), theta), rotary(np.tile(k, (n, 1)), theta)  # the same q, k at every position
    np.testing.assert_allclose(np.linalg.norm(rq, axis=1), np.linalg.norm(q), rtol=1e-12)
    s = rq @ rk.T  # (N, N)
    np.testing.assert_allclose(s[1:, 1:], s[:-1, :-1], atol=1e-9)  # q at p against k at p' depends on p − p' only
    np.testing.assert_allclose(rq[0], q, atol=0)  # position 0 turns by nothing

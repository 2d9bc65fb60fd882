"""`mha explain`, `show` and `verify` through the CLI: output, exports, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mhacli.cli.app import app
from mhacli.io.export import NPZ_KEYS

CAT = "the cat sat on the mat"


def explain(runner, *args, input=None):
    """`mha explain ARGS` without figures: these tests are about the walkthrough and exports."""
    return runner.invoke(app, ["explain", *args, "--no-plots"], input=input)


def test_walkthrough_has_every_section_in_order(runner):
    r = explain(runner, CAT, "--heads", "4")
    assert r.exit_code == 0, r.output
    out = r.output
    sections = ["1. Tokens", "2. Steps", "3. Parameters", "4. Split or direct?",
                "5. Each head is its own magnifier"]
    positions = [out.index(s) for s in sections]
    assert positions == sorted(positions)
    for formula in ("Q^i = X W_q^i", "S^i = Q^i K^iᵀ / √(d/h)", "A^i = softmax(S^i)",
                    "head_i = A^i V^i", "H = [head_1 … head_h]", "O = H W^Oᵀ"):
        assert formula in out
    assert "N×d/h = 6×4" in out
    assert "3 · d · d = 3 · 16 · 16 = 768" in out
    assert "h · 3 · d · d/h = 4 · 3 · 16 · 4 = 768" in out
    assert "largest difference: 0" in out
    assert "6. Causal mask" not in out


def test_walkthrough_fits_80_columns(runner):
    r = explain(runner, "The animal didn't cross the street because it was too tired",
                "--causal", "--show-values")
    assert r.exit_code == 0, r.output
    assert "6. Causal mask" in r.output and "−∞" in r.output
    widest = max(len(line) for line in r.output.splitlines())
    assert widest <= 80


def test_show_values_prints_rounded_weights(runner):
    r = explain(runner, "a b", "--heads", "1", "--d-model", "4", "--show-values")
    assert r.exit_code == 0
    from mhacli import run

    w = run("a b", heads=1, d_model=4).weights[0]
    assert f"{w[0, 0]:.2f}" in r.output and f"{w[1, 1]:.2f}" in r.output


def test_npz_holds_exactly_the_promised_arrays(runner, tmp_path):
    path = tmp_path / "cat.npz"
    r = explain(runner, CAT, "--causal", "--seed", "3", "--save-npz", str(path))
    assert r.exit_code == 0, r.output
    assert str(path) in r.output
    with np.load(path) as z:  # no allow_pickle needed
        # Format 2: the 0.1.0 members, plus the whole config and what the weights were made of.
        assert set(z.files) == {*NPZ_KEYS, "format_version", "mhacli_version", "tokenizer", "positions",
                                "weight_kind", "dtype", "embeddings", "position_encoding"}
        assert int(z["format_version"]) == 2 and str(z["weight_kind"]) == "random"
        assert list(z["tokens"]) == CAT.split()
        h, n, d = int(z["num_heads"]), 6, int(z["d_model"])
        assert (h, d, int(z["seed"]), bool(z["causal"])) == (4, 16, 3, True)
        assert z["Q"].shape == z["heads"].shape == (h, n, d // h)
        assert z["weights"].shape == (h, n, n)
        # A student's few lines of numpy reproduce the output to 1e-12:
        x, dk = z["X"], d // h
        q = (x @ z["W_q"].T).reshape(n, h, dk).transpose(1, 0, 2)
        k = (x @ z["W_k"].T).reshape(n, h, dk).transpose(1, 0, 2)
        v = (x @ z["W_v"].T).reshape(n, h, dk).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(dk)
        s[:, np.triu(np.ones((n, n), bool), 1)] = -np.inf
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(n, d) @ z["W_o"].T
        assert np.abs(o - z["output"]).max() < 1e-12
        assert np.abs(a - z["weights"]).max() < 1e-12


@pytest.mark.slow
def test_json_is_one_document_and_nothing_else(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the figures are drawn too (the file list must stay off stdout): not pixels
    r = runner.invoke(app, ["explain", CAT, "--json", "--dpi", "30"])
    assert r.exit_code == 0
    doc = json.loads(r.stdout)  # the whole stdout parses
    assert doc["tokens"] == CAT.split()
    assert doc["config"]["heads"] == 4 and doc["config"]["d_k"] == 4
    assert [s["key"] for s in doc["steps"]][:2] == ["embed", "query"]
    assert doc["parameters"]["single_head_qkv"] == doc["parameters"]["multi_head_qkv"] == 768
    assert np.array(doc["arrays"]["weights"]).shape == (4, 6, 6)
    from mhacli import run

    np.testing.assert_allclose(np.array(doc["arrays"]["output"]), run(CAT).output, atol=1e-15)


def test_json_masked_scores_are_null(runner):
    r = runner.invoke(app, ["explain", "a b c", "--causal", "--json", "--no-plots"])
    doc = json.loads(r.stdout)
    assert doc["arrays"]["scores"][0][0][1] is None
    assert doc["arrays"]["weights"][0][0][1] == 0.0


def test_text_from_file_and_stdin(runner, tmp_path):
    f = tmp_path / "t.txt"
    f.write_bytes(b"\xef\xbb\xbfthe cat\r\nsat\r\n")  # BOM and CRLF are fine
    via_file = runner.invoke(app, ["explain", "--file", str(f), "--json", "--no-plots"])
    via_stdin = runner.invoke(app, ["explain", "-", "--json", "--no-plots"], input="the cat sat\n")
    assert via_file.exit_code == 0 and via_stdin.exit_code == 0
    assert json.loads(via_file.stdout)["tokens"] == ["the", "cat", "sat"]
    assert json.loads(via_stdin.stdout)["arrays"] == json.loads(via_file.stdout)["arrays"]


def test_show_rerenders_without_recomputing(runner, tmp_path, monkeypatch):
    path = tmp_path / "t.npz"
    assert explain(runner, CAT, "--save-npz", str(path)).exit_code == 0
    import mhacli.attention.attention
    import mhacli.attention.trace

    def boom(*a, **k):
        raise AssertionError("show must not recompute attention")

    monkeypatch.setattr(mhacli.attention.attention, "attend", boom)
    monkeypatch.setattr(mhacli.attention.trace, "multi_head_attention", boom)
    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", boom)
    r = runner.invoke(app, ["show", str(path), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "loaded from" in r.output and "2. Steps" in r.output and "mat" in r.output


@pytest.mark.parametrize("causal", [[], ["--causal"]])
@pytest.mark.torch_aware
def test_verify_passes_on_what_explain_writes(runner, tmp_path, causal):
    path = tmp_path / "t.npz"
    assert explain(runner, "The animal didn't cross the street", "--save-npz", str(path), *causal).exit_code == 0
    r = runner.invoke(app, ["verify", str(path)])
    assert r.exit_code == 0, r.output
    assert "All" in r.output and "agree" in r.output


@pytest.mark.torch_aware
def test_verify_fails_on_tampered_output(runner, tmp_path):
    path = tmp_path / "t.npz"
    assert explain(runner, CAT, "--save-npz", str(path)).exit_code == 0
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["output"] = arrays["output"] + 1e-6
    np.savez(path, **arrays)
    r = runner.invoke(app, ["verify", str(path)])
    assert r.exit_code == 1
    assert "NO" in r.output and "differ" in r.output


@pytest.mark.torch
def test_verify_against_pytorch_when_installed(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is optional; parity with it is checked only when installed")
    from mhacli import run
    from mhacli.measures.verify import verify

    for causal in (False, True):
        checks = verify(run(CAT, causal=causal, heads=4, d_model=16), torch)
        torch_checks = [c for c in checks if c.reference == "PyTorch"]
        assert {c.array for c in torch_checks} == {"weights", "output"}, torch.__version__
        assert all(c.ok for c in checks), checks


# Every documented mistake (empty text, --heads 0 or 3 or x, a bad tokenizer, a missing file, no text, …) is one
# row of docs/errors.md, checked by the one table-driven test in tests/test_errors.py.
def test_punctuation_alone_is_a_text(runner, tmp_path, monkeypatch):
    """Punctuation tokens are tokens: fine (figures too, at the smallest dpi)."""
    monkeypatch.chdir(tmp_path)  # the figures go to ./mha-output: the test's own folder, not the work tree
    r = runner.invoke(app, ["explain", "...", "--dpi", "30"])
    assert r.exit_code == 0, r.output


def test_save_npz_never_half_written(runner, tmp_path):
    r = runner.invoke(app, ["explain", CAT, "--save-npz", str(tmp_path / "missing" / "t.npz")])
    assert r.exit_code == 2 and "does not exist" in r.stderr
    assert not (tmp_path / "missing").exists()
    assert list(tmp_path.iterdir()) == []


def test_version_and_help(runner):
    from mhacli import __version__

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output
    for cmd in ("explain", "show", "verify"):
        h = runner.invoke(app, [cmd, "--help"])
        assert h.exit_code == 0 and "Example" in h.output


# --- the installed console script, in a real process ------------------------

def _mha() -> list[str]:
    exe = shutil.which("mha", path=str(Path(sys.executable).parent)) or shutil.which("mha")
    if exe is None:
        pytest.skip("the mha console script is not installed in this environment")
    return [exe]


def test_installed_mha_runs_the_walkthrough(tmp_path):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "80"}
    p = subprocess.run([*_mha(), "explain", CAT, "--heads", "4", "--save-npz", str(tmp_path / "t.npz"),
                        "--no-plots"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "2. Steps" in p.stdout and "\x1b[" not in p.stdout
    v = subprocess.run([*_mha(), "verify", str(tmp_path / "t.npz")], capture_output=True, text=True, env=env)
    assert v.returncode == 0 and "agree" in v.stdout


def test_python_dash_m_matches_the_script():
    p = subprocess.run([sys.executable, "-m", "mhacli", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and "mha" in p.stdout

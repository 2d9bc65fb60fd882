"""Properties of whole runs through the CLI, for any text and any (small) sizes.

Hypothesis drives ``mha explain`` through CliRunner: a run either succeeds
with finite weights whose rows sum to 1 and the documented shapes, or fails
with exit 2 and exactly one ``mha: error:`` line.  Plus the memory plan
against a measured peak, and the 5,000-token core.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mhacli.cli.app import app
from mhacli.attention.config import Config
from mhacli.attention.tokenize import tokenize

MHA = Path(sys.executable).with_name("mha")
NO_PLOTS = ["--no-plots"]
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

any_text = st.text(alphabet=st.characters(codec=None), max_size=40)
wordy_text = st.lists(st.sampled_from(["the", "cat", "😀", "日本", "é", "\u200b", "\x1b", " ", "-", "[b]"]),
                      max_size=12).map(" ".join)


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mha: error: ")
    assert "Traceback" not in result.output
    return lines[0]


@SETTINGS
@given(text=st.one_of(any_text, wordy_text), heads=st.integers(1, 4), width=st.integers(1, 4),
       tokenizer=st.sampled_from(["word", "char", "whitespace"]), causal=st.booleans())
def test_any_text_and_valid_sizes_run_or_fail_cleanly(runner, text, heads, width, tokenizer, causal):
    assume(text != "-")  # '-' means: read standard input
    d = heads * width
    args = ["explain", *NO_PLOTS, "--json", "--heads", str(heads), "--d-model", str(d),
            "--tokenizer", tokenizer, "--causal" if causal else "--no-causal", "--", text]
    r = runner.invoke(app, args)
    tokens = tokenize(text, tokenizer)
    if not tokens:
        assert r.exit_code == 2
        assert "empty" in _one_error_line(r) or "no tokens" in _one_error_line(r)
        return
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    n = len(tokens)
    assert doc["tokens"] == tokens
    weights = np.array(doc["arrays"]["weights"], dtype=float)
    assert weights.shape == (heads, n, n)
    assert np.all(np.isfinite(weights)) and np.all(weights >= 0)
    assert np.allclose(weights.sum(axis=-1), 1.0, atol=1e-9)
    if causal:
        assert np.all(np.triu(weights, k=1) == 0)
    shapes = {"Q": (heads, n, width), "K": (heads, n, width), "V": (heads, n, width),
              "heads": (heads, n, width), "concat": (n, d), "output": (n, d), "X": (n, d)}
    for name, shape in shapes.items():
        assert np.array(doc["arrays"][name]).shape == shape, name
    assert all(np.all(np.isfinite(np.array(doc["arrays"][k], dtype=float))) for k in shapes)


bad_int = st.one_of(st.integers(max_value=0), st.sampled_from(["x", "2.5", "", "1e3", "four", "0x10", "--"]))


@SETTINGS
@given(heads=bad_int, d_model=st.integers(1, 64))
def test_invalid_heads_always_exit_2_with_one_line(runner, heads, d_model):
    r = runner.invoke(app, ["explain", *NO_PLOTS, "the cat sat", "--heads", str(heads), "--d-model", str(d_model)])
    assert r.exit_code == 2, r.output
    line = _one_error_line(r)
    assert "--heads" in line


@SETTINGS
@given(heads=st.integers(1, 64), d_model=st.one_of(bad_int, st.integers(1, 64)))
def test_invalid_d_model_always_exit_2_with_one_line(runner, heads, d_model):
    valid = isinstance(d_model, int) and d_model >= 1 and d_model % heads == 0
    r = runner.invoke(app, ["explain", *NO_PLOTS, "the cat sat", "--heads", str(heads), "--d-model", str(d_model),
                            "--json"])
    if valid:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2, r.output
    line = _one_error_line(r)
    assert "--d-model" in line or "--heads" in line
    if isinstance(d_model, int) and d_model >= 1 and heads <= d_model:
        # The message lists the head counts that do work.
        assert "all that work for --d-model" in line


@SETTINGS
@given(d_model=st.integers(10**7, 10**40), heads=st.integers(1, 8))
def test_absurd_sizes_are_refused_before_allocating(runner, d_model, heads):
    r = runner.invoke(app, ["explain", *NO_PLOTS, "the cat sat", "--heads", str(heads), "--d-model", str(d_model)])
    assert r.exit_code == 2
    line = _one_error_line(r)
    # beyond 2**63-1 the one number rule refuses it first (mhacli/attention/numbers.py)
    assert "this machine can spare" in line or "not divisible" in line or "up to 2**63-1" in line


def test_a_text_longer_than_memory_allows_is_refused_with_the_limit(runner, tmp_path, monkeypatch):
    import mhacli.io.memory as memory

    monkeypatch.setattr(memory, "memory_limit_bytes", lambda: 600 * 2**20)
    text = " ".join(f"w{i}" for i in range(3000))
    r = runner.invoke(app, ["explain", *NO_PLOTS, text])
    assert r.exit_code == 2
    line = _one_error_line(r)
    most = Config().max_tokens(600 * 2**20)
    assert f"at most {most:,} tokens fit" in line and "at least 3,000 tokens" in line
    assert 0 < most < 3000


def test_json_that_would_not_fit_suggests_npz(runner, monkeypatch):
    import mhacli.io.memory as memory

    monkeypatch.setattr(memory, "memory_limit_bytes", lambda: 600 * 2**20)
    text = " ".join(f"w{i}" for i in range(700))
    r = runner.invoke(app, ["explain", *NO_PLOTS, text, "--json"])
    assert r.exit_code == 2
    assert "drop --json and use --save-npz FILE" in _one_error_line(r)


# ---------------------------------------------------------------------------
# The memory plan against a measured peak
# ---------------------------------------------------------------------------

_PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def _peak_bytes(args: list[str], cwd: Path) -> int:
    """Peak resident memory of one ``mha`` run, measured by the kernel (ru_maxrss of the child)."""
    out = subprocess.run([sys.executable, "-c", _PEAK, str(MHA), *args], capture_output=True, text=True,
                         cwd=cwd, check=True, timeout=600)
    return int(out.stdout.strip())


@pytest.mark.skipif(not MHA.exists(), reason="the mha console script is not installed")
@pytest.mark.parametrize("n,heads,json_out,plots", [(2000, 4, False, False), (2000, 4, False, True),
                                                   (1200, 8, False, False), (600, 4, True, False)])
@pytest.mark.slow
def test_planned_bytes_covers_the_measured_peak(tmp_path, n, heads, json_out, plots):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"w{i}" for i in range(n)))
    args = ["explain", "--file", str(text), "--heads", str(heads), "--out", str(tmp_path / "figures")]
    args += (["--dpi", "50"] if plots else NO_PLOTS) + (["--json"] if json_out else [])
    measured = _peak_bytes(args, tmp_path)
    config = Config(heads=heads)
    planned = config.planned_bytes(n, json=json_out)
    if plots:  # what open_figures plans before drawing: the largest figure's pixels beside the run's arrays
        from mhacli.cli.options import MAX_TOKENS
        from mhacli.render.sizes import figure_bytes

        arrays = config.planned_bytes(n) - config.planned_bytes(0) + config.weight_bytes()
        planned = max(planned, figure_bytes(heads, min(n, MAX_TOKENS), 50) + arrays)
    # Never under the real peak (under-planning means a silent OOM kill)…
    assert measured <= planned, (measured / 2**20, planned / 2**20)
    # …and not so far over it that sensible runs are refused.
    assert planned <= 3 * measured, (measured / 2**20, planned / 2**20)


def test_the_core_handles_five_thousand_tokens():
    from mhacli.attention.trace import run_tokens

    tokens = [f"w{i % 701}" for i in range(5000)]
    trace = run_tokens(tokens, Config(heads=1, d_model=4, causal=True, dtype="float32"))
    assert trace.weights.shape == (1, 5000, 5000)
    assert np.allclose(trace.weights.sum(axis=-1), 1.0, atol=1e-4)
    assert np.all(np.isfinite(trace.output))
    assert trace.weights[0, 0, 1] == 0  # causal: the first token sees only itself


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200),
                      st.text(max_size=60).map(lambda t: t.encode("utf-8")),
                      st.text(max_size=60).map(lambda t: b"\xef\xbb\xbf" + t.replace("\n", "\r\n").encode("utf-8"))))
@pytest.mark.slow
def test_any_bytes_as_a_file_run_or_fail_with_one_line(runner, tmp_path, data):
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    r = runner.invoke(app, ["explain", *NO_PLOTS, "--file", str(path), "-d", "8", "-H", "2"])
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        _one_error_line(r)
    else:
        text = data.decode("utf-8-sig")
        assert tokenize(text)  # it ran because the text has tokens

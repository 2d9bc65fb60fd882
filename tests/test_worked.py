"""The worked example: whole numbers up to S^i, every matrix printed, each one the product it claims."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from rich.console import Console

from mhacli.attention.attention import head_weight
from mhacli.measures.worked import worked_example
from mhacli.render.worked import worked_view


def rendered(trace, width: int = 80) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    for part in worked_view(trace):
        console.print(part)
    return buf.getvalue()


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("causal", [False, True])
def test_every_matrix_is_the_product_it_names(seed, causal):
    t = worked_example(seed, causal)
    assert (t.n_tokens, t.d_model, t.num_heads) == (3, 4, 2)
    for name in ("X", "W_q", "W_k", "W_v", "W_o", "Q", "K", "V"):
        a = np.asarray(getattr(t, name))
        assert np.array_equal(a, np.round(a)), f"{name} is not whole numbers"
    for i in range(2):
        q = t.X @ head_weight(t.W_q, i, 2)
        k = t.X @ head_weight(t.W_k, i, 2)
        v = t.X @ head_weight(t.W_v, i, 2)
        s = q @ k.T / np.sqrt(2)
        if causal:
            s[np.triu_indices(3, 1)] = -np.inf
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        assert np.allclose(t.Q[i], q) and np.allclose(t.scores[i], s) and np.allclose(t.weights[i], a)
        assert np.allclose(t.heads[i], a @ v)
    assert np.allclose(t.output, np.concatenate(list(t.heads), axis=1) @ t.W_o.T)


def test_the_printout_shows_all_thirteen_matrices_and_fits_80_columns():
    t = worked_example()
    out = rendered(t)
    for name in ("X", "W_q", "W_k", "W_v", "W_q^1", "Q^1", "K^1", "V^1", "S^1", "A^1", "head_1",
                 "Q^2", "S^2", "A^2", "head_2", "H", "W^O", "O"):
        assert re.search(rf"^{re.escape(name)}\s", out, re.M), name
    assert max(len(line) for line in out.splitlines()) <= 80
    # The printed A^1 row of the first token is the trace's, to 3 decimals.
    block = out.split("A^1")[1]
    first = re.search(r"^the\s+(.*)$", block, re.M).group(1).split()
    assert [float(x) for x in first] == pytest.approx(list(t.weights[0, 0]), abs=5e-4)


def test_seed_changes_the_numbers_and_the_same_seed_repeats_them():
    assert np.array_equal(worked_example(3).W_q, worked_example(3).W_q)
    assert not np.array_equal(worked_example(3).W_q, worked_example(4).W_q)


def test_mha_explain_worked(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    runner = CliRunner()
    r = runner.invoke(app, ["explain", "--worked", "--seed", "3", "--no-plots"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("A worked example you can redo by hand") and "head_2" in r.output
    assert rendered(worked_example(3)).split("X  the input")[1][:200] in r.output
    r = runner.invoke(app, ["explain", "the cat", "--worked"])
    assert r.exit_code == 2 and "--worked brings its own three tokens" in r.output

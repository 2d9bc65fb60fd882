"""Attention in tiles (issue 45 item 4): the online softmax gives the full computation's output, block by block."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mhacli.attention.errors import UsageError
from mhacli.attention.tiles import attention_in_tiles, tiled_attention


def full(q, k, v, causal):
    """The textbook way: every score at once, N×N, then the softmax row by row."""
    s = q @ k.T / np.sqrt(q.shape[1])  # (N, N)
    if causal:
        s[np.triu(np.ones(s.shape, bool), 1)] = -np.inf
    a = np.exp(s - s.max(1, keepdims=True))
    return (a / a.sum(1, keepdims=True)) @ v, s


def close(a: float, b: float) -> bool:
    """Equal to round-off (and −inf equals −inf)."""
    return bool(np.isclose(a, b, rtol=1e-12, atol=1e-15))


@st.composite
def heads(draw):
    n, d_k, d_v = draw(st.integers(1, 24)), draw(st.integers(1, 8)), draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([0.1, 1.0, 10.0]))  # 10: scores in the hundreds, where a naive exp overflows
    return (scale * rng.standard_normal((n, d_k)), scale * rng.standard_normal((n, d_k)),
            rng.standard_normal((n, d_v)))


@given(heads(), st.booleans())
def test_tiled_equals_full_for_every_block_size(qkv, causal):
    q, k, v = qkv
    want, _ = full(q, k, v, causal)
    for block in range(1, q.shape[0] + 1):
        assert np.max(np.abs(tiled_attention(q, k, v, block, causal) - want)) <= 1e-12, block


@given(heads(), st.booleans(), st.data())
def test_the_query_rows_record_ends_at_the_full_rows_max_and_sum(qkv, causal, data):
    q, k, v = qkv
    n = q.shape[0]
    block, query = data.draw(st.integers(1, n)), data.draw(st.integers(0, n - 1))
    tiled = attention_in_tiles(q, k, v, block, causal, query)
    _, s = full(q, k, v, causal)
    row = s[query]
    assert len(tiled.steps) == -(-n // block) and tiled.held == n * block and tiled.full == n * n
    assert tiled.steps[0].rescale == 0.0  # nothing was summed before the first block
    last = tiled.steps[-1]
    assert close(last.running_max, row.max())
    assert abs(last.running_sum - np.exp(row - row.max()).sum()) <= 1e-12 * n
    m_old = -np.inf
    for step in tiled.steps:  # each rescale is exp(m_old − m_new); the running max never falls
        seen = row[step.first_key:step.last_key + 1]
        assert close(step.block_max, seen.max())  # a block's product may differ from the whole one's in the last bit
        assert step.running_max == max(m_old, step.block_max)
        if m_old > -np.inf:
            assert close(step.rescale, np.exp(m_old - step.running_max))
        m_old = step.running_max


def test_a_causal_first_row_ignores_every_later_block():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    tiled = attention_in_tiles(q, k, v, 2, causal=True, query=0)
    assert [s.block_max for s in tiled.steps[1:]] == [-np.inf, -np.inf]
    assert [s.rescale for s in tiled.steps[1:]] == [1.0, 1.0] and tiled.steps[-1].running_sum == 1.0
    assert np.array_equal(tiled.output[0], v[0])


@pytest.mark.parametrize(("block", "query", "words"), [(0, 0, "block must be from 1 to N = 5"),
                                                       (6, 0, "block must be from 1 to N = 5"),
                                                       (2, 5, "query must be a position from 0 to 4")])
def test_a_block_or_query_out_of_range_is_refused(block, query, words):
    q = np.zeros((5, 2))
    with pytest.raises(UsageError, match=words):
        attention_in_tiles(q, q, q, block, query=query)


def test_the_api_exports_it():
    import mhacli

    assert mhacli.attention_in_tiles is attention_in_tiles and mhacli.tiled_attention is tiled_attention


# --------------------------------------------------------------------------
# mha tiles
# --------------------------------------------------------------------------

ENV = {"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "80"}
CAT = "the cat sat on the mat"


def _rows(stdout: str) -> list[list[str]]:
    """The table's rows: block number, keys, block max, running max, rescale, running sum."""
    return [line.split() for line in stdout.splitlines() if line.split()[:1] and line.split()[0].isdigit()
            and len(line.split()) == 6]


@pytest.mark.parametrize(("block", "causal"), [(1, False), (2, False), (4, True), (6, True)])
def test_mha_tiles_shows_each_block_and_the_full_rows_sum(runner, block, causal):
    from mhacli import run
    from mhacli.cli.app import app

    args = ["tiles", CAT, "--block", str(block), "--query", "sat", "--head", "2"] + (["--causal"] if causal else [])
    out = runner.invoke(app, args, env=ENV)
    assert out.exit_code == 0, out.output
    rows = _rows(out.stdout)
    assert [r[0] for r in rows] == [str(i + 1) for i in range(-(-6 // block))]
    row = run(CAT, causal=causal).trace.scores[1][2]  # head 2, query 'sat' (position 2)
    assert float(rows[-1][5].replace("−", "-")) == pytest.approx(np.exp(row - row.max()).sum(), rel=1e-3)
    assert float(rows[-1][3].replace("−", "-")) == pytest.approx(row.max(), rel=1e-3, abs=1e-4)
    said = " ".join(out.stdout.split())
    assert "→ the same attention" in said
    assert f"N×B = 6×{block} = {6 * block} numbers ({6 * block * 8} bytes), against N×N = 36" in said
    assert all(len(line) <= 80 for line in out.stdout.splitlines())


def test_mha_tiles_at_40_columns(runner):
    from mhacli.cli.app import app

    out = runner.invoke(app, ["tiles", "--block", "3"], env={**ENV, "COLUMNS": "40"})
    assert out.exit_code == 0, out.output
    assert all(len(line) <= 40 for line in out.stdout.splitlines())


@pytest.mark.parametrize(("args", "words"), [
    (["--block", "0"], "--block must be from 1 to N = 6"),
    (["--block", "7"], "--block must be from 1 to N = 6"),
    (["--head", "5"], "--head must be from 1 to 4"),
    (["--query", "dog"], "--query 'dog' is not a token of the text"),
])
def test_mha_tiles_refuses_in_one_line(runner, args, words):
    from mhacli.cli.app import app

    out = runner.invoke(app, ["tiles", CAT, *args], env=ENV)
    assert out.exit_code == 2 and words in out.stderr and "Traceback" not in out.output, out.output


# --------------------------------------------------------------------------
# mha bench --tiles: the memory curve
# --------------------------------------------------------------------------


def test_tiles_hold_a_fraction_of_the_whole_memory_and_give_the_same_output():
    from mhacli.bench.tiles import memory_curve

    rows = memory_curve(2048, block=64, d_k=16)
    assert [r.n for r in rows] == [256, 512, 1024, 2048]
    assert all(r.difference <= 1e-12 for r in rows)
    ratios = [r.ratio for r in rows]
    assert ratios == sorted(ratios, reverse=True)  # the saving grows with N: N×B against N×N
    assert rows[-1].tiled_peak * 8 <= rows[-1].whole_peak  # 1/8 at N = 2,048 with B = 64 (B/N = 1/32)
    assert rows[-1].whole_peak >= 2048 * 2048 * 8  # the whole way holds at least its N×N scores


def test_mha_bench_tiles_table_and_refusals(runner):
    from mhacli.cli.app import app

    out = runner.invoke(app, ["bench", "--tiles", "--max-tokens", "512"], env=ENV)
    assert out.exit_code == 0, out.output
    assert [line.split()[0] for line in out.stdout.splitlines() if line.split()[:1] in (["256"], ["512"])] == \
        ["256", "512"]
    for args, words in [(["--tiles", "--startup"], "--tiles measures memory"),
                        (["--tiles", "--d-model", "64"], "--d-model sets the layer timed against N"),
                        (["--tiles", "--max-tokens", "100"], "--max-tokens with --tiles must be from 256")]:
        bad = runner.invoke(app, ["bench", *args], env=ENV)
        assert bad.exit_code == 2 and words in bad.stderr, bad.output


def test_mha_tiles_json_is_the_query_rows_record(runner):
    import json

    from mhacli import run
    from mhacli.cli.app import app

    out = runner.invoke(app, ["tiles", CAT, "--causal", "--block", "2", "--query", "1", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    steps = doc["steps"]
    assert [(s["first_key"], s["last_key"]) for s in steps] == [(0, 1), (2, 3), (4, 5)]
    assert [s["block_max"] is None for s in steps] == [False, True, True]  # −∞: keys after 'cat' are hidden
    row = run(CAT, causal=True).trace.scores[0][1][:2]  # head 1, query 1 sees keys 0 and 1
    assert steps[-1]["running_sum"] == pytest.approx(np.exp(row - row.max()).sum(), rel=1e-12)
    assert (doc["scores_held"], doc["scores_full"], doc["bytes_per_number"]) == (12, 36, 8)
    assert doc["largest_difference"] <= 1e-12 and doc["same"] and doc["tolerance"] == 1e-9

"""The per-query measures (mhacli.measures.analysis.analyse) against slow, obvious loops written from definitions."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mhacli.measures.analysis import COPY, FIRST, FIXED, ITSELF, NEXT, NONE, PREVIOUS, RELATIONS, TWO_BACK, analyse
from mhacli.measures.compare import single_head
from traced import run
from mhacli.io.samples import list_samples, load_sample

TOL = 0.05  # two keys tie within 5 points of the row (evidence.TIE_MARGIN), written out so the reference stands alone


# --------------------------------------------------------------------------
# The reference: one row at a time, straight from the docstring of analyse
# --------------------------------------------------------------------------


def _visible(n, causal, mask):
    if mask is not None:
        return [[not mask[q][k] for k in range(n)] for q in range(n)]
    return [[(k <= q) if causal else True for k in range(n)] for q in range(n)]


def _top(row):
    best = max(row)
    ties = [k for k, w in enumerate(row) if w >= best - TOL]
    return (ties[0] if len(ties) == 1 else -1), best


def _picked(row, seen):
    """The row's top key if it is untied and a quarter of the way from chance (1/seen) to certain, else −1."""
    key, best = _top(row)
    return key if seen >= 2 and (best - 1 / seen) / (1 - 1 / seen) >= 0.25 else -1


def _relation_keys(name, q, tokens, visible, fixed=None):
    """The keys relation ``name`` names for row q (empty: undefined)."""
    n = len(tokens)
    if name == ITSELF:
        keys = [q]
    elif name == PREVIOUS:
        keys = [q - 1] if q >= 1 else []
    elif name == NEXT:
        keys = [q + 1] if q + 1 < n else []
    elif name == TWO_BACK:
        keys = [q - 2] if q >= 2 else []
    elif name == FIRST:
        keys = [0]
    elif name == COPY:
        keys = [k for k in range(q) if tokens[k] == tokens[q]]
    else:
        keys = [fixed]
    return [k for k in keys if visible[q][k]]


def reference(weights, tokens, causal, mask=None, window=None):
    """pattern, pattern key/rows/of per head, agreement rows, JS and outside-window mass, by loops."""
    w = np.asarray(weights, dtype=np.float64).tolist()
    h, n = len(w), len(tokens)
    vis = _visible(n, causal, mask)
    counted = [sum(vis[q]) >= 2 for q in range(n)]
    total = sum(counted)
    tops = [[_picked(w[i][q], sum(vis[q])) for q in range(n)] for i in range(h)]
    heads = []
    for i in range(h):
        candidates = []
        for name in RELATIONS:
            fixed_keys = range(1, n) if name == FIXED else [None]
            best = None
            for key in fixed_keys:
                rows = of = 0
                for q in range(n):
                    if not counted[q]:
                        continue
                    keys = _relation_keys(name, q, tokens, vis, key)
                    if keys:
                        of += 1
                        rows += tops[i][q] in keys
                if name == FIXED:
                    if rows and 2 * of >= total and (best is None or (rows / of, rows) > (best[1] / best[2], best[1])):
                        best = (key, rows, of)
                else:
                    best = (None, rows, of)
            if best is not None and best[2] and 2 * best[2] >= total:
                candidates.append((name, *best))
        candidates.sort(key=lambda c: (-c[2] / c[3], -c[2], RELATIONS.index(c[0])))
        # Near chance (fewer than half the rows pick a key, and the head at most spread): named by nothing.
        picked = sum(1 for q in range(n) if counted[q] and tops[i][q] >= 0)
        entropy = sum(-sum(p * math.log2(p) for p in w[i][q] if p > 0) for q in range(n)) / n
        ceiling = sum(math.log2(sum(vis[q])) for q in range(n)) / n
        focus = 1.0 if ceiling == 0 else 1.0 - entropy / ceiling
        near_chance = total > 0 and 2 * picked < total and focus <= 0.4
        if candidates and candidates[0][2] and candidates[0][2] / candidates[0][3] >= 0.5 and not near_chance:
            heads.append(candidates[0])
        else:
            heads.append((NONE, None, 0, 0))
    agree = [[sum(1 for q in range(n) if counted[q] and tops[a][q] >= 0 and tops[a][q] == tops[b][q])
              for b in range(h)] for a in range(h)]
    js = [[0.0] * h for _ in range(h)]
    for a in range(h):
        for b in range(h):
            per_row = []
            for q in range(n):
                d = 0.0
                for k in range(n):
                    p, r = w[a][q][k], w[b][q][k]
                    m = (p + r) / 2
                    if p > 0:
                        d += 0.5 * p * math.log2(p / m)
                    if r > 0:
                        d += 0.5 * r * math.log2(r / m)
                per_row.append(d)
            js[a][b] = sum(per_row) / n
    outside = None
    if window is not None:
        start, stop = window
        outside = [sum(sum(w[i][q][k] for k in range(n) if not start <= k < stop) for q in range(start, stop))
                   / (stop - start) for i in range(h)]
    return heads, agree, js, total, outside


def _fake_trace(weights, tokens, causal, kind="random", mask=None):
    """Just what analyse reads from a trace."""
    return SimpleNamespace(weights=np.asarray(weights), tokens=tuple(tokens), mask=mask, rules=None,
                           num_heads=len(weights), config=SimpleNamespace(causal=causal, weights=kind))


def _check(a, weights, tokens, causal, mask=None, window=None):
    heads, agree, js, total, outside = reference(weights, tokens, causal, mask, window)
    assert a.counted_rows == total
    for s, (name, key, rows, of) in zip(a.heads, heads):
        assert (s.pattern, s.pattern_key, s.pattern_rows, s.pattern_of) == (name, key, rows, of), s.head
        assert s.pattern_share == pytest.approx(rows / of if of else 0.0)
    assert a.agreement_rows.tolist() == agree
    np.testing.assert_allclose(a.agreement, np.array(agree) / total if total else 0.0)
    np.testing.assert_allclose(a.js, js, atol=1e-9)
    if outside is not None:
        np.testing.assert_allclose([s.outside_window for s in a.heads], outside, atol=1e-12)


# --------------------------------------------------------------------------
# Properties on made-up weights: uniform rows, exact ties, one-hot rows, masks
# --------------------------------------------------------------------------


@st.composite
def attention(draw):
    h = draw(st.integers(1, 3))
    n = draw(st.integers(1, 7))
    causal = draw(st.booleans())
    tokens = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    w = np.zeros((h, n, n))
    for i in range(h):
        for q in range(n):
            seen = q + 1 if causal else n
            kind = draw(st.sampled_from(["random", "uniform", "onehot", "tie"]))
            if kind == "uniform":
                row = np.ones(seen)
            elif kind == "onehot":
                row = np.full(seen, 1e-12)
                row[draw(st.integers(0, seen - 1))] = 1.0
            elif kind == "tie" and seen >= 2:
                row = np.full(seen, 0.1)
                a, b = draw(st.lists(st.integers(0, seen - 1), min_size=2, max_size=2, unique=True))
                row[a] = row[b] = 1.0
            else:
                row = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=seen, max_size=seen)))
            w[i, q, :seen] = row / row.sum()
    start = draw(st.integers(0, n - 1))
    stop = draw(st.integers(start + 1, n))
    return w, tokens, causal, (start, stop)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention())
def test_every_measure_equals_the_slow_loop(case):
    w, tokens, causal, window = case
    a = analyse(_fake_trace(w, tokens, causal), window=window)
    _check(a, w, tokens, causal, window=window)
    # Agreement is symmetric, in [0, 1], and a head never agrees with another more than it picks keys.
    assert np.array_equal(a.agreement, a.agreement.T)
    assert ((a.agreement >= 0) & (a.agreement <= 1)).all()
    assert (a.agreement <= np.diag(a.agreement)[:, None] + 1e-12).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.booleans())
def test_a_uniform_head_follows_nothing_and_agrees_with_no_one(n, causal):
    w = np.zeros((2, n, n))
    for q in range(n):
        seen = q + 1 if causal else n
        w[:, q, :seen] = 1.0 / seen
    a = analyse(_fake_trace(w, list("ab" * n)[:n], causal))
    assert all(s.pattern == NONE and s.pattern_share == 0 for s in a.heads)
    assert a.agreement_rows.sum() == 0
    assert a.heads[0].tied_rows == a.counted_rows


def test_causal_row_zero_is_not_counted_so_it_cannot_make_a_head_look_at_the_first_token():
    # issue 12: 5 of 8 heads "looked most at" The because row 0 always gives it 100 %.
    trace = run(load_sample("pronoun").text, heads=8, d_model=64, causal=True)
    a = analyse(trace)
    assert not a.counted[0] and a.counted[1:].all()
    for s in a.heads:
        first = s.relation(FIRST)
        assert first.of == trace.n_tokens - 1  # row 0 left out
    _check(a, trace.weights, trace.tokens, True)


def test_the_analysis_is_frozen():
    a = analyse(run("the cat sat on the mat"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.kind = "designed"  # type: ignore[misc]
    for arr in (a.top_keys, a.agreement, a.agreement_rows, a.js, a.counted):
        assert not arr.flags.writeable


# --------------------------------------------------------------------------
# Every sample, random and designed
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sample", [s.name for s in list_samples()])
@pytest.mark.parametrize("weights", ["random", "designed"])
def test_samples_measures_agree_with_the_weights(sample, weights):
    trace = run(load_sample(sample).text, weights=weights)
    a = analyse(trace, single_head(trace), window=min(8, trace.n_tokens))
    _check(a, trace.weights, trace.tokens, trace.config.causal, window=(0, min(8, trace.n_tokens)))
    assert a.kind == weights
    doc = a.to_dict()
    assert [e["pattern"] for e in doc["head_summaries"]] == [s.pattern for s in a.heads]
    assert doc["agreement"] == a.agreement.tolist()
    # The read-back, row by row.
    back = a.readback
    assert back is not None
    single = np.asarray(single_head(trace).weights[0], dtype=np.float64)
    w = np.asarray(trace.weights, dtype=np.float64)
    vis = _visible(trace.n_tokens, trace.config.causal, None)
    for q in range(trace.n_tokens):
        # Only the keys a head picks clear of chance count as brought back (the evidence rule).
        found = {_picked(list(w[i, q]), sum(vis[q])) for i in range(trace.num_heads)} - {-1}
        assert found == {int(k) for k in a.picked_keys[:, q] if k >= 0}
        assert back.distinct[q] == len(found)
        assert back.single_mass[q] == pytest.approx(sum(single[q, k] for k in found))
        assert back.heads_mass[q] == pytest.approx(float(np.asarray(trace.weights)[:, q].max(axis=-1).sum()))
        assert back.single_mass[q] <= 1 + 1e-9 and back.heads_mass[q] <= trace.num_heads + 1e-9


@pytest.mark.parametrize("causal", [False, True])
def test_repeated_designed_heads_report_four_different_relations_on_nine_tenths_of_rows(causal):
    trace = run(load_sample("repeated").text, weights="designed", causal=causal)
    a = analyse(trace)
    assert [s.pattern for s in a.heads] == [PREVIOUS, COPY, FIRST, ITSELF]
    assert all(s.pattern_share >= 0.9 for s in a.heads)
    # The magnifier slide's query: four heads, four different keys.
    q = a.showcase_queries(1)[0]
    assert len({int(k) for k in a.top_keys[:, q]}) == 4


def test_designed_heads_follow_their_rule_where_the_rule_is_defined():
    trace = run("the dog saw the cat and the cat saw the dog", weights="designed", heads=5, d_model=20)
    a = analyse(trace)
    assert a.heads[4].pattern == NEXT and a.heads[4].pattern_share == 1.0


def test_a_window_reports_the_mass_it_leaves_out():
    trace = run(load_sample("paragraph").text)
    a = analyse(trace, window=10)
    assert a.window == (0, 10)
    w = np.asarray(trace.weights, dtype=np.float64)
    for s in a.heads:
        assert s.outside_window == pytest.approx(w[s.head, :10, 10:].sum(axis=-1).mean())
        assert 0.5 < s.outside_window < 1  # 50 keys outside, 10 inside: most of the mass is not shown


@given(n=st.integers(2, 9), start=st.integers(0, 8), width=st.integers(1, 9), causal=st.booleans(),
       seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_each_rows_mass_outside_a_window_and_the_average_over_heads_equal_the_slow_loop(n, start, width, causal,
                                                                                          seed):
    """What heads.png, magnifiers.png and the page read instead of summing weights themselves."""
    start = min(start, n - 1)
    stop = min(n, start + width)
    trace = run(" ".join(f"w{k}" for k in range(n)), heads=2, d_model=8, seed=seed, causal=causal)
    a = analyse(trace, window=(start, stop))
    w = np.asarray(trace.weights, dtype=np.float64)
    for i in range(2):
        for q in range(n):
            inside = sum(w[i, q, k] for k in range(start, stop))
            expected = 1.0 - inside if start <= q < stop else 0.0
            assert a.outside_rows[i, q] == pytest.approx(expected, abs=1e-12)
        assert a.heads[i].outside_window == pytest.approx(np.mean(a.outside_rows[i, start:stop]), abs=1e-12)
    for q in range(n):
        for k in range(n):
            assert a.average[q, k] == pytest.approx((w[0, q, k] + w[1, q, k]) / 2, abs=1e-15)
    assert np.allclose(a.outside_average, a.outside_rows.mean(axis=0))
    assert analyse(trace).outside_rows is None and not analyse(trace).outside_average.any()


# --------------------------------------------------------------------------
# --json: what the document says equals the slow loop over the weights
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sample", [s.name for s in list_samples()])
@pytest.mark.parametrize("weights", ["random", "designed"])
def test_the_json_patterns_and_agreement_agree_with_the_weights(sample, weights):
    from mhacli.io.export import trace_document
    from mhacli.pipeline import result_of

    trace = run(load_sample(sample).text, weights=weights)
    doc = trace_document(result_of(trace))
    w = np.asarray(doc["arrays"]["weights"], dtype=np.float64)  # read back from the document itself
    heads, agree, js, total, _ = reference(w, doc["tokens"], doc["config"]["causal"])
    assert doc["counted_rows"] == total
    for entry, (name, key, rows, of) in zip(doc["head_summaries"], heads):
        assert (entry["pattern"], entry["pattern_key"], entry["pattern_rows"], entry["pattern_of"]) == (
            name, key, rows, of)
        assert entry["pattern_share"] == pytest.approx(rows / of if of else 0.0)
        assert entry["pattern_token"] == (None if key is None else doc["tokens"][key])
        assert entry["mean_top_weight"] == pytest.approx(w[entry["head"] - 1].max(axis=-1).mean())
    np.testing.assert_allclose(doc["agreement"], np.array(agree) / total)
    np.testing.assert_allclose(doc["js_divergence_bits"], js, atol=1e-9)
    assert "top_key" not in doc["head_summaries"][0]  # the column sum is gone


def test_the_json_of_repeated_designed_names_four_relations_on_nine_tenths_of_rows():
    import json

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    r = CliRunner().invoke(app, ["explain", "--sample", "repeated", "--weights", "designed", "--json", "--no-plots"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    patterns = [(e["pattern"], e["pattern_share"]) for e in doc["head_summaries"]]
    assert len({p for p, _ in patterns}) == 4 and NONE not in {p for p, _ in patterns}, patterns
    assert all(share >= 0.9 for _, share in patterns), patterns
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.export import trace_schema

    jsonschema.Draft202012Validator(trace_schema()).validate(doc)

"""Designed weights: every head follows its named rule, on every sample and on hard inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhacli.attention.config import Config
from mhacli.attention.trace import run_tokens
from traced import run
from mhacli.attention.designed import (
    MARGIN,
    MAX_TOKENS,
    RULE_ORDER,
    Waves,
    code_gap,
    decode_output,
    design,
    falling_weights,
    length_class,
    position_code,
    rules_for,
    rules_note,
    shift,
    token_codes,
)
from mhacli.attention.errors import UsageError
from mhacli.io.samples import list_samples
from mhacli.measures.analysis import analyse


# The rules, written again here from their plain-language meaning (not imported),
# so the tests check the construction against an independent statement of it.
def expected(rule: str, tokens: list[str], causal: bool) -> list[int]:
    n = len(tokens)
    out = []
    for p, tok in enumerate(tokens):
        if rule == "previous token":
            out.append(p - 1 if p > 0 else p)
        elif rule == "first copy of word":
            out.append(tokens.index(tok))
        elif rule == "first token":
            out.append(0)
        elif rule == "itself":
            out.append(p)
        elif rule == "next token":
            out.append(p + 1 if (p + 1 < n and not causal) else p)
        else:
            raise AssertionError(rule)
    return out


def check_rules(trace, min_weight: float = 0.99) -> None:
    tokens = list(trace.tokens)
    n = len(tokens)
    w = np.asarray(trace.weights, dtype=np.float64)
    s = np.asarray(trace.scores, dtype=np.float64)
    assert trace.rules is not None and len(trace.rules) == trace.num_heads
    for i, rule in enumerate(trace.rules):
        want = expected(rule, tokens, trace.config.causal)
        got = w[i].argmax(axis=-1).tolist()
        assert got == want, (rule, [(p, g, e) for p, (g, e) in enumerate(zip(got, want)) if g != e][:5])
        assert w[i][np.arange(n), want].min() >= min_weight, rule
        # The rule's key wins by the promised margin in score units.
        if n > 1:
            others = s[i].copy()
            others[np.arange(n), want] = -np.inf
            gap = s[i][np.arange(n), want] - others.max(axis=-1)
            assert np.all(gap >= MARGIN * (1 - 1e-3)), (rule, float(gap.min()))


SAMPLES = list_samples()


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("heads,d_model", [(4, 16), (1, 8), (2, 16), (5, 20), (8, 32)])
def test_every_sample_follows_the_rules(sample, causal, heads, d_model):
    check_rules(run(sample.text, weights="designed", causal=causal, heads=heads, d_model=d_model))


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_every_sample_follows_the_rules_in_float32_and_char_tokens(sample):
    check_rules(run(sample.text, weights="designed", dtype="float32"))
    check_rules(run(sample.text, weights="designed", tokenizer="char", causal=True))


def test_four_heads_have_four_different_rules_and_others_are_said():
    assert len(set(rules_for(4))) == 4
    assert rules_for(1) == ("previous token",)
    assert rules_for(2) == ("previous token", "first copy of word")
    assert rules_for(5) == RULE_ORDER
    assert rules_for(8) == RULE_ORDER + RULE_ORDER[:3]  # past five, the rules repeat in order
    assert "only the first" in rules_note(1) and "previous token" in rules_note(1)
    assert "first copy of word" in rules_note(2) and "itself" not in rules_note(2)
    assert "head 6 follows the rule of head 1" in rules_note(8)


def test_the_lesson_says_which_rules_other_head_counts_use(runner, tmp_path, monkeypatch):
    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, ["demo", "--no-pause", "--weights", "designed", "--heads", "2", "--step", "1"]).output
    assert "uses the first 2 of its 5" in " ".join(out.replace("│", " ").split())


words = st.sampled_from(["the", "cat", "sat", "on", "a", "mat", ",", "The", "猫", "dog"])


@settings(max_examples=40, deadline=None)
@given(tokens=st.lists(words, min_size=1, max_size=140), causal=st.booleans(),
       dtype=st.sampled_from(["float64", "float32"]), shape=st.sampled_from([(4, 16), (2, 8), (6, 24)]))
def test_any_token_sequence_follows_the_rules(tokens, causal, dtype, shape):
    heads, d = shape
    check_rules(run_tokens(tokens, Config(heads=heads, d_model=d, causal=causal, dtype=dtype,
                                          weights="designed")))


@pytest.mark.parametrize("n,vocab", [(MAX_TOKENS, 1), (MAX_TOKENS, MAX_TOKENS), (300, 7), (129, 129)])
def test_long_texts_up_to_the_limit(n, vocab):
    tokens = [f"w{(i * 7919) % vocab}" for i in range(n)]
    for causal in (False, True):
        check_rules(run_tokens(tokens, Config(weights="designed", causal=causal, dtype="float32")))


def test_refusals_name_the_problem_and_the_fix():
    with pytest.raises(UsageError, match=r"d/h ≥ 4.*heads 1, 2, 4"):
        run("a b c", weights="designed", heads=8, d_model=16)
    with pytest.raises(UsageError, match=r"d_model 8 or more"):
        run("a b c", weights="designed", heads=1, d_model=6)
    with pytest.raises(UsageError, match=r"turn them on \(positions=True\)"):
        run("a b c", weights="designed", positions=False)
    with pytest.raises(UsageError, match=f"at most {MAX_TOKENS} tokens; this text has {MAX_TOKENS + 1}"):
        run_tokens(["x"] * (MAX_TOKENS + 1), Config(weights="designed"))


def test_cli_refuses_with_exit_2(runner, tmp_path, monkeypatch):
    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)
    for cmd in (["explain", "a b c"], ["demo", "a b c", "--no-pause"], ["quiz", "a b c"]):
        result = runner.invoke(app, [*cmd, "--weights", "designed", "--heads", "8"])
        assert result.exit_code == 2, (cmd, result.output)
        assert "d/h ≥ 4" in result.output
        assert "Traceback" not in result.output


def test_weights_are_in_pytorch_layout_and_per_head_blocks():
    trace = run("the cat sat on the mat", weights="designed")
    dk = trace.d_k
    for i in range(trace.num_heads):
        w_q, w_k, _ = trace.head_weights(i)
        assert np.allclose(trace.X @ w_q, trace.Q[i]) and np.allclose(trace.X @ w_k, trace.K[i])
        # A head only reads its own rows: the rows of other heads give it nothing.
        rows = np.zeros(trace.d_model, dtype=bool)
        rows[i * dk:(i + 1) * dk] = True
        assert np.allclose((trace.X @ trace.W_q.T)[:, rows], trace.Q[i])
    assert np.array_equal(trace.W_o, np.eye(trace.d_model))


def test_same_string_same_embedding_row_and_positions_tell_copies_apart():
    trace = run("the dog saw the cat", weights="designed")
    e, x = np.asarray(trace.embeddings), np.asarray(trace.X)
    assert np.array_equal(e[0], e[3])
    assert not np.allclose(x[0], x[3])


def test_shift_is_the_rotation_that_moves_one_position():
    waves = Waves.for_class(64)
    pos = position_code(20, waves)
    for steps in (-1, 1, 3):
        moved = pos[5:15] @ shift(steps, waves).T
        assert np.allclose(moved, pos[5 + steps:15 + steps])


def test_the_falling_feature_falls_and_the_codes_are_apart():
    for length in (64, 128, 256, 512, 1024):
        waves = Waves.for_class(length)
        coef, drop, spread = falling_weights(waves)
        f = position_code(length, waves) @ coef
        assert np.all(np.diff(f) < 0) and math.isclose(drop, float(-np.diff(f).max()))
        assert spread > 0
        assert waves.slow * length < math.pi  # the slow wave never comes back round within L
    for count in (1, 2, 5, 60, 1024):
        codes = token_codes(count)
        assert np.allclose(np.linalg.norm(codes, axis=1), 1.0)
        assert code_gap(codes) > 0


def test_length_class_is_a_power_of_two_at_least_64():
    assert [length_class(n) for n in (1, 64, 65, 128, 129, 1024)] == [64, 64, 128, 128, 256, 1024]


def test_designed_output_names_what_each_head_found():
    tokens = "the dog saw the cat and the cat saw the dog".split()
    trace = run(" ".join(tokens), weights="designed")
    found = decode_output(np.asarray(trace.output), np.asarray(trace.embeddings), trace.tokens,
                          trace.num_heads)
    for i, rule in enumerate(trace.rules):
        assert [row[i] for row in found] == [tokens[k] for k in expected(rule, tokens, False)]


def test_designed_is_deterministic_and_ignores_the_seed():
    a = design(["a", "b", "a"], Config(weights="designed", seed=1))
    b = design(["a", "b", "a"], Config(weights="designed", seed=2))
    for name in ("embeddings", "positions", "w_q", "w_k", "w_v", "w_o"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_rules_appear_in_the_walkthrough(tmp_path):
    from io import StringIO

    from rich.console import Console

    from mhacli.render.terminal import heads_panel

    trace = run("the cat sat on the mat", weights="designed")
    # Wide enough that no cell wraps: at 80 columns a rule may wrap inside its cell, between words.
    console = Console(file=StringIO(), width=160, color_system=None)
    console.print(heads_panel(trace, analyse(trace)))
    text = console.file.getvalue()
    for rule in rules_for(4):
        assert rule in text

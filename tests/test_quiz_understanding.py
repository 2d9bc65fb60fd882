"""The quiz's questions that need understanding (issue 20): each answered from the run's own numbers."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

import mhacli
from mhacli.measures.quiz import UNDERSTANDING, ask, make_quiz


@pytest.fixture(scope="module")
def result():
    return mhacli.run("the cat sat on the mat and the dog sat on the log", heads=4)


def test_every_quiz_asks_at_least_one_question_that_needs_understanding(result):
    for seed in range(12):
        topics = [q.topic for q in make_quiz(result.trace, seed, analysis=result.analysis)]
        assert "why" in topics, (seed, topics)


def test_why_the_count_stays_the_same_is_the_runs_arithmetic(result):
    q = ask("why_same_count", result.trace, random.Random(0), result.analysis)
    pc = result.trace.parameters
    d, h, dk = pc.d_model, pc.heads, pc.d_k
    assert f"h · d · d/h = {h} · {d} · {dk} = {h * d * dk:,}, the same as d · d = {d} · {d} = {d * d:,}" in q.answer
    assert h * d * dk == d * d == pc.multi_head_qkv // 3 and f"h · d · d = {h * d * d:,}" in q.answer


@pytest.mark.parametrize("seed", range(8))
def test_one_row_cannot_serve_two_tokens_says_what_the_sum_says(result, seed):
    q = ask("one_row", result.trace, random.Random(seed), result.analysis)
    assert q is not None
    m = re.search(r"From '.*?' \(position (\d+)\), head (\d) puts ([\d.]+) of its row on '.*?' \(position (\d+)\) "
                  r"and head (\d) puts ([\d.]+) of its row on '.*?' \(position (\d+)\)", q.prompt)
    assert m, q.prompt
    p, i, wi, ki, j, wj, kj = (int(m[1]), int(m[2]) - 1, float(m[3]), int(m[4]), int(m[5]) - 1, float(m[6]),
                               int(m[7]))
    w = np.asarray(result.trace.weights)
    assert abs(w[i, p, ki] - wi) <= 5e-4 and abs(w[j, p, kj] - wj) <= 5e-4
    assert result.analysis.top_keys[i, p] == ki != kj == result.analysis.top_keys[j, p]
    total = round(wi + wj, 3)
    assert f"{wi:.3f} + {wj:.3f} = {total:.3f}" in q.answer
    assert q.answer.startswith("No:") == (total > 1)


@pytest.mark.parametrize("seed", range(4))
def test_what_the_average_hides_is_the_mean_of_the_runs_heads(result, seed):
    q = ask("average_hides", result.trace, random.Random(seed), result.analysis)
    assert q is not None
    m = re.search(r"From '.*?' \(position (\d+)\), head (\d) puts ([\d.]+) on '.*?' \(position (\d+)\)", q.prompt)
    assert m, q.prompt
    p, i, k = int(m[1]), int(m[2]) - 1, int(m[4])
    w = np.asarray(result.trace.weights)
    mean = w.mean(axis=0)[p, k]
    assert q.answer.startswith(f"{mean:.3f}:")
    assert f"({' + '.join(f'{w[j, p, k]:.3f}' for j in range(4))}) / 4" in q.answer
    assert mean < w[i, p, k]  # the head that looks there is blurred down by the others


def test_a_single_head_is_asked_no_question_about_other_heads():
    one = mhacli.run("the cat sat on the mat", heads=1)
    assert ask("one_row", one.trace, random.Random(0), one.analysis) is None
    assert ask("average_hides", one.trace, random.Random(0), one.analysis) is None
    assert len(UNDERSTANDING) == 3
    assert any(q.topic == "why" for q in make_quiz(one.trace, 0, analysis=one.analysis))


@pytest.mark.parametrize("weights", ["grammar", "trained", "designed"])
def test_the_check_command_runs_the_quizzed_model(tmp_path, monkeypatch, weights):
    """The command a quiz prints to check the answers runs (a shell parses it: shlex, as a shell would) and shows
    the same run: the same d, h and weights; its header quotes the text as read, not as a shell would (no
    ``didn'"'"'t``). Both commands through CliRunner: the argv a shell hands ``mha`` is the list shlex gives."""
    import json
    import shlex

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)
    text = "The animal didn't cross the street because it was too tired"
    quiz = CliRunner().invoke(app, ["quiz", text, "--weights", weights, "--json"])
    assert quiz.exit_code == 0, quiz.stderr
    asked = json.loads(quiz.stdout)
    assert "'\"'\"'" not in asked["title"] and "didn't" in asked["title"]
    argv = shlex.split(asked["check"])
    assert argv[:2] == ["mha", "explain"] and argv[2] == text
    check = CliRunner().invoke(app, [*argv[1:], "--no-plots", "--json"])
    assert check.exit_code == 0, check.stderr
    config = json.loads(check.stdout)["config"]
    d, h = (int(n) for n in re.findall(r"d = (\d+), h = (\d+)", asked["title"])[0])
    assert (config["d_model"], config["heads"]) == (d, h)
    assert f"{config['weights']} weights" in asked["title"]


@pytest.fixture(scope="module")
def shared():
    return mhacli.run("the cat sat on the mat and the dog sat on the log", heads=8, d_model=32, kv_heads=2)


@pytest.mark.parametrize("seed", range(6))
def test_the_shared_keys_question_counts_the_groups_and_their_readers(shared, seed):
    """K^j's readers, computed here from h and g (heads (j−1)·h/g + 1 … j·h/g), not from the trace's grouping."""
    q = ask("shared_keys", shared.trace, random.Random(seed), shared.analysis)
    assert q is not None
    j = int(re.search(r"which query heads read K\^(\d+)\?", q.prompt)[1])
    h, g = 8, 2
    readers = list(range((j - 1) * h // g + 1, j * h // g + 1))
    assert q.answer.startswith(f"{g} (one per group")
    assert f"K^{j} is read by heads {', '.join(map(str, readers))}:" in q.answer
    w_k = np.asarray(shared.trace.W_k)
    assert w_k.shape[0] == g * shared.trace.d_k  # the layer really builds g key matrices of d/h columns


def test_the_cache_question_is_two_g_d_h_numbers_per_token(shared):
    q = ask("cache", shared.trace, random.Random(0), shared.analysis)
    assert q is not None
    n, g, d_h = shared.trace.n_tokens, 2, 32 // 8
    k_rows = np.asarray(shared.trace.W_k).shape[0]  # the K and V one token adds: g · d_h numbers each
    assert 2 * k_rows == 2 * g * d_h == 16
    assert f"2 · g · d/h = 2 · {g} · {d_h} = {2 * g * d_h:,} per token, {2 * g * d_h * n:,} for {n} tokens" in q.answer
    assert f"with g = h = 8: 2 · 8 · {d_h} = {2 * 8 * d_h:,} per token, 4× as many" in q.answer


def test_a_run_without_sharing_is_asked_neither_and_keeps_its_quiz(result):
    assert ask("shared_keys", result.trace, random.Random(0), result.analysis) is None
    assert ask("cache", result.trace, random.Random(0), result.analysis) is None
    topics = {q.topic for seed in range(12) for q in make_quiz(result.trace, seed, analysis=result.analysis)}
    assert not topics & {"sharing", "cache"}


@pytest.mark.parametrize("seed", range(6))
def test_a_shared_run_quiz_asks_both_and_never_counts_the_articles_parameters(shared, seed):
    asked = make_quiz(shared.trace, seed, count=8, analysis=shared.analysis)
    topics = [q.topic for q in asked]
    assert topics[:2] == ["sharing", "cache"] and len(asked) == 8
    assert "parameters" not in topics and not any("4 · d · d" in q.answer or "h · d · d" in q.answer for q in asked)


def test_the_quiz_command_takes_kv_heads_and_its_check_command_keeps_them():
    import json
    import shlex

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    quiz = CliRunner().invoke(app, ["quiz", "the cat sat on the mat", "--heads", "4", "--kv-heads", "2", "--json",
                                    "--answers"])
    assert quiz.exit_code == 0, quiz.output
    asked = json.loads(quiz.stdout)
    assert [q["topic"] for q in asked["questions"]][:2] == ["sharing", "cache"]
    argv = shlex.split(asked["check"])
    assert argv[argv.index("--kv-heads") + 1] == "2"
    assert "2 · 2 · 4 = 16 per token" in asked["questions"][1]["answer"]

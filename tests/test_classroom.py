"""Classroom commands: shapes for slides, the paced lesson, the quiz."""

from __future__ import annotations

import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
from io import StringIO

import numpy as np
import pytest
from rich.console import Console

from mhacli.measures.analysis import analyse
from mhacli.cli.app import app


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing a command writes by default lands in the work tree


def _lines_fit(text: str, width: int = 80) -> None:
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, too_long[:3]


# --------------------------------------------------------------------------
# mha shapes
# --------------------------------------------------------------------------


def test_shapes_matches_the_math_by_hand(runner):
    result = runner.invoke(app, ["shapes", "--tokens", "9", "--d-model", "16", "--heads", "4"])
    assert result.exit_code == 0, result.output
    out = result.output
    # N = 9, d = 16, h = 4, d/h = 4.  Projections: h·N·d·(d/h) = 9·16·16 = 2,304 each (Q, K, V) and
    # W^O: N·d·d = 2,304.  Scores and weighted values: h·N·N·(d/h) = 4·9·9·4 = 1,296 each.
    rows = {
        "Queries": ("N×d/h = 9×4", "2,304"),
        "Keys": ("N×d/h = 9×4", "2,304"),
        "Values": ("N×d/h = 9×4", "2,304"),
        "Scores": ("N×N = 9×9", "1,296"),
        "Softmax": ("N×N = 9×9", "0"),
        "Weighted values": ("N×d/h = 9×4", "1,296"),
        "Concatenate": ("N×d = 9×16", "0"),
        "Output W^O": ("N×d = 9×16", "2,304"),
    }
    for name, (shape, madds) in rows.items():
        line = next(li for li in out.splitlines() if li.strip().startswith(name))
        assert shape in line and line.rstrip().endswith(madds), line
    assert re.search(r"total\s+11,808", out)  # 4·2,304 + 2·1,296
    # Parameters: 3·16·16 = 768 for one wide head, 4·3·16·4 = 768 for four heads, W^O 256, 1,024 in all.
    assert "3 · d · d = 3 · 16 · 16 = 768" in out
    assert "4 · 3 · 16 · 4 = 768" in out
    assert re.search(r"W\^O, d×d = 16×16\s+256", out)
    assert re.search(r"total with W\^O\s+1,024", out)
    assert "Causal mask" not in out
    _lines_fit(out)


def test_shapes_causal_adds_the_mask_row_and_huge_numbers_are_never_cut(runner):
    out = runner.invoke(app, ["shapes", "-n", "9", "--causal"]).output
    assert "Causal mask" in out and "−∞" in out
    big = runner.invoke(app, ["shapes", "-n", "100000", "-d", "4096", "-H", "32"])
    assert big.exit_code == 0
    total = 3 * 100000 * 4096 * 4096 + 2 * 100000 * 100000 * 4096 + 100000 * 4096 * 4096
    assert f"{total:,}" in big.output
    _lines_fit(big.output)


def test_shapes_markdown_for_slides(runner):
    out = runner.invoke(app, ["shapes", "-n", "9", "--markdown"]).output
    assert "| Queries (×h) | Q^i = X W_q^i | N×d/h | 9×4 | 2,304 |" in out
    assert "| **total** | | | | **11,808** |" in out
    assert "| **total with W^O** | **1,024** |" in out


@pytest.mark.parametrize("args,message", [  # --tokens 0 is a row of docs/errors.md
    (["--heads", "3"], "--d-model 16 is not divisible by --heads 3; try --heads 2 or 4"),
    (["--heads", "32"], "--heads 32 is more than --d-model 16"),
    (["--d-model", "0"], "--d-model must be from 1"),
    (["--d-model", "2000000"], "--d-model must be from 1 to 1,000,000"),
])
def test_shapes_refuses_bad_sizes(runner, args, message):
    result = runner.invoke(app, ["shapes", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_shapes_tabulates_models_too_big_to_run(runner):
    # No arrays are made, so a width whose weights would not fit in memory is still fine here.
    result = runner.invoke(app, ["shapes", "--tokens", "8192", "--d-model", "65536", "--heads", "64"])
    assert result.exit_code == 0, result.output
    assert f"{3 * 65536 * 65536:,}" in result.output
    assert runner.invoke(app, ["explain", "x", "--d-model", "65536", "--heads", "64"]).exit_code == 2


# --------------------------------------------------------------------------
# mha demo
# --------------------------------------------------------------------------

# Each step of the article, and a phrase of the narration that must explain it.
ARTICLE_STEPS = {
    "magnifier analogy": "magnifier",
    "tokens and embedding": "table E",
    "positions": "X = E + P",
    "per-head projections": "W_q^i, W_k^i, W_v^i",
    "per-head shapes": "Q^i = X W_q^i",
    "parameter count": "3·d·d",
    "split equals direct": "Q = X W_qᵀ",
    "scores": "S^i = Q^i K^iᵀ",
    "scaling": "√(d/h)",
    "causal mask": "−∞",
    "mask polarity": "scaled_dot_product_attention",
    "softmax": "softmax",
    "weighted values": "head_i = A^i V^i",
    "concatenation": "H = [head_1 … head_h]",
    "output projection": "O = H W^Oᵀ",
}


def test_demo_runs_to_the_end_and_narrates_every_step(runner):
    result = runner.invoke(app, ["demo", "--no-pause"])
    assert result.exit_code == 0, result.output
    out = re.sub(r"\s*│\s*", " ", result.output)  # narration wraps inside panel borders
    out = re.sub(r"\s+", " ", out)
    for step, phrase in ARTICLE_STEPS.items():
        assert phrase in out, step
    total = len(re.findall(r"Step \d+ of (\d+)", result.output))
    assert total == 15 and "Step 15 of 15 · One head against many" in result.output
    assert "What next" in result.output


def test_demo_narration_covers_the_article_in_the_lesson_data():
    from traced import run
    from mhacli.measures.lesson import lesson_numbers
    from mhacli.render.lesson import lesson

    shown = run("the cat sat on the mat")
    steps = lesson(shown, analyse(shown), lesson_numbers(shown), split_diff=shown.split_equals_direct())
    keys = [s.key for s in steps]
    assert keys[0] == "why" and keys[-1] == "magnifiers"
    assert {"mask", "softmax", "output", "parameters", "split", "concat", "weighted"} <= set(keys)
    narration = " ".join(s.narration for s in steps)
    for phrase in ARTICLE_STEPS.values():
        assert phrase in narration
    assert all(s.shows is not None for s in steps)


@pytest.mark.parametrize("args", [
    ["--sample", "repeated", "--weights", "designed"],
    ["--sample", "paragraph", "--causal"],
    ["--sample", "japanese", "--weights", "designed", "--heads", "2"],
    ["dog bites man", "--heads", "1"],
])
def test_demo_fits_80_columns(runner, args):
    result = runner.invoke(app, ["demo", "--no-pause", *args], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    _lines_fit(result.output)


def test_demo_runs_straight_through_when_stdin_is_not_a_terminal(runner):
    result = runner.invoke(app, ["demo", "--sample", "cat"], input="")
    assert result.exit_code == 0
    assert "Step 15 of 15" in result.output and "Enter:" not in result.output


def test_demo_designed_reads_back_what_each_head_found(runner):
    out = runner.invoke(app, ["demo", "--no-pause", "--sample", "repeated", "--weights", "designed"]).output
    assert "W^O is the identity" in out
    for rule in ("previous token", "first copy of word", "first token", "itself"):
        assert rule in out


def test_demo_step_and_query_options(runner):
    result = runner.invoke(app, ["demo", "--no-pause", "--step", "14"])
    assert result.exit_code == 0 and "Step 13 of" not in result.output and "Step 14 of 15" in result.output
    assert "Step 15 of 15" in result.output
    result = runner.invoke(app, ["demo", "--no-pause", "--step", "16"])
    assert result.exit_code == 2 and "--step must be from 1 to 15" in result.output
    result = runner.invoke(app, ["demo", "--no-pause", "--query", "mat"])
    assert "for the query 'mat' (5)" in re.sub(r"\s*│\s*", " ", result.output)


def _flat(output: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\s*│\s*", " ", output))


@pytest.mark.slow
def test_demo_ends_on_the_shipped_one_against_many_result(runner, tmp_path, demo_drawn):
    """The last step's numbers are the shipped models' one held-out accuracy (core.score), and the figure is
    written."""
    from mhacli.grammar.score import percent, score
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

    result = runner.invoke(app, ["demo", "--no-pause", "--step", "15"])  # its figures: the session's demo run
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    for name, parameters in (("trained", "1,904"), ("grammar", "16,096")):
        single = score(load_trained(shipped_model_path(alone=True, name=name))[0])
        heads = score(load_trained(shipped_model_path(name=name))[0])
        assert f"one head alone reached {percent(single.accuracy)} (held-out accuracy, mean over relations), " \
               f"4 heads together {percent(heads.accuracy)}" in out
        assert f"{parameters} parameters each" in out
        for relation, value, other in zip(single.relations, single.by_relation, heads.by_relation):
            assert f"{relation} {percent(value)} against {percent(other)}" in out
    assert "the lone head learned first token" in out
    assert "mha explain --weights grammar" not in out  # (what next names the model the lesson ran on)
    grammar = _flat(runner.invoke(app, ["demo", "the cat sat on the mat", "--weights", "grammar", "--no-pause",
                                        "--step", "15"]).output)
    assert "--weights grammar" in grammar and "--weights trained" not in grammar
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "one-vs-many.png").write_text("the cat sat")  # the demo's own figure is planned too
    refused = runner.invoke(app, ["demo", "--file", str(tmp_path / "in" / "one-vs-many.png"), "--out",
                                  str(tmp_path / "in"), "--no-pause"])
    assert refused.exit_code == 2 and "which is the input" in refused.output
    assert (tmp_path / "in" / "one-vs-many.png").read_text() == "the cat sat"
    # The figure: the session's demo run with --out (conftest) wrote it and said so.
    assert (demo_drawn.out / "one-vs-many.png").stat().st_size > 0 and "one-vs-many.png" in demo_drawn.output


def test_demo_hide_rules_hides_what_the_trained_heads_learned(runner):
    from mhacli.grammar.score import percent, score
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

    out = _flat(runner.invoke(app, ["demo", "--no-pause", "--step", "15", "--hide-rules"]).output)
    lone = score(load_trained(shipped_model_path(alone=True, name="trained"))[0])  # the 'relations' pair's lone head
    assert percent(lone.accuracy) in out and "learned" not in out


def test_one_vs_many_figure_titles_each_panel_and_reads_the_records(one_vs_many_drawn):
    from mhacli.cli.commands.classroom import shipped_pairs
    from mhacli.grammar.score import percent, score
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained
    from mhacli.render.figures.one_vs_many import row_title

    pairs = shipped_pairs()
    fig = one_vs_many_drawn()  # one_vs_many_figure(pairs), built once per session
    titles = [ax.get_title() for ax in fig.get_axes() if ax.get_title()]
    assert titles[0] == "1 head alone\nlearned: first token" and "head 4 of 4\nlearned: two back" in titles
    assert len(titles) == 10  # 1 + 4 panels per pair
    letters, grammar = (row_title(p) for p in pairs)
    lone, four = (score(load_trained(shipped_model_path(alone=a, name="trained"))[0]) for a in (True, False))
    assert "1,904 parameters each" in letters and f"mean {percent(lone.accuracy)} → {percent(four.accuracy)}" in letters
    assert "held-out accuracy, mean over relations" in letters
    alone, many = (score(load_trained(shipped_model_path(alone=a, name="grammar"))[0]) for a in (True, False))
    recipient = alone.by_relation[alone.relations.index("recipient")]  # the one held-out accuracy (grammar.score)
    theirs = many.by_relation[many.relations.index("recipient")]
    assert f"recipient {percent(recipient)} → {percent(theirs)}" in grammar and "16,096 parameters each" in grammar
    hidden = one_vs_many_drawn(hide_rules=True)  # one_vs_many_figure(pairs, hide_rules=True)
    assert not any("learned" in ax.get_title() for ax in hidden.get_axes())


def test_present_waits_between_steps_and_q_quits():
    from traced import run
    from mhacli.measures.lesson import lesson_numbers
    from mhacli.render.lesson import lesson, present

    shown = run("the cat sat on the mat")
    steps = lesson(shown, analyse(shown), lesson_numbers(shown), split_diff=shown.split_equals_direct())
    prompts: list[str] = []

    def enter(prompt: str) -> str:
        prompts.append(prompt)
        return ""

    console = Console(file=StringIO(), width=80, color_system=None)
    present(console, steps, pause=True, wait=enter)
    assert len(prompts) == len(steps) - 1  # never after the last step
    assert "step 2 of 14" in prompts[0]

    answers = iter(["", "q"])
    console = Console(file=StringIO(), width=80, color_system=None)
    present(console, steps, pause=True, wait=lambda p: next(answers))
    assert "Step 2 of 14" in console.file.getvalue() and "Step 3 of 14" not in console.file.getvalue()

    def closed(prompt: str) -> str:
        raise EOFError

    console = Console(file=StringIO(), width=80, color_system=None)
    present(console, steps, pause=True, wait=closed)
    assert "Step 14 of 14" in console.file.getvalue()


@pytest.mark.skipif(not hasattr(os, "openpty") or shutil.which("mha", path=os.path.dirname(sys.executable)) is None,
                    reason="needs a pseudo-terminal and the installed mha")
def test_demo_in_a_terminal_waits_for_enter_and_ctrl_c_exits_130(tmp_path):
    """The installed ``mha`` on a real pseudo-terminal: it stops after step 1, Enter moves on, Ctrl-C ends it."""
    from pause import default_signals  # their default actions, even under nohup or in a shell's background

    mha = shutil.which("mha", path=os.path.dirname(sys.executable))
    master, slave = os.openpty()
    proc = subprocess.Popen([mha, "demo", "--sample", "cat"], stdin=slave, stdout=slave, stderr=subprocess.PIPE,
                            cwd=tmp_path, env={**os.environ, "COLUMNS": "80", "TERM": "dumb"},
                            start_new_session=True, preexec_fn=default_signals)
    os.close(slave)

    def read_until(marker: str) -> str:
        seen = ""
        while marker not in seen:
            ready, _, _ = select.select([master], [], [], 600)  # woken by the output; 600 s only guards a hang
            assert ready, f"no {marker!r} in {seen[-300:]!r}"
            seen += os.read(master, 65536).decode("utf-8", "replace")
        return seen

    try:
        first = read_until("Enter: step 2 of 15")
        assert "Step 1 of 15" in first and "Step 2 of 15" not in first
        os.write(master, b"\n")
        read_until("Enter: step 3 of 15")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=600) == 130  # a guard, not a timer: it returns as soon as mha has ended
        assert "interrupted" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


# --------------------------------------------------------------------------
# mha quiz
# --------------------------------------------------------------------------


def test_quiz_is_the_same_for_the_same_seed_and_differs_across_seeds(runner):
    a = runner.invoke(app, ["quiz", "--sample", "repeated", "--seed", "3"])
    b = runner.invoke(app, ["quiz", "--sample", "repeated", "--seed", "3"])
    assert a.exit_code == 0 and a.output == b.output
    others = {runner.invoke(app, ["quiz", "--sample", "repeated", "--seed", str(s)]).output for s in range(4, 8)}
    assert len(others | {a.output}) > 1
    assert "answer:" not in a.output


def test_quiz_answers_are_printed_under_the_same_questions(runner):
    plain = runner.invoke(app, ["quiz", "--sample", "list", "--seed", "2"]).output
    answered = runner.invoke(app, ["quiz", "--sample", "list", "--seed", "2", "--answers"]).output
    assert answered.count("answer:") == 5
    for line in plain.splitlines():
        if re.match(r"\s*\d\. \[", line):
            assert line.strip() in answered


def test_quiz_asks_a_shape_a_parameter_count_and_a_favourite_key():
    from traced import run
    from mhacli.measures.quiz import make_quiz

    trace = run("the cat sat on the mat", seed=5)
    topics = {q.topic for q in make_quiz(trace, seed=5)}
    assert {"shape", "parameters", "attention"} <= topics
    assert len(make_quiz(trace, seed=5, count=20)) == 20


def test_quiz_answers_come_from_the_trace():
    from traced import run
    from mhacli.measures.analysis import analyse
    from mhacli.measures.quiz import ask

    for seed in range(6):
        trace = run("the dog saw the cat and the cat saw the dog", seed=seed, heads=2, d_model=8)
        q = ask("top_key", trace, random.Random(seed), analyse(trace))
        head, pos = map(int, re.search(r"head (\d+).*\(position (\d+)\)", q.prompt).groups())
        best = int(np.argmax(trace.weights[head - 1, pos]))
        assert q.answer.startswith(f"'{trace.tokens[best]}' (position {best})")
        assert f"{trace.weights[head - 1, pos, best]:.2f}" in q.answer
    trace = run("a b c", heads=2, d_model=8)
    shape = ask("shape", trace, random.Random(0), analyse(trace))
    step = next(s for s in trace.steps if s.name in shape.prompt)
    assert shape.answer == f"{step.shape} = {step.shape_numeric}"
    for k in range(8):
        q = ask("parameters", trace, random.Random(k), analyse(trace))
        numbers = {3 * 8 * 4, 3 * 8 * 8, 8 * 8, 4 * 8 * 8}
        assert int(q.answer.split()[0].replace(",", "")) in numbers


def test_quiz_on_designed_weights_follows_the_rules():
    from traced import run
    from mhacli.measures.analysis import analyse
    from test_designed import expected
    from mhacli.measures.quiz import ask

    trace = run("the dog saw the cat and the cat saw the dog", weights="designed")
    for seed in range(10):
        q = ask("top_key", trace, random.Random(seed), analyse(trace))
        head, pos = map(int, re.search(r"head (\d+).*\(position (\d+)\)", q.prompt).groups())
        key = expected(trace.rules[head - 1], list(trace.tokens), False)[pos]
        assert f"(position {key}), with weight 1.00" in q.answer


# --------------------------------------------------------------------------
# The classroom docs: links that work on GitHub, answers that match the tool
# --------------------------------------------------------------------------

DOCS = ("lesson-plan.md", "lesson-map.md", "designed-heads.md", "conventions.md", "exercises.md",
        "reading-heatmaps.md")


def _docs_dir():
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("name", DOCS)
def test_classroom_docs_links_and_images_resolve(name):
    docs = _docs_dir()
    text = (docs / name).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)]+)\)", text)
    assert targets, name
    for target in targets:
        assert not target.startswith("/"), f"{name}: absolute link {target} breaks on GitHub"
        if target.startswith(("http://", "https://", "#")):
            continue
        path = target.split("#")[0]
        assert (docs / path).exists(), f"{name}: {target} does not exist"
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert image.startswith("img/lesson-"), image  # the classroom pictures are ours: lesson-*


def test_every_classroom_command_and_option_is_documented():
    docs = " ".join((_docs_dir() / n).read_text(encoding="utf-8") for n in DOCS)
    for phrase in ("mha samples", "mha shapes", "mha demo", "mha quiz", "--weights designed", "--markdown",
                   "--no-pause", "--step", "--query", "--answers", "--seed", "--causal"):
        assert phrase in docs, phrase


def test_exercise_answers_match_the_tool(runner):
    from mhacli.measures.analysis import FIXED, analyse, mean_pairwise_js, row_entropy
    from mhacli.attention.attention import multi_head_attention
    from traced import run

    text = (_docs_dir() / "exercises.md").read_text(encoding="utf-8")
    # 1-3: shapes, parameters, cost
    out = runner.invoke(app, ["shapes", "--tokens", "12", "--d-model", "32", "--heads", "8"]).output
    assert all(s in out for s in ("N×d/h = 12×4", "N×N = 12×12", "N×d = 12×32"))
    out = runner.invoke(app, ["shapes", "--tokens", "1", "--d-model", "512", "--heads", "8"]).output
    for number in ("786,432", "262,144", "1,048,576"):
        assert number in out and number in text
    assert "3 · 512 · 64 = 98,304" in text and 3 * 512 * 64 == 98_304
    out = runner.invoke(app, ["shapes", "--tokens", "18"]).output
    assert re.search(r"total\s+28,800", out) and "28,800" in text
    # 5: the causal count
    assert "36 of\n81 pairs, 44 %" in text or "36 of 81 pairs, 44 %" in text.replace("\n", " ")
    assert 9 * 8 // 2 == 36 and round(36 / 81 * 100) == 44
    # 8: without positions the row of 'dog' is the same in both orders
    a = run("dog bites man", positions=False, d_model=4, heads=2)
    b = run("man bites dog", positions=False, d_model=4, heads=2)
    assert np.allclose(a.output[0], b.output[2])
    assert "(0.86, −0.77,\n−0.74, 0.87" in text
    assert [f"{v:.2f}" for v in a.output[0]] == ["0.86", "-0.77", "-0.74", "0.87"]
    assert not np.allclose(run("dog bites man", d_model=4, heads=2).output[0],
                           run("man bites dog", d_model=4, heads=2).output[2])
    # 9-10: designed picks on the repeated sample
    from mhacli.io.samples import load_sample

    trace = run(load_sample("repeated").text, weights="designed")
    picks = trace.weights.argmax(-1)
    assert [int(picks[i, 7]) for i in range(4)] == [6, 4, 0, 7]
    assert [p for p in range(11) if picks[1, p] == picks[3, p]] == [0, 1, 2, 4, 5]
    # 13: one wide head against four designed heads
    single = multi_head_attention(trace.X, trace.X, trace.X, trace.W_q, trace.W_k, trace.W_v, trace.W_o, 1,
                                  False).weights
    assert f"{row_entropy(single).mean():.2f}" == "0.06"
    assert f"{mean_pairwise_js(np.asarray(trace.weights)):.3f}" == "0.788"
    # 14: random head 2 on the repeated sample, per query
    random_trace = run(load_sample("repeated").text)
    head2 = analyse(random_trace).heads[1]
    assert (head2.pattern, head2.pattern_key, head2.pattern_rows, head2.pattern_of) == (FIXED, 5, 7, 11)
    assert int((np.asarray(random_trace.weights[1]).argmax(-1) == 5).sum()) == 8  # one of them not clear of chance
    assert random_trace.tokens[5] == "and" and "on 8 of the 11" in text and "“and” (position 5)\", 7 of 11" in text
    assert f"{head2.mean_entropy:.2f}" == "2.81" and f"{head2.max_entropy:.2f}" == "3.46"
    assert "`and` (position 5), on 8 of the 11 rows" in text
    other = analyse(run(load_sample("repeated").text, seed=1)).heads[1]
    assert (other.pattern, other.pattern_key) != (FIXED, 5)  # "another --seed ... another one"


@pytest.mark.torch
def test_conventions_polarity_table_matches_pytorch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from traced import run

    trace = run("a b c", causal=True, heads=1, d_model=4)
    blocked = torch.from_numpy(np.array(trace.mask))  # a writable copy: the trace is read-only
    assert blocked.tolist() == [[False, True, True], [False, False, True], [False, False, False]]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # scaled_dot_product_attention: True = may attend, so the tool's mask must be inverted.
    assert torch.allclose(F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked), causal)
    assert not torch.allclose(F.scaled_dot_product_attention(q, k, v, attn_mask=blocked), causal)
    # nn.MultiheadAttention: True = blocked, the tool's polarity as it is.
    layer = torch.nn.MultiheadAttention(4, 1, bias=False, batch_first=True).double()
    x = torch.randn(1, 3, 4, generator=g, dtype=torch.float64)
    _, weights = layer(x, x, x, attn_mask=blocked)
    assert torch.all(weights[0][blocked] == 0)


def test_demo_writes_nothing_unless_asked_and_figures_with_out(runner, tmp_path, demo_drawn):
    result = runner.invoke(app, ["demo", "--no-pause", "--sample", "cat"])
    assert result.exit_code == 0 and list(tmp_path.iterdir()) == []
    # with --out: the session's one demo run (conftest), "--out lesson --dpi 30"
    assert demo_drawn.argv == ("demo", "--no-pause", "--sample", "repeated", "--weights", "designed")
    names = demo_drawn.names()
    assert names == ["head-1.png", "head-2.png", "head-3.png", "head-4.png", "heads.png", "magnifiers.png",
                     "one-vs-many.png", "split.png"]
    import struct

    # --dpi reaches every figure: each is at least 6 inches wide, 600 pixels at the default 100 dpi.
    widths = {name: struct.unpack(">I", (demo_drawn.out / name).read_bytes()[16:20])[0] for name in names}
    assert all(w < 600 for w in widths.values()), widths
    flat = " ".join(demo_drawn.output.replace("│", " ").split())
    assert f"{demo_drawn.shown}/heads.png" in flat and "Wrote:" in flat


@pytest.mark.parametrize("causal", [False, True])
def test_the_mask_step_draws_the_mask_this_run_has(causal):
    """A causal run blocks exactly the keys after each query; a bidirectional one has no mask, so no grid."""
    import io

    from rich.console import Console

    from traced import run
    from mhacli.render.lesson import mask_grid

    t = run("the cat sat on the mat", heads=2, causal=causal)
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(mask_grid(t, analyse(t)))
    out = buf.getvalue()
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == (6 if causal else 0)
    for q, line in enumerate(rows):
        cells = [c for c in line.split() if c in ("✓", "·")]
        assert cells == ["✓" if k <= q else "·" for k in range(6)], line
    assert ("No mask in this run" in out) == (not causal)
    assert ("✓" in out) == causal


# --------------------------------------------------------------------------
# Honest narration: the measures, the weight kinds, --hide-rules
# --------------------------------------------------------------------------


def test_the_lesson_plan_pronoun_exercise_claims_only_what_moves_with_the_seed():
    """'run it again with --seed 1, --seed 2, … and watch the answer move': the heads whose largest weight of
    she's row is on keeper change with the seed.  The plan no longer says two heads put *most* of that row on
    keeper: their weights there are well under half."""
    from traced import run
    from mhacli.io.samples import load_sample

    plan = " ".join((_docs_dir() / "lesson-plan.md").read_text(encoding="utf-8").split())
    assert "`--seed 1`, `--seed 2`, … and watch the answer move" in plan
    assert "most of `she`'s weight" not in plan
    text = load_sample("pronoun").text

    def linked(seed):
        t = run(text, seed=seed)
        q, keeper = t.tokens.index("she"), t.tokens.index("keeper")
        return [i for i in range(t.num_heads) if int(np.asarray(t.weights[i, q]).argmax()) == keeper]

    assert len(linked(0)) == 2
    assert all(linked(seed) == [] for seed in range(1, 10))
    t = run(text, seed=0)
    q, keeper = t.tokens.index("she"), t.tokens.index("keeper")
    assert all(float(t.weights[i, q, keeper]) < 0.5 for i in linked(0))  # the largest share, not most


@pytest.mark.parametrize("sample,weights", [("cat", "random"), ("repeated", "designed"), ("pronoun", "random")])
def test_quiz_answers_about_patterns_and_agreement_are_the_runs(sample, weights):
    import random

    from mhacli.measures.analysis import analyse
    from mhacli.measures.quiz import ask
    from traced import run
    from mhacli.io.samples import load_sample

    trace = run(load_sample(sample).text, weights=weights)
    w = np.asarray(trace.weights, dtype=np.float64)
    top = w.argmax(-1)  # (h, N): no sample row ties here except designed first rows, checked below
    tied = (np.sort(w, -1)[..., -1] - np.sort(w, -1)[..., -2]) < 1e-9
    n = trace.n_tokens
    # The evidence rule, by hand: a top key counts a quarter of the way from chance (1/N) to certain.
    tied |= (w.max(-1) - 1 / n) / (1 - 1 / n) < 0.25
    for seed in range(6):
        q = ask("agreement", trace, random.Random(seed), analyse(trace))
        a, b = (int(x) - 1 for x in re.search(r"heads (\d+) and (\d+)", q.prompt).groups())
        same = int(((top[a] == top[b]) & ~tied[a] & ~tied[b]).sum())
        assert q.answer.startswith(f"{same} of {trace.n_tokens}"), (q.prompt, q.answer)
        q = ask("pattern", trace, random.Random(seed), analyse(trace))
        i = int(re.search(r"head (\d+)", q.prompt)[1]) - 1
        m = re.search(r"on (\d+) of (\d+) rows", q.answer)
        if m:  # rows whose top key the named relation picks, checked by hand for the positional ones
            rows, of = int(m[1]), int(m[2])
            if "previous token" in q.answer and "closest" not in q.answer:
                assert (rows, of) == (int(((top[i, 1:] == np.arange(n - 1)) & ~tied[i, 1:]).sum()), n - 1)
            if "itself" in q.answer and "closest" not in q.answer:
                assert (rows, of) == (int(((top[i] == np.arange(n)) & ~tied[i]).sum()), n)
            assert 0 <= rows <= of <= trace.n_tokens
        assert ("random weights" in q.answer) == (weights == "random")


def test_the_demo_says_what_made_its_weights(runner):
    out = {w: " ".join(runner.invoke(app, ["demo", "--sample", "cat", "--weights", w, "--no-pause"]).output
                       .replace("│", " ").split())
           for w in ("random", "designed", "trained")}
    assert all(r for r in out.values())
    assert "accident of the seed" in out["random"] and "accident of the seed" not in out["designed"]
    assert "built by hand" in out["designed"] and "built by hand" not in out["trained"]
    assert "a model of 'mha train'" in out["trained"]
    assert "4 heads, 4 different patterns" in out["trained"]


def test_hide_rules_leaves_out_every_rule_and_relation_name(runner):
    from mhacli.measures.analysis import RELATIONS
    from mhacli.attention.designed import RULE_ORDER

    names = set(RULE_ORDER) | set(RELATIONS) - {"itself"}  # "itself" is an English word the lesson uses
    for args in (["demo", "--sample", "repeated", "--no-pause"],
                 ["compare", "--sample", "repeated", "--no-plots"]):
        shown = runner.invoke(app, [*args, "--weights", "designed"]).output
        hidden = runner.invoke(app, [*args, "--weights", "designed", "--hide-rules"]).output
        # compare's heat-map grids come after its panel (render/grid.py takes the option separately)
        flat = " ".join(hidden.split("One head of size d")[0].split())
        assert any(n in " ".join(shown.split()) for n in names)
        found = [n for n in names if n in flat and n != "first token"]  # "the first token" is prose
        assert found == [], (args, found)


def test_pair_sentence_says_what_the_records_say_even_when_the_heads_gain_nothing():
    import numpy as np

    from mhacli.measures.compare import TrainedApart
    from mhacli.measures.lesson import TrainedPair
    from mhacli.measures.narrate import pair_sentence

    def pair(single: float, heads: float, by_relation=()) -> TrainedPair:
        apart = TrainedApart(task="t", single_accuracy=single, heads_accuracy=heads, single_parameters=10,
                             heads_parameters=12, single_relations=("x",), heads_relations=("x", "y"),
                             by_relation=by_relation)
        return TrainedPair(apart, tokens=("a", "b"), single_weights=np.eye(2), heads_weights=np.stack([np.eye(2)] * 2))

    said = pair_sentence(pair(0.9, 0.9))
    assert "10 and 12 parameters" in said and "gain nothing" in said and "gap" not in said
    said = pair_sentence(pair(0.5, 0.75, (("p", 0.4, 0.9), ("q", 0.6, 0.6))))
    assert "The gap is 25.0 points overall, widest on p (50.0 points)." in said
    assert "p 40.0% against 90.0%" in said and "2 heads together 75.0%" in said


def test_demo_step_2_says_how_the_grammar_model_reads_a_word_it_never_saw(runner):
    """The grammar model has one unknown token (no stand-in by a stable hash) and folds capitals; the little
    trained model does pick a stand-in by a hash; the toy embedding is a seeded random row per string."""
    said = {w: _flat(runner.invoke(app, ["demo", "The cat saw the mat", "--weights", w, "--no-pause",
                                         "--step", "2"]).output).split("Step 3 of")[0]
            for w in ("grammar", "trained", "random")}
    assert "stable hash" not in said["grammar"] and "one row of the unknown token" in said["grammar"]
    assert "'The' and 'the' share a row" in said["grammar"]
    assert "picked by a stable hash" in said["trained"] and "unknown token" not in said["trained"]
    assert "seeded by a hash of each token" in said["random"]


def _figure_texts(result, hide_rules: bool) -> dict[str, str]:
    """Every text each figure of a run draws, by figure: read from the matplotlib artists themselves."""
    from matplotlib.text import Text as MplText

    from mhacli.pipeline import shown
    from mhacli.render.figures import HeadFigure, drawing
    from mhacli.render.figures.heads import build_heads
    from mhacli.render.figures.magnifiers import build_magnifiers

    result = shown(result)  # the windows the figures draw, chosen by the pipeline as explain --out does
    trace = result.trace
    with drawing() as pen:
        per_head = HeadFigure(trace, result.figures, pen, hide_rules)
        figures = {f"head-{i + 1}": per_head.show(i) for i in range(trace.num_heads)}
        figures["heads"] = build_heads(trace, result.figures, pen, hide_rules)
        figures["magnifiers"] = build_magnifiers(trace, result.single, result.magnified, pen, hide_rules)
        return {name: " ".join(" ".join(t.get_text() for t in fig.findobj(MplText)).split())
                for name, fig in figures.items()}


def test_hidden_grammar_figures_name_no_relation_and_claim_no_relation_per_head():
    """--hide-rules on the grammar model: no figure names a relation (the class is to name them), and none says
    "each head learned a relation" (a head may have learned none); the answers' figures do name them."""
    from mhacli.grammar import grammar
    from mhacli.pipeline import prepare

    text = "the animal didn't cross the street because it was too tired"
    result = prepare(text, weights="grammar").run(single=True)  # as explain --out and demo --out draw it
    names = {*grammar.RELATION_NAMES, *grammar.RELATION_NAMES.values(), *grammar.SHORT_NAMES.values()}
    hidden, shown = _figure_texts(result, True), _figure_texts(result, False)
    for name, text in hidden.items():
        found = [n for n in names if re.search(rf"\b{re.escape(n)}\b", text)]
        assert found == [], (name, found)
        assert "each head learned a relation" not in text
    assert any(n in " ".join(shown.values()) for n in names)
    # The slides and the answers show the same queries, so the reveal is the picture the class named.
    seen = [re.findall(r"seen from (\d+) quer", t["magnifiers"]) for t in (hidden, shown)]
    assert seen[0] == seen[1] == ["2"], seen  # "cross" (subject and object) and "tired"
    assert re.findall(r"Query “[^”]+” \(position \d+\)", hidden["magnifiers"]) == \
        re.findall(r"Query “[^”]+” \(position \d+\)", shown["magnifiers"])


def test_step_14_reveals_what_the_heads_do_from_the_parse_and_hides_it_with_hide_rules(runner):
    """The reveal (step 14 without --hide-rules) shows more than positions: each parsed word's relation, its
    noun and every head's look; hidden, the same looks with no relation, no noun and no weight that gives the
    noun away."""
    from mhacli.grammar import grammar

    text = "the animal didn't cross the street because it was too tired"
    args = ["demo", text, "--weights", "grammar", "--no-pause", "--step", "14"]
    shown = _flat(runner.invoke(app, args).output).split("Step 15 of")[0]
    hidden = _flat(runner.invoke(app, [*args, "--hide-rules"]).output).split("Step 15 of")[0]
    assert all(f"{relation} →" in shown for relation in ("subject", "object", "describes"))
    assert "From the words of the parse" in shown and "From the words of the parse" in hidden
    table = hidden.split("From the words of the parse", 1)[1]
    assert not re.search(r"\d+%", table.split("Each cell")[0])  # no weight on the answer's noun
    assert [n for n in grammar.RELATION_NAMES if re.search(rf"\b{n}\b", hidden)] == []
    # One row per word of the parse (cross, tired), each its word and four heads' looks: cross's two relations
    # would repeat its row (a head may look at "cross" itself, so the word alone is no count of rows).
    cells = table.split("Each cell")[0].split("─")[-1].split()
    assert len(cells) == 2 * 5 and cells[0] == "cross" and cells[5] == "tired", cells

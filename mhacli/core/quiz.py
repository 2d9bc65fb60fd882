"""Homework: questions about one real run, with answers read from its trace.

Every answer comes from the :class:`~mhacli.core.trace.Trace` (its steps, parameter
count and attention weights), never from a table of expected results, and
every question names the command that shows the answer.  The choice of
questions is drawn from :class:`random.Random` seeded with the quiz seed, so
the same sample and seed always give the same quiz.  Pure logic: the terminal
rendering lives in :mod:`mhacli.render.quiz`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import numpy as np

from mhacli.core.analysis import Analysis, analyse
from mhacli.core.trace import Trace
from mhacli.core.tokenize import label


@dataclass(frozen=True)
class Question:
    """One question, its answer, and where in the tool a student can check it."""

    topic: str  # short tag: shape, parameters, attention, ...
    prompt: str
    answer: str
    check: str  # the command (or section of it) that shows the answer


def _where(trace: Trace, p: int) -> str:
    return f"'{label(trace.tokens[p], 16)}' (position {p})"


def _shape(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    step = rng.choice([s for s in trace.steps if s.key != "embed"])
    per = " for one head" if step.per_head else ""
    return Question(
        "shape",
        f"What shape does the step '{step.name}' ({step.formula}) produce{per}? "
        "Give it in symbols and in numbers.",
        f"{step.shape} = {step.shape_numeric}",
        "the 'Steps' table of the walkthrough")


def _madds(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    step = rng.choice([s for s in trace.steps if s.madds])
    return Question(
        "cost",
        f"How many multiply-adds does the step '{step.name}' ({step.formula}) cost, all heads together?",
        f"{step.madds:,}  ({step.madds_formula})",
        "the 'mult-adds' column of the 'Steps' table")


def _parameters(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    pc = trace.parameters
    d, h, dk = pc.d_model, pc.heads, pc.d_k
    kind = rng.choice(["one head", "all heads", "W_O", "total"])
    if kind == "one head":
        return Question(
            "parameters",
            f"How many numbers are in W_q^i, W_k^i and W_v^i together for ONE of the {h} heads?",
            f"{pc.per_head_qkv:,}  (3 · d · d/h = 3 · {d} · {dk})",
            "the 'Parameters' table")
    if kind == "all heads":
        return Question(
            "parameters",
            f"How many numbers are in the query, key and value projections of all {h} heads together, "
            "and how does that compare with ONE head of full width d?",
            f"{pc.multi_head_qkv:,}  (h · 3 · d · d/h = 3 · d · d): the same as one wide head",
            "the 'Parameters' table")
    if kind == "W_O":
        return Question(
            "parameters",
            "How many numbers does the output projection W^O hold?",
            f"{pc.w_o:,}  (d · d = {d} · {d})",
            "the 'Parameters' table")
    return Question(
        "parameters",
        "How many parameters does this multi-head attention layer have in all (W_q, W_k, W_v and W^O, "
        "no biases)?",
        f"{pc.total:,}  (4 · d · d = 4 · {d} · {d})",
        "the 'Parameters' table, row 'total with W^O'")


def _columns(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    i, dk = rng.randrange(trace.num_heads), trace.d_k
    return Question(
        "split",
        f"Q = X W_qᵀ has {trace.d_model} columns. Which of them (counting from 0) hold head {i + 1}'s "
        f"queries Q^{i + 1}?",
        f"columns {i * dk} to {(i + 1) * dk - 1}  (head i owns columns (i−1)·d/h … i·d/h − 1)",
        "the 'Split or direct?' section")


def _scale(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    dk = trace.d_k
    return Question(
        "scores",
        "The scores of each head are divided by a number before the softmax. Which number, for this run?",
        f"√(d/h) = √{dk} = {dk ** 0.5:.4g}",
        "the 'Scores' row of the 'Steps' table")


def _top_key(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    i, p = rng.randrange(trace.num_heads), rng.randrange(trace.n_tokens)
    row = np.asarray(trace.weights[i, p], dtype=np.float64)  # (N,)
    order = np.argsort(-row, kind="stable")  # keys from most to least attended
    k = int(order[0])
    rule = f" (its rule: {trace.rules[i]})" if trace.rules and trace.config.weights == "designed" else ""
    answer = f"{_where(trace, k)}, with weight {row[k]:.2f}"
    if len(order) > 1 and row[k] - row[order[1]] < 0.01:
        answer += f" (a near tie with {_where(trace, int(order[1]))}, {row[order[1]]:.2f})"
    return Question(
        "attention",
        f"In head {i + 1}{rule}, which token does {_where(trace, p)} attend to most?",
        answer,
        f"row {p} of head {i + 1}'s heat map (mha-output/head-{i + 1}.png from 'mha explain'), or "
        "--show-values for short texts")


def _sharpest(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    heads = sorted(a.heads, key=lambda s: s.mean_entropy)
    if len(heads) < 2 or heads[1].mean_entropy - heads[0].mean_entropy < 0.01:
        return None  # no clear winner: not a fair question
    best = heads[0]
    return Question(
        "attention",
        "Which head is the sharpest, that is, has the lowest mean entropy?",
        f"head {best.head + 1} ({best.mean_entropy:.2f} bits on average)",
        "the 'entropy' column of the heads table")


def _pattern(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    """Which relation a head's per-query top key follows: measured, whatever made the weights."""
    from mhacli.core.narrate import RANDOM, kind_of, pattern_phrase

    if a.counted_rows == 0:
        return None
    i = rng.randrange(trace.num_heads)
    s = a.heads[i]
    answer = pattern_phrase(s, a.tokens)
    if kind_of(a) == RANDOM:
        answer += " (random weights: an accident of the seed, not something the head learned)"
    return Question(
        "attention",
        f"For every query, find the key head {i + 1} weights most. Which relation do those keys follow on most "
        "rows: the previous token, the next token, two back, itself, the first token, an earlier copy of the same "
        "word, one fixed token, or none of these?",
        answer,
        f"the 'top key follows' column of the heads table, or head {i + 1}'s heat map row by row")


def _agreement(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    """On how many queries two heads weight the same key most."""
    if trace.num_heads < 2:
        return None
    first, second = sorted(rng.sample(range(trace.num_heads), 2))
    rows, total = int(a.agreement_rows[first, second]), a.counted_rows
    if total == 0:
        return None
    return Question(
        "attention",
        f"On how many of the {total} queries that can choose between keys do heads {first + 1} and {second + 1} "
        "weight the same key most?",
        f"{rows} of {total}" + (" (a query whose largest weight is shared by two keys picks none)"
                                if a.heads[first].tied_rows or a.heads[second].tied_rows else ""),
        f"heads {first + 1} and {second + 1}'s heat maps row by row, or 'agreement' in 'mha explain … --json'")


def _masked(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    n = trace.n_tokens
    blocked = n * (n - 1) // 2
    ran = "" if trace.config.causal else " if you ran it with --causal"
    return Question(
        "mask",
        f"How many query–key pairs per head does the causal mask block for these {n} tokens{ran}?",
        f"{blocked:,}  (N·(N−1)/2: every key after its query)",
        "the 'Causal mask' note of 'mha explain … --causal'")


def _row_sum(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    i, p = rng.randrange(trace.num_heads), rng.randrange(trace.n_tokens)
    total = float(np.asarray(trace.weights[i, p], dtype=np.float64).sum())
    return Question(
        "softmax",
        f"Add up head {i + 1}'s attention weights for {_where(trace, p)} over all keys. What do you get, "
        "and why?",
        f"{total:.6f}: the softmax makes every row a set of shares that sum to 1",
        "'mha explain … --json' (weights) or --show-values for short texts")


def _decoded(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    if trace.config.weights != "designed" or not trace.rules or trace.embeddings is None:
        return None  # only designed weights write a readable word into each head's block
    from mhacli.core.designed import decode_output

    i, p = rng.randrange(trace.num_heads), rng.randrange(trace.n_tokens)
    word = decode_output(np.asarray(trace.output), np.asarray(trace.embeddings), trace.tokens,
                         trace.num_heads)[p][i]
    dk = trace.d_k
    return Question(
        "output",
        f"With designed weights W^O is the identity, so columns {i * dk}–{(i + 1) * dk - 1} of the "
        f"output O hold what head {i + 1} ({trace.rules[i]}) found. Which word do they name for "
        f"{_where(trace, p)}?",
        f"'{label(word, 16)}'",
        "'mha demo --weights designed --step 13' (the word each head brought back)")


# Every generator reads the run's measures, computed once by make_quiz (a generator may be called dozens of times).
Generator = Callable[[Trace, random.Random, "Analysis"], "Question | None"]
GENERATORS: tuple[Generator, ...] = (
    _shape, _parameters, _top_key, _madds, _columns, _scale, _sharpest, _masked, _row_sum, _decoded, _pattern,
    _agreement,
)
# Generators that can ask a different question when called again.
REPEATABLE = (_shape, _parameters, _top_key, _madds, _columns, _row_sum, _decoded, _pattern, _agreement)
MAX_QUESTIONS = 20
#: Each kind of question by name ("shape", "parameters", "top_key", …), for :func:`ask`.
KINDS: dict[str, Generator] = {g.__name__.lstrip("_"): g for g in GENERATORS}


def ask(kind: str, trace: Trace, rng: random.Random, analysis: Analysis) -> Question | None:
    """One question of one kind about ``trace``, as :func:`make_quiz` asks it (None: the run has no such question)."""
    return KINDS[kind](trace, rng, analysis)


def make_quiz(trace: Trace, seed: int, count: int = 5, analysis: Analysis | None = None) -> list[Question]:
    """``count`` different questions about ``trace``; the first three kinds are a shape, a
    parameter count and a head's favourite key, the rest are drawn by ``seed``.
    ``analysis``: the run's measures when the caller has them (the pipeline's result)."""
    rng = random.Random(f"mhacli-quiz:{seed}")  # str seeds hash with SHA-512: stable everywhere
    measures = analysis if analysis is not None else analyse(trace)
    rest = list(GENERATORS[3:])
    rng.shuffle(rest)
    plan = list(GENERATORS[:3]) + rest
    questions: list[Question] = []
    seen: set[str] = set()
    attempts = 0
    while len(questions) < count and attempts < 50 * max(count, 1):
        make = plan[attempts] if attempts < len(plan) else rng.choice(REPEATABLE)
        attempts += 1
        q = make(trace, rng, measures)
        if q is not None and q.prompt not in seen:
            seen.add(q.prompt)
            questions.append(q)
    rng.shuffle(questions)
    return questions

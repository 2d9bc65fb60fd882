"""Homework: questions about one real run, with answers read from its trace.

Every answer comes from the :class:`~mhacli.attention.trace.Trace`, never a table of expected results, and every
question names the command that shows the answer. Questions are drawn by a :class:`random.Random` seeded with the
quiz seed, so a sample and seed always give the same quiz. The terminal rendering is :mod:`mhacli.render.quiz`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mhacli.measures.analysis import Analysis, analyse
from mhacli.attention.trace import Trace
from mhacli.attention.tokenize import label


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
    from mhacli.measures.narrate import RANDOM, kind_of, pattern_phrase

    if a.counted_rows == 0:
        return None
    i = rng.randrange(trace.num_heads)
    s = a.heads[i]
    answer = pattern_phrase(s, a.tokens)
    if kind_of(a) == RANDOM:
        answer += " (random weights: an accident of the seed, not something the head learned)"
    return Question(
        "attention",
        f"For every query, find the key head {i + 1} weights most. Which relation do those keys follow on the most "
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
        "pick the same key, each giving it its largest weight, clear of chance (at least a quarter of the way "
        "from a uniform row to all on that key)?",
        f"{rows} of {total}" + (" (a query whose largest weight is shared by two keys, or too close to uniform, "
                                "picks none)" if any(a.heads[i].picked_rows < total for i in (first, second)) else ""),
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
    from mhacli.attention.designed import decode_output

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


# --- questions that need understanding, not lookup: each answered from this run's own numbers ----------------


def _why_same_count(trace: Trace, rng: random.Random, a: Analysis) -> Question:
    """Why splitting d into h heads keeps the parameter count."""
    pc = trace.parameters
    d, h, dk = pc.d_model, pc.heads, pc.d_k
    return Question(
        "why",
        f"This run has h = {h} heads, each with its own W_q^i of {d} × {dk}. Why do the {h} heads' query "
        f"matrices together hold exactly as many numbers as ONE head's W_q of {d} × {d}? And how many would "
        f"they hold if every head had its own full {d} × {d} matrix?",
        f"h · d · d/h = {h} · {d} · {dk} = {h * d * dk:,}, the same as d · d = {d} · {d} = {d * d:,}: the heads "
        "cut the same d output "
        f"columns into h blocks of d/h, they add none. With a full d × d matrix each it would be "
        f"h · d · d = {h * d * d:,} for W_q alone, {h}× as many (and the same again for W_k and W_v).",
        "the 'Parameters' table, and 'mha shapes --heads 1' against 'mha shapes --heads "
        f"{h}'")


def _one_row(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    """Why one head cannot follow two relations at once: its row of weights sums to 1."""
    h = trace.num_heads
    w = np.asarray(trace.weights, dtype=np.float64)  # (h, N, N)
    pairs = [(p, i, j) for p in range(trace.n_tokens) if a.counted[p] for i in range(h) for j in range(i + 1, h)
             if a.top_keys[i, p] >= 0 and a.top_keys[j, p] >= 0 and a.top_keys[i, p] != a.top_keys[j, p]]
    if not pairs:
        return None
    p, i, j = rng.choice(pairs)
    ki, kj = int(a.top_keys[i, p]), int(a.top_keys[j, p])
    # The question is about the weights as shown (3 decimals), so the sum a student checks is theirs.
    wi, wj = round(float(w[i, p, ki]), 3), round(float(w[j, p, kj]), 3)
    total = round(wi + wj, 3)
    if total > 1:
        verdict = (f"No: {wi:.3f} + {wj:.3f} = {total:.3f}, more than 1. A softmax row sums to 1, so one head "
                   "would have to give up weight on one token to put more on the other.")
    else:
        verdict = (f"Only just: {wi:.3f} + {wj:.3f} = {total:.3f} fits in one row that sums to 1, and leaves "
                   f"{1 - total:.3f} for every other token.")
    return Question(
        "why",
        f"From {_where(trace, p)}, head {i + 1} puts {wi:.3f} of its row on {_where(trace, ki)} and head {j + 1} "
        f"puts {wj:.3f} of its row on {_where(trace, kj)}. Could ONE head give both tokens at least those weights "
        "from that query? Why, or why not?",
        verdict + f" {h} heads have {h} rows per query, so each can spend its whole row on its own token.",
        f"row {p} of heads {i + 1} and {j + 1} in 'mha explain … --query {p}', or 'weights' in --json")


def _average_hides(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    """What the average over heads (PyTorch's default) hides."""
    h = trace.num_heads
    if h < 2:
        return None
    w = np.asarray(trace.weights, dtype=np.float64)  # (h, N, N)
    mean = w.mean(axis=0)  # (N, N): what nn.MultiheadAttention returns unless average_attn_weights=False
    rows = [(p, i) for p in range(trace.n_tokens) if a.counted[p] for i in range(h) if a.top_keys[i, p] >= 0]
    if not rows:
        return None
    p, i = max(rows, key=lambda r: w[r[1], r[0], a.top_keys[r[1], r[0]]] - mean[r[0], a.top_keys[r[1], r[0]]])
    k = int(a.top_keys[i, p])
    shown = [f"{w[j, p, k]:.3f}" for j in range(h)]  # each head's weight on k, as a student reads it
    their = ", ".join(shown[j] for j in range(h) if j != i)
    return Question(
        "why",
        f"PyTorch returns the average of the {h} heads' weights unless average_attn_weights=False. From "
        f"{_where(trace, p)}, head {i + 1} puts {shown[i]} on {_where(trace, k)}. What weight does the "
        "average give that token, and what does the average hide?",
        f"{mean[p, k]:.3f}: the other heads give it {their}, and the average is ({' + '.join(shown)}) / {h}. "
        f"It blurs what each head does: a token one head looks at with {shown[i]} shows at {mean[p, k]:.3f}, "
        "mixed with the other heads' choices.",
        f"the 'Average' panel of heads.png beside head {i + 1}, or 'mha explain … --json' (weights)")


def _shared_keys(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    """With g < h key/value groups: how many K^j the layer builds, and which query heads read one of them."""
    h, g = trace.num_heads, trace.kv_heads
    if g >= h:
        return None
    j = rng.randrange(g)
    readers = [i + 1 for i, group in enumerate(trace.head_groups) if group == j]
    return Question(
        "sharing",
        f"This layer has h = {h} query heads and g = {g} key/value groups. How many key matrices K^j does it "
        f"build, and which query heads read K^{j + 1}?",
        f"{g} (one per group, each N × d/h = {trace.n_tokens} × {trace.d_k}); K^{j + 1} is read by heads "
        f"{', '.join(map(str, readers))}: head i reads group ⌊(i−1)/(h/g)⌋ + 1 = ⌊(i−1)/{h // g}⌋ + 1",
        "the 'Keys' row of the 'Steps' table (×g) and the note under it")


def _cache(trace: Trace, rng: random.Random, a: Analysis) -> Question | None:
    """With g < h key/value groups: the numbers per token a KV cache of this layer keeps, beside g = h."""
    h, g, dk, n = trace.num_heads, trace.kv_heads, trace.d_k, trace.n_tokens
    if g >= h:
        return None
    per_token = 2 * g * dk  # K and V: g rows of d/h each
    return Question(
        "cache",
        f"A model generating text keeps every token's keys and values (its KV cache). How many numbers per "
        f"token does this layer's cache hold, how many for this run's {n} tokens, and how many would it hold "
        f"if each of the {h} heads had its own keys and values?",
        f"2 · g · d/h = 2 · {g} · {dk} = {per_token:,} per token, {per_token * n:,} for {n} tokens; with "
        f"g = h = {h}: 2 · {h} · {dk} = {2 * h * dk:,} per token, {h // g}× as many",
        f"'mha shapes --tokens {n} --d-model {trace.d_model} --heads {h} --kv-heads {g}', the 'KV cache' rows")


# Every generator reads the run's measures, computed once by make_quiz (a generator may be called dozens of times).
Generator = Callable[[Trace, random.Random, "Analysis"], "Question | None"]
GENERATORS: tuple[Generator, ...] = (
    _shape, _parameters, _top_key, _madds, _columns, _scale, _sharpest, _masked, _row_sum, _decoded, _pattern,
    _agreement, _why_same_count, _one_row, _average_hides,
)
# Questions that need understanding: every quiz asks at least one, drawn by the seed.
UNDERSTANDING = (_why_same_count, _one_row, _average_hides)
# Generators that can ask a different question when called again.
REPEATABLE = (_shape, _parameters, _top_key, _madds, _columns, _row_sum, _decoded, _pattern, _agreement, _one_row)
MAX_QUESTIONS = 20
#: Each kind of question by name ("shape", "parameters", "top_key", …), for :func:`ask`.
# With g < h the layer is no longer the article's: these two come first, and the questions that count its 4d²
# parameters or why splitting keeps them (true only when every head has its own keys and values) are left out.
SHARED = (_shared_keys, _cache)
SHARED_SAFE = tuple(g for g in GENERATORS[3:] if g is not _why_same_count)
KINDS: dict[str, Generator] = {g.__name__.lstrip("_"): g for g in (*GENERATORS, *SHARED)}


def quiz_title(trace: Trace, count: int, about: str, seed: int | None = None) -> str:
    """The quiz's header: what it asks about (the text as read, not as a shell would quote it) and the run;
    ``seed``, the one that picked the questions, is said apart where a trained model's own seed made the weights."""
    c = trace.config
    seeds = f"seed {c.seed}" if seed is None or seed == c.seed else f"trained with seed {c.seed}, questions seed {seed}"
    return (f"{count} questions about {about}: N = {trace.n_tokens} tokens, d = {c.d_model}, h = {c.heads}, "
            f"{'causal' if c.causal else 'bidirectional'}, {c.weights} weights, {seeds}")


def ask(kind: str, trace: Trace, rng: random.Random, analysis: Analysis) -> Question | None:
    """One question of one kind about ``trace``, as :func:`make_quiz` asks it (None: the run has no such question)."""
    return KINDS[kind](trace, rng, analysis)


def _drawn(trace: Trace, rng: random.Random, measures: Analysis, count: int, plan: list[Generator],
           repeatable: Sequence[Generator]) -> list[Question]:
    """Up to ``count`` different questions: the plan's generators in order, then repeatable ones drawn by ``rng``."""
    questions: list[Question] = []
    seen: set[str] = set()
    for attempt in range(50 * max(count, 1)):
        if len(questions) >= count:
            break
        q = (plan[attempt] if attempt < len(plan) else rng.choice(repeatable))(trace, rng, measures)
        if q is not None and q.prompt not in seen:
            seen.add(q.prompt)
            questions.append(q)
    return questions


def make_quiz(trace: Trace, seed: int, count: int = 5, analysis: Analysis | None = None) -> list[Question]:
    """``count`` different questions about ``trace``: a shape, a parameter count, a head's favourite key, one question
    that needs understanding, the rest drawn by ``seed``. ``analysis``: the run's measures when the caller has them.
    A layer whose h query heads share g < h key/value groups gets its two questions on g first."""
    rng = random.Random(f"mhacli-quiz:{seed}")  # str seeds hash with SHA-512: stable everywhere
    measures = analysis if analysis is not None else analyse(trace)
    if trace.kv_heads < trace.num_heads:
        rest = list(SHARED_SAFE)
        rng.shuffle(rest)
        plan = [*SHARED, _shape, _top_key, *rest]
        return _drawn(trace, rng, measures, count, plan, [g for g in REPEATABLE if g in plan])
    understanding = list(UNDERSTANDING)
    rng.shuffle(understanding)
    # The first of them this run can answer comes right after the three fixed kinds (a one-head run has
    # no second head to compare, so only the parameter count's question applies there).
    why = next((g for g in understanding if g(trace, random.Random(0), measures) is not None), None)
    rest = [g for g in GENERATORS[3:] if g is not why]
    rng.shuffle(rest)
    plan = list(GENERATORS[:3]) + ([why] if why is not None else []) + rest
    questions = _drawn(trace, rng, measures, count, plan, REPEATABLE)
    rng.shuffle(questions)
    return questions

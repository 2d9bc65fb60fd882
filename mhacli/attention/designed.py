"""Weights built by hand, so that every head follows a rule a student can name (``--weights designed``).

X has labelled parts: position as a fast and a slow wave, a constant bias column and a unit vector naming the
token. A step along the sequence is a rotation of the waves, so a head can "look for position p − 1"; scales are
set from the worst case so the rule's key wins by ``MARGIN`` score units up to length ``L``. Values copy the
token code and W^O is the identity. The math is in docs/designed-heads.md. Pure numpy, never prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mhacli.attention.config import Config
from mhacli.attention.errors import UsageError

Array = np.ndarray

MARGIN = 10.0  # least score gap, after 1/√(d/h), between the rule's key and any other key
MIN_HEAD_WIDTH = 4  # q/k numbers per head the construction needs (two waves, or a 3-d code + 1)
POS_DIMS = 4  # sin, cos of the fast wave; sin, cos of the slow wave
CODE_DIMS = 3  # token code: a unit vector in 3-d
MIN_D_MODEL = POS_DIMS + 1 + CODE_DIMS  # positions + bias + token code
MIN_CLASS = 64  # shortest length class L
MAX_TOKENS = 1024  # longest text the position code is built for

# Columns of X (and of E and P) — fixed so the docs and tests can name them.
COL_SIN_FAST, COL_COS_FAST, COL_SIN_SLOW, COL_COS_SLOW = 0, 1, 2, 3
COL_BIAS = 4
COL_CODE = slice(5, 8)


# --------------------------------------------------------------------------
# The rules, in the order heads take them (docs/designed-heads.md says what each looks at)
# --------------------------------------------------------------------------

RULE_ORDER: tuple[str, ...] = ("previous token", "first copy of word", "first token", "itself",
                               "next token")


def rules_for(heads: int) -> tuple[str, ...]:
    """The rule of each head, in head order: the first h of RULE_ORDER, repeating past five."""
    return tuple(RULE_ORDER[i % len(RULE_ORDER)] for i in range(heads))


def rules_note(heads: int) -> str:
    """One sentence saying which rules ``heads`` heads get, for the lesson and the docs."""
    n = len(RULE_ORDER)
    if heads == 1:
        return f"With 1 head the tool uses only the first of its {n} rules ({RULE_ORDER[0]})."
    if heads < n:
        return f"With {heads} heads the tool uses the first {heads} of its {n} rules ({', '.join(RULE_ORDER[:heads])})."
    if heads == n:
        return f"With {n} heads every one of the {n} rules is used once."
    return (f"With {heads} heads the {n} rules are used in order and then repeat: head {n + 1} follows "
            f"the rule of head 1 again.")


# --------------------------------------------------------------------------
# The codes: positions as two waves, tokens as points on a sphere
# --------------------------------------------------------------------------


def length_class(n_tokens: int) -> int:
    """L: the text length rounded up to a power of two, at least 64 (the position code's design length)."""
    return max(MIN_CLASS, 1 << max(n_tokens - 1, 0).bit_length())


@dataclass(frozen=True)
class Waves:
    """The two angular speeds of the position code for length class L."""

    length: int  # L
    fast: float  # radians per step, 3/√L: sharp near the diagonal
    slow: float  # radians per step, 2π/(3L): never wraps within L, so far positions stay apart

    @classmethod
    def for_class(cls, length: int) -> "Waves":
        return cls(length, 3.0 / math.sqrt(length), 2.0 * math.pi / (3.0 * length))


def position_code(n_tokens: int, waves: Waves) -> Array:
    """pos(p) = [sin ω_f p, cos ω_f p, sin ω_s p, cos ω_s p] for p = 0 … N−1."""
    p = np.arange(n_tokens, dtype=np.float64)[:, None]  # (N, 1)
    angles = p * np.array([waves.fast, waves.slow])  # (N, 2)
    out = np.empty((n_tokens, POS_DIMS))  # (N, 4)
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)
    return out


def shift(steps: int, waves: Waves) -> Array:
    """The 4×4 matrix taking pos(p) to pos(p + steps): one rotation per wave."""
    r = np.zeros((POS_DIMS, POS_DIMS))  # (4, 4)
    for j, w in enumerate((waves.fast, waves.slow)):
        c, s = math.cos(w * steps), math.sin(w * steps)
        # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b − sin a sin b
        r[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[c, s], [-s, c]]
    return r


def bump(offsets: Array, waves: Waves) -> Array:
    """g(m) = cos ω_f m + cos ω_s m = pos(p)·pos(p − m): how alike two positions m apart look."""
    return np.cos(waves.fast * offsets) + np.cos(waves.slow * offsets)


def position_margin(waves: Waves) -> float:
    """Smallest gap the position heads must overcome, over every offset a text of length L can have:
    ``g(0) − g(m)`` for 1 ≤ m ≤ L+1 and ``g(1) − g(m)`` for 2 ≤ m ≤ L+2 (the fall-backs at the text's edges).
    """
    m = np.arange(waves.length + 3)
    g = bump(m, waves)
    return float(min(g[0] - g[1 : waves.length + 2].max(), g[1] - g[2 : waves.length + 3].max()))


def falling_weights(waves: Waves) -> tuple[Array, float, float]:
    """A key feature f(k) = sin(ω_s (L/2 − k)) that falls at every step over 0 … L−1.

    Returns the 4 coefficients that read f(k) off pos(k), the smallest drop
    f(k) − f(k+1), and the range max f − min f.
    """
    half = waves.slow * waves.length / 2
    # sin(ω_s L/2 − ω_s k) = sin(ω_s L/2) cos(ω_s k) − cos(ω_s L/2) sin(ω_s k)
    coef = np.zeros(POS_DIMS)
    coef[COL_SIN_SLOW], coef[COL_COS_SLOW] = -math.cos(half), math.sin(half)
    f = position_code(waves.length, waves) @ coef  # (L,)
    return coef, float(np.min(f[:-1] - f[1:])), float(f.max() - f.min())


def token_codes(count: int) -> Array:
    """``count`` unit vectors in 3-d spread evenly over the sphere (a Fibonacci lattice)."""
    if count == 1:
        return np.array([[0.0, 0.0, 1.0]])
    i = np.arange(count, dtype=np.float64)
    z = 1.0 - 2.0 * (i + 0.5) / count  # evenly spaced heights
    r = np.sqrt(1.0 - z * z)
    phi = i * math.pi * (3.0 - math.sqrt(5.0))  # the golden angle: no two points line up
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)  # (V, 3)


def code_gap(codes: Array) -> float:
    """1 − the largest cosine between two different token codes (1 when there is one token)."""
    if len(codes) < 2:
        return 1.0
    cos = codes @ codes.T  # (V, V)
    np.fill_diagonal(cos, -np.inf)
    return float(1.0 - cos.max())


# --------------------------------------------------------------------------
# The construction
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Designed:
    """What the core needs (E, P and four PyTorch-layout weights) plus how they were made."""

    embeddings: Array  # (N, d): bias 1 and token code u(t); zero elsewhere
    positions: Array  # (N, d): pos(p) in columns 0-3; zero elsewhere
    w_q: Array  # (d, d) PyTorch layout: q = x @ w_q.T, head i = rows i·d/h … (i+1)·d/h − 1
    w_k: Array  # (d, d)
    w_v: Array  # (d, d)
    w_o: Array  # (d, d), the identity
    rules: tuple[str, ...]  # one per head
    waves: Waves
    position_scale: float  # c² in q·k = c² g(·) for the position heads
    word_scale: float  # (c M)² on u·u' in the word head
    order_scale: float  # c_s on f(k) in the word head
    codes: Array  # (V, 3) token code per vocabulary id


def check_designable(n_tokens: int, config: Config) -> None:
    """Refuse, with the fix, what the construction cannot build."""
    d, h = config.d_model, config.heads
    if not config.positions:
        raise UsageError("{weights} needs positions (its heads find the previous, first and "
                         "next token by position); turn them on ({positions}).", weights="designed",
                         positions=True)
    if config.d_k < MIN_HEAD_WIDTH:
        fits = [k for k in range(1, h + 1) if d % k == 0 and d // k >= MIN_HEAD_WIDTH]
        raise UsageError(
            f"{{weights}} needs at least {MIN_HEAD_WIDTH} numbers per head (d/h ≥ "
            f"{MIN_HEAD_WIDTH}), but {{d_model}} with {{heads}} gives d/h = {config.d_k}; use "
            + (f"{{heads:name}} {', '.join(map(str, fits))} or " if fits else "")
            + f"{{d_model:name}} {MIN_HEAD_WIDTH * h} or more.", weights="designed", d_model=d, heads=h)
    if d < MIN_D_MODEL:
        raise UsageError(
            f"{{weights}} needs {{d_model:name}} {MIN_D_MODEL} or more ({POS_DIMS} position, "
            f"1 bias and {CODE_DIMS} token-code columns), got {d}.", weights="designed", d_model=d)
    if n_tokens > MAX_TOKENS:
        raise UsageError(
            f"{{weights}} builds its position code for at most {MAX_TOKENS} tokens; this text "
            f"has {n_tokens}: use a shorter text or the word tokenizer.", weights="designed")


def design(tokens: Sequence[str], config: Config) -> Designed:
    """E, P, W_q, W_k, W_v, W_o for ``tokens`` so that head i follows ``rules_for(h)[i]``."""
    n, d, h, dk = len(tokens), config.d_model, config.heads, config.d_k
    check_designable(n, config)
    waves = Waves.for_class(length_class(n))
    vocab: dict[str, int] = {}
    ids = np.array([vocab.setdefault(t, len(vocab)) for t in tokens])  # (N,)
    codes = token_codes(len(vocab))  # (V, 3)

    e = np.zeros((n, d))  # (N, d)
    e[:, COL_BIAS] = 1.0
    e[:, COL_CODE] = codes[ids]  # (V, 3) -> (N, 3)
    p = np.zeros((n, d))  # (N, d)
    p[:, :POS_DIMS] = position_code(n, waves)  # (N, 4)

    root_dk = math.sqrt(dk)
    # Position heads: q·k = c² g(offset); the worst gap is position_margin, so
    # c² · margin / √(d/h) = MARGIN.
    position_scale = MARGIN * root_dk / position_margin(waves)
    # Word head: same word must beat the best other word even when the position
    # term favours the other word by its whole range; among copies of one word
    # the position term picks the earliest by at least MARGIN.
    falling, drop, spread = falling_weights(waves)
    order_scale = MARGIN * root_dk / drop
    word_scale = (MARGIN * root_dk + order_scale * spread) / code_gap(codes)

    pos_cols = slice(0, POS_DIMS)
    w_q, w_k, w_v = np.zeros((d, d)), np.zeros((d, d)), np.zeros((d, d))  # (d, d) each
    rules = rules_for(h)
    c = math.sqrt(position_scale)  # split evenly so Q and K have the same size
    for i, rule in enumerate(rules):
        rows = slice(i * dk, i * dk + POS_DIMS)  # the four q/k numbers this head uses
        if rule == "first copy of word":
            code_rows = slice(i * dk, i * dk + CODE_DIMS)
            w_q[code_rows, COL_CODE] = math.sqrt(word_scale) * np.eye(CODE_DIMS)
            w_k[code_rows, COL_CODE] = math.sqrt(word_scale) * np.eye(CODE_DIMS)
            w_q[i * dk + CODE_DIMS, COL_BIAS] = math.sqrt(order_scale)
            w_k[i * dk + CODE_DIMS, pos_cols] = math.sqrt(order_scale) * falling
        else:
            w_k[rows, pos_cols] = c * np.eye(POS_DIMS)
            if rule == "first token":
                # A constant query, made from the bias column: pos(0) = [0, 1, 0, 1].
                w_q[rows, COL_BIAS] = c * position_code(1, waves)[0]
            else:
                steps = {"previous token": -1, "itself": 0, "next token": 1}[rule]
                w_q[rows, pos_cols] = c * shift(steps, waves)
        # Every head's value carries the attended token's code, so its block of
        # the output names the word it found.
        w_v[i * dk : i * dk + CODE_DIMS, COL_CODE] = np.eye(CODE_DIMS)
    w_o = np.eye(d)  # (d, d): O = H, each head's finding stays in its own block

    return Designed(embeddings=e, positions=p, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, rules=rules,
                    waves=waves, position_scale=position_scale, word_scale=word_scale,
                    order_scale=order_scale, codes=codes)


def decode_output(output: Array, embeddings: Array, tokens: Sequence[str], heads: int) -> list[list[str]]:
    """Read each head's block of O back as a word: the token whose code the block is closest to.

    Works because W_v copies the token code and W^O is the identity; ``output``
    and ``embeddings`` are (N, d) from a designed run.
    """
    dk = output.shape[1] // heads
    codes = np.asarray(embeddings)[:, COL_CODE]  # (N, 3)
    found = []
    for row in np.asarray(output):
        blocks = [row[i * dk : i * dk + CODE_DIMS] for i in range(heads)]  # h × (3,)
        found.append([tokens[int(np.argmax(codes @ b))] for b in blocks])
    return found

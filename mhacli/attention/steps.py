"""The steps of multi-head attention as data: formula, shapes, cost.

Pure Python, a function of (N, d, h) alone, so ``mha shapes`` can print the
table for a slide with no text and no numpy. Every renderer (terminal, JSON,
HTML, demo) reads the same list, so they can never disagree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One step of the computation, as the article writes it."""

    key: str  # stable identifier, also used in docs and JSON
    name: str  # short human name
    formula: str  # in the article's notation
    shape: str  # symbolic shape of the result, e.g. "N×d/h"
    dims: tuple[int, ...]  # numeric shape of the result (per head where marked)
    per_head: bool  # True when the step is done once per head (h times)
    madds: int  # multiply-adds over all heads
    madds_formula: str  # how madds was counted, symbolically
    field: str  # the Trace / npz field that holds the result
    groups: int | None = None  # done once per key/value group (g < h) instead of once per head
    # Numeric shape, e.g. ``6×4``: made once with the step, so every table reads it rather than asks for it.
    shape_numeric: str = dataclasses.field(init=False)  # (`field` above names a step's Trace field)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape_numeric", "×".join(str(n) for n in self.dims))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        out = asdict(self)
        out["dims"] = list(self.dims)
        if self.groups is None:  # the article's steps say what they always said
            del out["groups"]
        return out


@dataclass(frozen=True)
class ParameterCount:
    """The article's claim: h heads of width d/h cost what one head of width d costs."""

    d_model: int
    heads: int
    kv_heads: int | None = None  # g key/value heads shared by the h query heads; None: g = h

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def groups(self) -> int:
        """Key/value heads g (h in the article)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def grouped(self) -> bool:
        return self.groups != self.heads

    @property
    def mha_total(self) -> int:
        """The article's layer, W_q, W_k, W_v and W^O each d×d: 4d²."""
        return 4 * self.d_model * self.d_model

    @property
    def single_head_qkv(self) -> int:
        """One head: W_q, W_k, W_v, each d×d."""
        return 3 * self.d_model * self.d_model

    @property
    def per_head_qkv(self) -> int:
        """One of h heads: W_q^i, W_k^i, W_v^i, each d×d/h."""
        return 3 * self.d_model * self.d_k

    @property
    def multi_head_qkv(self) -> int:
        """All h heads together: h·d·d/h for the queries, 2·g·d·d/h for the keys and values of g groups."""
        return (self.heads + 2 * self.groups) * self.d_model * self.d_k

    @property
    def w_o(self) -> int:
        """The output projection W^O, d×d."""
        return self.d_model * self.d_model

    @property
    def total(self) -> int:
        return self.multi_head_qkv + self.w_o

    @property
    def equal(self) -> bool:
        return self.single_head_qkv == self.multi_head_qkv

    def arithmetic(self) -> tuple[str, str]:
        """The two sides of the equality, written out with numbers."""
        d, h, dk = self.d_model, self.heads, self.d_k
        single = f"3 · d · d = 3 · {d} · {d} = {self.single_head_qkv:,}"
        multi = f"h · 3 · d · d/h = {h} · 3 · {d} · {dk} = {self.multi_head_qkv:,}"
        if self.grouped:
            multi = (f"(h + 2g) · d · d/h = ({h} + 2·{self.groups}) · {d} · {dk} = {self.multi_head_qkv:,}")
        return single, multi

    def to_dict(self) -> dict[str, Any]:
        single, multi = self.arithmetic()
        grouped = {"kv_heads": self.groups, "mha_total": self.mha_total} if self.grouped else {}
        return {
            **grouped,
            "single_head_qkv": self.single_head_qkv,
            "per_head_qkv": self.per_head_qkv,
            "multi_head_qkv": self.multi_head_qkv,
            "w_o": self.w_o,
            "total": self.total,
            "equal": self.equal,
            "single_head_arithmetic": single,
            "multi_head_arithmetic": multi,
        }


def steps_for(n_tokens: int, d_model: int, heads: int, causal: bool = False, *,
              positions: bool = True, biases: bool = False, word_values: bool = False,
              kv_heads: int | None = None, rotary: bool = False) -> list[Step]:
    """The step table for N tokens, width d and h heads (masking only when causal).

    Flags change the formulas: ``positions=False`` drops P; ``biases`` adds each projection's bias; ``word_values``
    makes V from E alone; ``kv_heads`` g < h makes K^j, V^j once per group; ``rotary`` turns Q and K by position.
    """
    n, d, h = n_tokens, d_model, heads
    dk = d // h
    g = h if kv_heads is None else kv_heads
    kv = "j" if g < h else "i"  # the index of the keys and values a query head reads
    groups = g if g < h else None
    kv_madds = "g · N · d · d/h" if g < h else "h · N · d · d/h = N·d²"

    def plus(b: str) -> str:
        return f" + {b}" if biases else ""

    steps = [
        Step("embed", "Embed", "X = E[tokens] + P" if positions and not rotary else "X = E[tokens]", "N×d", (n, d),
             False, 0, "0 (a look-up and an addition)" if positions and not rotary else "0 (a look-up)", "X"),
        Step("query", "Queries", "Q^i = X W_q^i" + plus("b_q^i"), "N×d/h", (n, dk), True, n * d * d,
             "h · N · d · d/h = N·d²", "Q"),
        Step("key", "Keys", f"K^{kv} = X W_k^{kv}" + plus(f"b_k^{kv}"), "N×d/h", (n, dk), True, n * d * g * dk,
             kv_madds, "K", groups),
        Step("value", "Values", (f"V^{kv} = E W_v^{kv}" if word_values else f"V^{kv} = X W_v^{kv}")
             + plus(f"b_v^{kv}"), "N×d/h", (n, dk), True, n * d * g * dk, kv_madds, "V", groups),
    ]
    if rotary:  # positions turn Q and K; V never sees them
        steps.append(Step("rotary", "Rotary positions",
                          f"Q^i, K^{kv} ← R_p Q^i, R_p K^{kv} (row p turned by p·θ^(−2m/d_h))", "N×d/h",
                          (n, dk), True, 2 * n * (d + g * dk), "2 · N · (h + g) · d/h", "Q"))
    steps.append(Step("scores", "Scores", f"S^i = Q^i K^{kv}ᵀ / √(d/h)", "N×N", (n, n), True, h * n * n * dk,
                      "h · N · N · d/h = N²·d", "scores"))
    if causal:
        steps.append(Step("mask", "Causal mask", "S^i[q, k] = −∞ where k > q", "N×N", (n, n), True, 0,
                          "0 (a comparison)", "scores"))
    steps += [
        Step("softmax", "Softmax", "A^i = softmax(S^i) per row", "N×N", (n, n), True, 0,
             "0 (h·N² exponentials)", "weights"),
        Step("weighted", "Weighted values", f"head_i = A^i V^{kv}", "N×d/h", (n, dk), True, h * n * n * dk,
             "h · N · N · d/h = N²·d", "heads"),
        Step("concat", "Concatenate", "H = [head_1 … head_h]", "N×d", (n, d), False, 0,
             "0 (heads side by side)", "concat"),
        Step("output", "Output W^O", "O = H W^Oᵀ" + plus("b_o"), "N×d", (n, d), False, n * d * d,
             "N · d · d", "output"),
    ]
    return steps


def readers(heads: int, kv_heads: int) -> list[tuple[int, int, int]]:
    """For each key/value group j (1-based), the first and last query head (1-based) that read K^j and V^j."""
    per = heads // kv_heads
    return [(j + 1, j * per + 1, (j + 1) * per) for j in range(kv_heads)]


def groups_sentence(n_tokens: int, d_model: int, heads: int, kv_heads: int | None) -> str | None:
    """Which query heads read which keys and values, and what sharing saves (None: each head its own)."""
    n, d, h, g = n_tokens, d_model, heads, heads if kv_heads is None else kv_heads
    if g == h:
        return None
    said = [f"K^{j}, V^{j} by head{'s' if a != b else ''} {a}{f'–{b}' if a != b else ''}" for j, a, b in readers(h, g)]
    shown = said if len(said) <= 4 else said[:3] + ["…", said[-1]]
    mark = f"(×{g}) " if g > 1 else ""
    return (f"{mark}keys and values are made once per key/value group and shared: query head i reads group "
            f"j = ⌊i/(h/g)⌋ = ⌊i/{h // g}⌋; {'; '.join(shown)}. Making K and V takes 2 · g · N · d · d/h = "
            f"{2 * g * n * d * (d // h):,} multiply-adds instead of 2 · N · d² = {2 * n * d * d:,}; the scores and "
            f"the weighted values stay h · N² · d/h = {h * n * n * (d // h):,} each: every query head still "
            "scores every key.")


def total_madds(steps: list[Step]) -> int:
    """Sum of multiply-adds over the whole table."""
    return sum(s.madds for s in steps)


@dataclass(frozen=True)
class SplitCost:
    """What splitting d into h heads changes in the work, against one head of width d (same N, d, mask)."""

    n_tokens: int
    d_model: int
    heads: int
    madds: int  # all steps, h heads
    madds_one_head: int  # all steps, one head of width d
    weights: int  # attention weights kept: h · N · N
    weights_one_head: int  # N · N


def split_cost(n_tokens: int, d_model: int, heads: int, causal: bool = False,
               kv_heads: int | None = None, rotary: bool = False) -> SplitCost:
    """The multiply-adds and kept weights of h heads beside one head of width d, counted by the same table."""
    return SplitCost(n_tokens, d_model, heads,
                     total_madds(steps_for(n_tokens, d_model, heads, causal, kv_heads=kv_heads, rotary=rotary)),
                     total_madds(steps_for(n_tokens, d_model, 1, causal, rotary=rotary)), heads * n_tokens * n_tokens,
                     n_tokens * n_tokens)


def efficiency_sentence(cost: SplitCost) -> str | None:
    """What splitting d into h heads does to the work, from the counts (None for one head: nothing is split)."""
    h, n, d = cost.heads, cost.n_tokens, cost.d_model
    if h == 1:
        return None
    if cost.madds == cost.madds_one_head:
        same = (f"The article says splitting “helps with the computational efficiency”; counted here, {h} heads "
                f"of width {d // h} cost the same {cost.madds:,} multiply-adds as one head of width {d}.")
    else:
        same = (f"{h} heads of width {d // h} cost {cost.madds:,} multiply-adds, one head of width {d} "
                f"{cost.madds_one_head:,}.")
    return (same + f" What changes: the {h} heads' products are independent of each other, so they can run side "
            f"by side (on several cores, or a GPU), and {h} × {n} × {n} = {cost.weights:,} attention weights are "
            f"kept instead of {cost.weights_one_head:,}.")


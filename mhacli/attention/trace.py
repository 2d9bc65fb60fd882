"""The trace: every intermediate of one run, frozen, and :func:`run`, which makes it.

The core computes once and returns the work: renderers (terminal, figures,
exports, page) only read a :class:`Trace`.  This module never prints, plots,
reads files or touches global random state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np

from mhacli.attention.attention import head_weight, multi_head_attention, project, split_heads
from mhacli.attention.config import Config
from mhacli.attention.display import page_of
from mhacli.attention.embed import embed, init_weights, positional_encoding, vocabulary
from mhacli.attention.errors import UsageError
from mhacli.attention.steps import ParameterCount, SplitCost, Step, split_cost, steps_for

Array = np.ndarray


def read_only(a: Array, dtype: type | None = None) -> Array:
    """A read-only copy of ``a`` (as ``dtype`` when given): what every result of the core holds."""
    out = np.array(a, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


def freeze(result: object) -> None:
    """Every writable array field of a frozen dataclass made a read-only copy (its ``__post_init__`` calls this)."""
    for name, value in vars(result).items():
        if isinstance(value, np.ndarray) and value.flags.writeable:
            object.__setattr__(result, name, read_only(value))


@dataclass(frozen=True, repr=False)
class Trace:
    """Every intermediate of one multi-head attention run, read-only."""

    config: Config
    tokens: tuple[str, ...]
    token_ids: Array  # (N,) vocabulary id per token: a trained model's own, else the order of first appearance
    X: Array  # (N, d) input to attention, positions included
    W_q: Array  # (d, d) PyTorch layout
    W_k: Array  # (g·d/h, d): (d, d) unless the heads share keys and values (g < h)
    W_v: Array  # (g·d/h, d)
    W_o: Array  # (d, d)
    Q: Array  # (h, N, d/h)
    K: Array  # (g, N, d/h): one block per key/value group, g = h in the article
    V: Array  # (g, N, d/h)
    scores: Array  # (h, N, N) scaled, masked with −∞
    weights: Array  # (h, N, N) row-softmax of scores
    heads: Array  # (h, N, d/h)
    concat: Array  # (N, d)
    output: Array  # (N, d)
    mask: Array | None = None  # (N, N) True = blocked; None when not causal
    embeddings: Array | None = None  # (N, d) E[tokens]; None when loaded from an npz
    positions: Array | None = None  # (N, d) P (zeros with --no-positions); None when loaded
    rules: tuple[str, ...] | None = None  # per-head rule names, for designed weights
    source: str | None = None  # the npz file this trace was loaded from, if any
    b_q: Array | None = None  # (d,) biases of your own weights (PyTorch's in_proj_bias, cut in three)
    b_k: Array | None = None  # (d,)
    b_v: Array | None = None  # (d,)
    b_o: Array | None = None  # (d,) out_proj.bias
    folds_case: bool = False  # the model reads "The" as "the" (one id, one embedding row): a grammar model
    model_ids: bool = False  # token_ids are rows of a trained model's vocabulary, not the order of first appearance
    word_values: bool = False  # V = E W_v (a model trained with positions in Q and K only), not X W_v
    rope_theta: float | None = None  # rotary positions' base θ: Q and K turned by position (a Llama-style layer)

    @property
    def biases(self) -> dict[str, Array]:
        """The biases this run had, by name (empty for the tool's own weights, which have none)."""
        named = {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}
        return {k: v for k, v in named.items() if v is not None}

    def __post_init__(self) -> None:
        freeze(self)

    def __repr__(self) -> str:
        """A few lines (the arrays would be tens of kilobytes): what ran, over what, and where the arrays are."""
        c = self.config
        words = " ".join(self.tokens[:8]) + (" …" if self.n_tokens > 8 else "")
        return (f"<mhacli Trace: {self.n_tokens} tokens, d={c.d_model}, h={c.heads}, d/h={c.d_k}, "
                f"{'causal' if c.causal else 'bidirectional'}, weights {c.weights}, {c.dtype}\n"
                f"  tokens: {words}\n"
                f"  arrays: X {self.X.shape}, Q/K/V {self.Q.shape}, scores/weights {self.weights.shape}, "
                f"output {self.output.shape}>")

    def _repr_html_(self) -> str | None:
        """Jupyter shows a run as its interactive page, isolated in an iframe (see mhacli.notebook)."""
        return page_of(self)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def causal(self) -> bool:
        """Whether later keys were masked (as :class:`~mhacli.measures.view.AttentionView` has it too)."""
        return self.config.causal

    @property
    def kind(self) -> str:
        """Where the weights came from: random, designed, trained, pytorch or worked."""
        return self.config.weights

    @property
    def head_names(self) -> tuple[str, ...] | None:
        """Each head's rule (designed weights), or None: what a figure may name a head by."""
        return self.rules

    @property
    def num_heads(self) -> int:
        return self.config.heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads g (h unless the query heads share keys and values)."""
        return self.config.groups

    @property
    def head_groups(self) -> tuple[int, ...]:
        """The key/value group each query head reads (0-based): ⌊i / (h/g)⌋."""
        from mhacli.attention.kv import group_of

        return tuple(group_of(i, self.num_heads, self.kv_heads) for i in range(self.num_heads))

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def d_k(self) -> int:
        return self.config.d_k

    @property
    def steps(self) -> list[Step]:
        return steps_for(self.n_tokens, self.d_model, self.num_heads, self.config.causal,
                         positions=self.config.positions, biases=bool(self.biases), word_values=self.word_values,
                         kv_heads=self.config.kv_heads, rotary=self.rope_theta is not None)

    @property
    def X_v(self) -> Array:
        """What the values are made from: X, or E[tokens] alone for a model trained so (N, d)."""
        if self.word_values:
            if self.embeddings is None:
                raise ValueError("a trace whose values come from E needs its embeddings")
            return self.embeddings
        return self.X

    @property
    def parameters(self) -> ParameterCount:
        return ParameterCount(self.d_model, self.num_heads, self.config.kv_heads)

    @property
    def split_cost(self) -> SplitCost:
        """This run's multiply-adds and kept weights beside one head of width d (what splitting changes)."""
        return split_cost(self.n_tokens, self.d_model, self.num_heads, self.config.causal, self.config.kv_heads,
                          self.rope_theta is not None)

    def head_weights(self, i: int) -> tuple[Array, Array, Array]:
        """The article's W_q^i, W_k^i, W_v^i (each d × d/h) for head i (0-based); K and V of its group j."""
        h, g = self.num_heads, self.kv_heads
        j = self.head_groups[i] if isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < h else i
        return head_weight(self.W_q, i, h), head_weight(self.W_k, j, g), head_weight(self.W_v, j, g)

    def split_equals_direct(self) -> float:
        """Largest |X W_q^i − (X W_qᵀ)[:, block i]| over heads and Q, K, V: the article's claim, checked."""
        worst = 0.0
        for x, w, n in ((self.X, self.W_q, self.num_heads), (self.X, self.W_k, self.kv_heads),
                        (self.X_v, self.W_v, self.kv_heads)):
            full = split_heads(project(x, w), n)  # (h or g, N, d/h)
            for i in range(n):
                direct = x @ head_weight(w, i, n)  # (N, d) @ (d, d/h) -> (N, d/h)
                worst = max(worst, float(np.max(np.abs(direct - full[i]), initial=0.0)))
        return worst


@dataclass(frozen=True)
class Inputs:
    """What one kind of weights gives a run: X's two parts, the four matrices, and what names the heads."""

    e: Array  # (N, d) E[tokens]
    p: Array  # (N, d) P
    w_q: Array  # (d, d) PyTorch layout
    w_k: Array  # (d, d)
    w_v: Array  # (d, d)
    w_o: Array  # (d, d)
    rules: tuple[str, ...] | None = None
    biases: Mapping[str, Array] | None = None
    ids: Array | None = None  # (N,) rows of a trained model's own vocabulary (else the order of first appearance)
    folds_case: bool = False  # the model reads "The" as "the" (a grammar model)
    word_values: bool = False  # V = E W_v: a model trained with positions in Q and K only
    rope_theta: float | None = None  # rotary positions in Q and K (a Llama-style layer), P then zeros


class TrainedModel(Protocol):
    """A trained model (mhacli.grammar.model.TrainedModel): what a run of it over some tokens reads."""

    def run_inputs(self, tokens: Sequence[str]) -> Inputs:
        ...


class OwnAttention(Protocol):
    """Your attention layer's four matrices in PyTorch's layout (mhacli.models.state_dict.AttentionWeights)."""

    @property
    def w_q(self) -> Array: ...
    @property
    def w_k(self) -> Array: ...
    @property
    def w_v(self) -> Array: ...
    @property
    def w_o(self) -> Array: ...
    @property
    def d_model(self) -> int: ...

    def biases(self) -> dict[str, Array]:
        ...


class WeightSource(Protocol):
    """Where a run's inputs and weights come from: one class per kind, so a new kind is a new class."""

    def inputs(self, tokens: tuple[str, ...], config: Config) -> Inputs:
        """X's parts and the weights for ``tokens`` under ``config``."""
        ...


def _toy_x(tokens: tuple[str, ...], config: Config) -> tuple[Array, Array]:
    """The toy embedding E[tokens] (N, d) and the sinusoidal positions P (N, d), or zeros without positions."""
    n, d = len(tokens), config.d_model
    e = embed(tokens, d, config.seed)  # (N, d)
    p = positional_encoding(n, d) if config.positions else np.zeros((n, d))  # (N, d)
    return e, p


class RandomWeights:
    """``--weights random``: the toy embedding and weights drawn from the run's seed."""

    def inputs(self, tokens: tuple[str, ...], config: Config) -> Inputs:
        e, p = _toy_x(tokens, config)
        w_q, w_k, w_v, w_o = init_weights(config.d_model, np.random.default_rng(config.seed),
                                          config.groups * config.d_k)
        return Inputs(e, p, w_q, w_k, w_v, w_o)


class DesignedWeights:
    """``--weights designed``: heads built by hand to follow rules (core.designed)."""

    def inputs(self, tokens: tuple[str, ...], config: Config) -> Inputs:
        from mhacli.attention.designed import design

        built = design(tokens, config)
        return Inputs(built.embeddings, built.positions, built.w_q, built.w_k, built.w_v, built.w_o,
                      rules=tuple(built.rules))


@dataclass(frozen=True)
class OwnWeights:
    """Your nn.MultiheadAttention's weights over the toy embedding."""

    weights: OwnAttention

    def inputs(self, tokens: tuple[str, ...], config: Config) -> Inputs:
        w = self.weights
        if w.d_model != config.d_model:
            raise UsageError("the weights are for d_model={} but the run has {{d_model}}; leave "
                             "{{d_model:name}} out to take it from the weights.".format(w.d_model),
                             d_model=config.d_model)
        e, p = _toy_x(tokens, config)
        theta = getattr(w, "rope_theta", None)  # a Llama-style layer: positions turn Q and K, never added to X
        return Inputs(e, np.zeros_like(p) if theta is not None else p, w.w_q, w.w_k, w.w_v, w.w_o,
                      biases=w.biases(), rope_theta=theta)


@dataclass(frozen=True)
class TrainedWeights:
    """A trained model (``mha train --save``, the shipped ones): its own embedding, positions and weights."""

    model: TrainedModel

    def inputs(self, tokens: tuple[str, ...], config: Config) -> Inputs:
        return self.model.run_inputs(tokens)


#: The kinds a Config names that need nothing but the Config.
BUILT_IN: dict[str, type[RandomWeights] | type[DesignedWeights]] = {"random": RandomWeights,
                                                                     "designed": DesignedWeights}


def source_for(config: Config, weights: OwnAttention | None = None,
               model: TrainedModel | None = None) -> WeightSource:
    """The source of a run's weights: a trained model, your weights, or the kind the Config names."""
    if model is not None:
        return TrainedWeights(model)
    if weights is not None:
        return OwnWeights(weights)
    if config.weights in BUILT_IN:
        return BUILT_IN[config.weights]()
    if config.weights in ("trained", "untrained"):
        raise UsageError("{weights} needs a trained model file; make one with 'mha train --save model.npz'.",
                         weights=config.weights)
    raise UsageError("{weights} needs the weights themselves; pass them to run().", weights=config.weights)


def run_tokens(tokens: Sequence[str], config: Config, weights: OwnAttention | None = None,
               model: TrainedModel | None = None) -> Trace:
    """Run multi-head attention over given tokens under ``config``: with ``weights`` (your own nn.MultiheadAttention
    weights, the toy embedding making X), with ``model`` (a trained model, its own embedding and weights), or
    with the kind ``config.weights`` names (:func:`source_for`).
    """
    tokens = tuple(tokens)
    if not tokens:
        raise UsageError("the text has no tokens to attend over; give at least one word.")
    dtype = np.dtype(config.dtype)
    _, ids = vocabulary(tokens)
    got = source_for(config, weights, model).inputs(tokens, config)
    if got.ids is not None:  # the row of the model's own embedding table each token reads
        ids = np.asarray(got.ids, dtype=np.int64)  # (N,)
    biases = {k: b.astype(dtype) for k, b in (got.biases or {}).items()}
    e, p = got.e.astype(dtype), got.p.astype(dtype)
    w_q, w_k, w_v, w_o = (w.astype(dtype) for w in (got.w_q, got.w_k, got.w_v, got.w_o))
    x = e + p  # (N, d)
    # A model trained with positions in Q and K only makes its values from the word embeddings alone: V = E W_v.
    values = e if got.word_values else x  # (N, d)
    attention = multi_head_attention(x, x, values, w_q, w_k, w_v, w_o, config.heads, config.causal, biases,
                                     config.kv_heads, got.rope_theta)
    for array in vars(attention).values():  # fresh arrays nobody else holds: frozen here, not copied by Trace
        if array is not None:
            array.setflags(write=False)
    return Trace(config=config, tokens=tokens, token_ids=ids, embeddings=e, positions=p, X=x,
                 W_q=w_q, W_k=w_k, W_v=w_v, W_o=w_o, rules=got.rules, folds_case=got.folds_case,
                 model_ids=got.ids is not None, word_values=got.word_values,
                 b_q=biases.get("b_q"), b_k=biases.get("b_k"), b_v=biases.get("b_v"), b_o=biases.get("b_o"),
                 rope_theta=got.rope_theta, **vars(attention))

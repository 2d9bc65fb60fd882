"""Training one multi-head attention layer in numpy: the model, its backward pass, Adam.

The model is the article's layer and nothing else::

    ids (B, N) -> X = E[ids] + P (B, N, d) -> Q, K, V (B, h, N, d/h) -> A (B, h, N, N)
        -> heads (B, h, N, d/h) -> H (B, N, d) -> O = H W_oᵀ (B, N, d) -> logits_t = O R_tᵀ (B, N, V)

one linear readout R_t per target, no hidden layer, no residual path: whatever
a position knows about other positions came through attention, so the task
measures the attention alone.  The forward pass reuses the step functions of
:mod:`mhacli.core.attention` on a batch (they broadcast over leading axes).

The backward pass is the forward pass run in reverse, one function per step,
named after the step it differentiates (``softmax_backward`` is softmax's
vector-Jacobian product), with the forward code's shape comments.
``tests/test_train.py`` checks every gradient against finite differences.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from mhacli.core import evidence
from mhacli.core.attention import attend, causal_mask, merge_heads, project, split_heads
from mhacli.core.config import Config
from mhacli.core.embed import init_weights, positional_encoding
from mhacli.core.errors import RunError, UsageError
from mhacli.core.schedule import single_threaded_blas
from mhacli.core.grammar import LONGEST, NO_RELATION, RELATION_NAMES
from mhacli.core.tasks import BOUNDARY, RELATION_KEYS, TASKS, UNKNOWN, Task, get_task
from mhacli.core.words import WordMap, stand_ins

if TYPE_CHECKING:
    from mhacli.core.card import Card

Array = np.ndarray
Params = dict[str, Array]

POSITION_KINDS = ("learned", "sinusoidal")
SCHEDULES = ("constant", "cosine")
# Parameters Adam updates; "positions" joins them only when they are learned.
WEIGHT_NAMES = ("embedding", "W_q", "W_k", "W_v", "W_o", "readout")


# ----------------------------------------------------------------------------- configuration


# Upper bounds a teaching run never needs to pass: without them `--steps 10000000` trains for hours and
# `--batch 10000000` asks for more memory than the machine has, instead of one clear line.
TRAIN_LIMITS = {"steps": 100_000, "batch": 4_096, "length": 256, "held_out": 100_000, "snapshots": 50}
LR_MAX = 1.0  # Adam moves each parameter by about lr a step: above 1 the layer only diverges
TRAIN_LIMIT_REASONS = {
    "steps": "the tasks are learned in 1,500; 100,000 take minutes",
    "batch": "64 sequences a step are enough; a bigger batch only costs memory",
    "length": "the tasks' sequences are 12 tokens",
    "held_out": "500 sequences measure the accuracy to within a few percent",
    "snapshots": "one figure column each",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a training run's numbers."""

    task: str = "neighbours"
    heads: int = 4
    d_model: int = 16
    steps: int = 1500
    batch: int = 64
    length: int = 12
    lr: float = 0.02
    seed: int = 0
    positions: str = "sinusoidal"
    causal: bool = False
    # Values from the word embeddings alone (V = E W_vᵀ; positions only in Q and K, as rotary and relative
    # schemes keep them): a head then brings back *which words* it looked at, not where they were.
    word_values: bool = False
    schedule: str = "constant"  # the learning rate over training: constant, or cosine (from lr down to 0)
    # The loss over the asked answers only (the grammar's relations where they exist), not also the boundary
    # everywhere else: a readout then never learns to say "no relation here" from the other heads.
    scored_loss: bool = False
    # λ of the group-lasso penalty λ Σ_t Σ_i ||R_t W_o^i||_F (head_sparsity): each readout reads few heads.
    head_sparsity: float = 0.0
    # The share of training sequences in which one head, drawn at random, is switched off (its output zeroed
    # before W_o, as the knockout does): a readout then cannot lean on every head at once.
    head_dropout: float = 0.0
    # λ of λ Σ_t ‖n_t‖₁/‖n_t‖₂, n_ti = ||R_t W_o^i||_F (head_concentration): few heads per readout, any size.
    head_concentration: float = 0.0
    # An experiment, off by default: the grammar's referent read out by one readout per kind of referent
    # (he/she, feeling adjective, place adjective) in training and scoring, so each can learn to read one head.
    split_referent: bool = False
    held_out: int = 500  # fresh sequences for the held-out accuracy
    snapshots: int = 5  # moments of training kept for the heads figure (start … end)

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def for_task(cls, task: str = "neighbours", **options: Any) -> "TrainConfig":
        """The config with ``options``, and the task's own defaults for what they leave out (None = left out)."""
        given = {k: v for k, v in options.items() if v is not None}
        defaults = dict(get_task(task).defaults) if task in TASKS else {}
        return cls(task=task, **{**defaults, **given})

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the parameter for any bad value."""
        get_task(self.task)
        for name in ("steps", "batch", "length", "held_out", "snapshots"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{{{name}:name}} must be a whole number, got {value!r}.", **{name: value})
            least = 2 if name in ("length", "snapshots") else 1
            if value < least:
                raise UsageError(f"{{{name}:name}} must be at least {least}, got {value}.", **{name: value})
            most = TRAIN_LIMITS[name]
            if value > most:
                raise UsageError(f"{{{name}:name}} must be at most {most:,}, got {value:,} "
                                 f"({TRAIN_LIMIT_REASONS[name]}).", **{name: value})
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or not 0 < lr <= LR_MAX:
            raise UsageError(f"{{lr:name}} must be a finite number above 0 and at most {LR_MAX:g} "
                             f"(0.001 to 0.05 works), got {lr!r}.", lr=lr)
        task = get_task(self.task)
        if task.sentences and self.length < LONGEST:
            raise UsageError(f"{{length:name}} must be at least {LONGEST} for the {task.name} task (its longest "
                             f"sentence), got {self.length}.", length=self.length)
        if not isinstance(self.word_values, bool):
            raise UsageError(f"{{word_values:name}} must be true or false, got {self.word_values!r}.",
                             word_values=self.word_values)
        if not isinstance(self.split_referent, bool):
            raise UsageError(f"{{split_referent:name}} must be true or false, got {self.split_referent!r}.",
                             split_referent=self.split_referent)
        if self.split_referent:
            task.by_referent_kind()  # only the grammar has a referent to split: any other task is refused here
        if not isinstance(self.scored_loss, bool):
            raise UsageError(f"{{scored_loss:name}} must be true or false, got {self.scored_loss!r}.",
                             scored_loss=self.scored_loss)
        for name in ("head_sparsity", "head_concentration"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not 0 <= value <= 1):
                raise UsageError(f"{{{name}:name}} must be a number from 0 to 1 (0.001 to 0.01 works), got "
                                 f"{value!r}.", **{name: value})
        dropout = self.head_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise UsageError(f"{{head_dropout:name}} must be a share from 0 to 1, got {dropout!r}.",
                             head_dropout=dropout)
        if self.schedule not in SCHEDULES:
            raise UsageError(f"{{schedule:name}} must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}.",
                             schedule=self.schedule)
        if self.positions not in POSITION_KINDS:
            raise UsageError(f"{{positions:name}} must be one of {', '.join(POSITION_KINDS)}, got "
                             f"{self.positions!r}.", positions=self.positions)
        # heads, d_model and seed: the run configuration's checks and wording (divisors listed).
        self.run_config()

    def run_config(self) -> Config:
        """The attention layer's :class:`Config` (heads, width, seed), validated by Config's one validation."""
        return Config(heads=self.heads, d_model=self.d_model, seed=self.seed)

    def the_task(self) -> Task:
        """The task this config trains: its own, or the grammar with the referent split by kind."""
        task = get_task(self.task)
        return task.by_referent_kind() if self.split_referent else task

    def check_fits(self, limit: int) -> None:
        """Refuse, before any array, a layer whose weights alone would not fit in ``limit`` bytes."""
        self.run_config().check_fits(1, limit=limit)


# ----------------------------------------------------------------------------- parameters


def init_params(config: TrainConfig, task: Task, rng: np.random.Generator) -> Params:
    """Fresh parameters; their shapes (so their draws) do not depend on the number of heads."""
    d, n, n_vocab, n_targets = config.d_model, config.length, len(task.vocabulary), len(task.targets)
    embedding = rng.standard_normal((n_vocab, d))  # (V, d)
    if UNKNOWN in task.vocabulary:  # never an input in training: a zero row brings only the position
        embedding[task.vocabulary.index(UNKNOWN)] = 0.0
    if config.positions == "learned":
        positions = rng.standard_normal((n, d))  # (N, d)
    else:
        positions = positional_encoding(n, d)  # (N, d)
    w_q, w_k, w_v, w_o = init_weights(d, rng)  # each (d, d), PyTorch layout
    readout = rng.standard_normal((n_targets, n_vocab, d)) / math.sqrt(d)  # (T, V, d)
    return {"embedding": embedding, "positions": positions, "W_q": w_q, "W_k": w_k, "W_v": w_v,
            "W_o": w_o, "readout": readout}


def trainable(config: TrainConfig) -> tuple[str, ...]:
    """Names of the parameters training changes."""
    return WEIGHT_NAMES + (("positions",) if config.positions == "learned" else ())


def count_parameters(config: TrainConfig) -> int:
    """Number of trained numbers: V·d + (N·d) + 4·d² + T·V·d, the same for every head count."""
    task = config.the_task()
    d, n_vocab = config.d_model, len(task.vocabulary)
    positions = config.length * d if config.positions == "learned" else 0
    return n_vocab * d + positions + 4 * d * d + len(task.targets) * n_vocab * d


# ----------------------------------------------------------------------------- forward


def embed_ids(embedding: Array, positions: Array, ids: Array) -> Array:
    """X = E[ids] + P: each token's row of the table plus its position's row."""
    n = ids.shape[-1]
    return embedding[ids] + positions[:n]  # (B, N, d) + (N, d) -> (B, N, d)


def readout(out: Array, w_r: Array) -> Array:
    """logits_t = O R_tᵀ for every target t at once (one linear readout each)."""
    n_targets, n_vocab, d = w_r.shape
    logits = out @ w_r.reshape(n_targets * n_vocab, d).T  # (B, N, d) @ (d, T·V) -> (B, N, T·V)
    return logits.reshape(*out.shape[:-1], n_targets, n_vocab)  # -> (B, N, T, V)


def key_mask(ids: Array, causal: bool, pad: int | None) -> Array | None:
    """True where a query may not look: later keys when causal, and the padding after a sentence's end."""
    blocked = causal_mask(ids.shape[-1]) if causal else None  # (N, N), broadcast over B and h
    if pad is None:
        return blocked
    padding = (ids == pad)[:, None, None, :]  # (B, 1, 1, N): no query looks past its sentence
    return padding if blocked is None else padding | blocked  # (B, 1, N, N)


def value_inputs(params: Params, ids: Array, x: Array, word_values: bool) -> Array:
    """What the values are made from: X = E[ids] + P, or the word embeddings E[ids] alone."""
    return params["embedding"][ids] if word_values else x  # (B, N, d)


def forward(params: Params, ids: Array, heads: int, causal: bool, pad: int | None = None,
            word_values: bool = False, logits: bool = True, kept: Array | None = None) -> dict[str, Array]:
    """The model on a batch of id sequences; every intermediate by name (the backward pass needs them).

    ``logits=False`` stops at O: a loss over the asked positions only reads them out itself
    (:func:`scored_readout`).  ``kept`` (B, h): 1 for a head that speaks in that sequence, 0 for one dropped
    (head dropout in training; None: every head)."""
    x = embed_ids(params["embedding"], params["positions"], ids)  # (B, N, d)
    x_v = value_inputs(params, ids, x, word_values)  # (B, N, d): X, or E[ids] alone
    q = split_heads(project(x, params["W_q"]), heads)  # (B, N, d) -> (B, h, N, d/h)
    k = split_heads(project(x, params["W_k"]), heads)  # (B, N, d) -> (B, h, N, d/h)
    v = split_heads(project(x_v, params["W_v"]), heads)  # (B, N, d) -> (B, h, N, d/h)
    _, weights, heads_out = attend(q, k, v, key_mask(ids, causal, pad))  # (B, h, N, N), (B, h, N, d/h)
    spoken = heads_out if kept is None else heads_out * kept[:, :, None, None]  # (B, h, N, d/h)
    concat = merge_heads(spoken)  # (B, h, N, d/h) -> (B, N, d)
    out = project(concat, params["W_o"])  # (B, N, d)
    cache = {"x": x, "x_v": x_v, "q": q, "k": k, "v": v, "weights": weights, "heads": heads_out, "concat": concat,
             "out": out}
    if kept is not None:
        cache["kept"] = kept  # (B, h)
    if logits:
        cache["logits"] = readout(out, params["readout"])  # (B, N, T, V)
    return cache


def softmax_cross_entropy(logits: Array, labels: Array, count: int) -> tuple[float, Array, Array]:
    """Summed cross-entropy of rows of logits over ``count`` predictions; its gradient; which rows were right.

    ``logits`` is (..., V) and ``labels`` (...,) the right answer of each row.  Each pass over the logits is
    made once and in place (they are the biggest array of a step): max, shift, exp, sum, scale.
    """
    correct = logits.argmax(axis=-1) == labels  # (...)
    p = logits - logits.max(axis=-1, keepdims=True)  # (..., V); the max keeps exp() ≤ 1
    picked = np.take_along_axis(p, labels[..., None], axis=-1)  # (..., 1)
    np.exp(p, out=p)  # (..., V)
    total = p.sum(axis=-1, keepdims=True)  # (..., 1)
    loss = float(np.sum(np.log(total) - picked)) / count
    p /= total  # (..., V): softmax of the logits
    np.put_along_axis(p, labels[..., None], np.take_along_axis(p, labels[..., None], axis=-1) - 1, axis=-1)
    p /= count  # the loss is a mean over ``count`` predictions
    return loss, p, correct


def cross_entropy(logits: Array, targets: Array) -> tuple[float, Array, Array]:
    """Mean cross-entropy over every position and target; its gradient; which predictions were right.

    ``targets`` is (T, B, N) as the tasks make it.
    """
    t = np.moveaxis(targets, 0, -1)  # (T, B, N) -> (B, N, T)
    return softmax_cross_entropy(logits, t, t.size)  # (B, N, T, V) and (B, N, T)


def scored_readout(out: Array, w_r: Array, scored: Array) -> list[Array]:
    """logits_t = O R_tᵀ only at the positions where target t is asked: one (M_t, V) array per target."""
    flat = out.reshape(-1, out.shape[-1])  # (B, N, d) -> (B·N, d)
    # np.take with the asked rows' numbers: a boolean mask as an index is several times slower here.
    return [np.take(flat, np.flatnonzero(scored[t]), axis=0) @ w_r[t].T  # (M_t, d) @ (d, V) -> (M_t, V)
            for t in range(w_r.shape[0])]


def scored_cross_entropy(logits: list[Array], targets: Array,
                         scored: Array) -> tuple[float, list[Array], Array]:
    """Mean cross-entropy over the asked answers only (``scored`` (T, B, N)); its gradient per target; which
    were right, as (B, N, T) (False where nothing was asked)."""
    count = max(int(scored.sum()), 1)
    # One softmax over every target's rows at once (each row is its own softmax, so the numbers are the same
    # as target by target), then cut back per target.
    labels = np.concatenate([targets[t][scored[t]] for t in range(len(logits))])  # (M,)
    loss, d_all, right = softmax_cross_entropy(np.concatenate(logits), labels, count)  # (M, V), (M,)
    cuts = np.cumsum([len(logits_t) for logits_t in logits])[:-1]  # where each target's rows end
    correct = np.zeros(scored.shape[1:] + scored.shape[:1], dtype=bool)  # (B, N, T)
    for t, right_t in enumerate(np.split(right, cuts)):
        correct[..., t][scored[t]] = right_t
    return loss, np.split(d_all, cuts), correct


# ----------------------------------------------------------------------------- backward, in reverse order


def readout_backward(d_logits: Array, out: Array, w_r: Array) -> tuple[Array, Array]:
    """Gradients through logits_t = O R_tᵀ: for the attention output O and the readouts R."""
    n_targets, n_vocab, d = w_r.shape
    g = d_logits.reshape(-1, n_targets * n_vocab)  # (B, N, T, V) -> (B·N, T·V)
    d_w_r = (g.T @ out.reshape(-1, d)).reshape(n_targets, n_vocab, d)  # (T·V, B·N) @ (B·N, d) -> (T, V, d)
    d_out = (g @ w_r.reshape(n_targets * n_vocab, d)).reshape(out.shape)  # (B·N, T·V) @ (T·V, d) -> (B, N, d)
    return d_out, d_w_r


def scored_readout_backward(d_logits: list[Array], out: Array, w_r: Array,
                            scored: Array) -> tuple[Array, Array]:
    """Gradients through logits_t = O R_tᵀ at the asked positions: for O (zero where nothing is asked) and R."""
    flat = out.reshape(-1, out.shape[-1])  # (B, N, d) -> (B·N, d)
    d_flat = np.zeros_like(flat)  # (B·N, d)
    d_w_r = np.empty_like(w_r)  # (T, V, d)
    for t, d_t in enumerate(d_logits):
        rows = np.flatnonzero(scored[t])  # (M_t,): each asked position once per target
        d_flat[rows] += d_t @ w_r[t]  # (M_t, V) @ (V, d) -> (M_t, d)
        d_w_r[t] = d_t.T @ np.take(flat, rows, axis=0)  # (V, M_t) @ (M_t, d) -> (V, d)
    return d_flat.reshape(out.shape), d_w_r  # (B·N, d) -> (B, N, d)


def project_backward(d_y: Array, x: Array, w: Array) -> tuple[Array, Array]:
    """Gradients through y = x Wᵀ: for the input x and the weight W (PyTorch layout)."""
    d_w = d_y.reshape(-1, d_y.shape[-1]).T @ x.reshape(-1, x.shape[-1])  # (d, B·N) @ (B·N, d) -> (d, d)
    d_x = d_y @ w  # (B, N, d) @ (d, d) -> (B, N, d)
    return d_x, d_w


def output_projection_backward(d_out: Array, concat: Array, w_o: Array) -> tuple[Array, Array]:
    """Gradients through O = H W_oᵀ: for the concatenated heads H and W_o."""
    return project_backward(d_out, concat, w_o)  # (B, N, d), (d, d)


def merge_heads_backward(d_concat: Array, heads: int) -> Array:
    """Concatenation only moves numbers, so its gradient moves them back: cut H's gradient per head."""
    return split_heads(d_concat, heads)  # (B, N, d) -> (B, h, N, d/h)


def weigh_values_backward(d_heads: Array, weights: Array, v: Array) -> tuple[Array, Array]:
    """Gradients through head_i = A^i V^i: for the weights A^i and the values V^i."""
    d_weights = d_heads @ np.swapaxes(v, -1, -2)  # (B, h, N, d/h) @ (B, h, d/h, N) -> (B, h, N, N)
    d_v = np.swapaxes(weights, -1, -2) @ d_heads  # (B, h, N, N) @ (B, h, N, d/h) -> (B, h, N, d/h)
    return d_weights, d_v


def softmax_backward(d_weights: Array, weights: Array) -> Array:
    """Softmax's vector-Jacobian product: dS = A ⊙ (dA − Σ_j dA_j A_j), row by row.

    Masked keys have A = 0, so their score gets no gradient: the −∞ mask needs no step of its own.
    """
    row = (d_weights * weights).sum(axis=-1, keepdims=True)  # (B, h, N, 1)
    return weights * (d_weights - row)  # (B, h, N, N)


def attention_scores_backward(d_scores: Array, q: Array, k: Array) -> tuple[Array, Array]:
    """Gradients through S^i = Q^i K^iᵀ / √(d/h): for the queries and the keys."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    d_q = (d_scores @ k) * scale  # (B, h, N, N) @ (B, h, N, d/h) -> (B, h, N, d/h)
    d_k = (np.swapaxes(d_scores, -1, -2) @ q) * scale  # (B, h, N, N) @ (B, h, N, d/h) -> (B, h, N, d/h)
    return d_q, d_k


def split_heads_backward(d_split: Array) -> Array:
    """Splitting only moves numbers: put each head's gradient back in its columns."""
    return merge_heads(d_split)  # (B, h, N, d/h) -> (B, N, d)


def projections_backward(d_q: Array, d_k: Array, d_v: Array, x: Array, x_v: Array,
                         params: Params) -> tuple[Array, Array, Array, Array, Array]:
    """Gradients through Q = X W_qᵀ, K = X W_kᵀ, V = X_v W_vᵀ: X feeds Q and K, so their gradients add.

    X_v is X itself, or E[ids] alone (:func:`value_inputs`); its gradient is returned apart."""
    d_x_q, d_w_q = project_backward(d_q, x, params["W_q"])  # (B, N, d), (d, d)
    d_x_k, d_w_k = project_backward(d_k, x, params["W_k"])  # (B, N, d), (d, d)
    d_x_v, d_w_v = project_backward(d_v, x_v, params["W_v"])  # (B, N, d), (d, d)
    return d_x_q + d_x_k, d_x_v, d_w_q, d_w_k, d_w_v  # 2 × (B, N, d), 3 × (d, d)


def value_inputs_backward(d_x: Array, d_x_v: Array, word_values: bool) -> tuple[Array, Array]:
    """Gradients through X_v = X or E[ids]: into X's gradient, or kept for the embedding alone."""
    if word_values:
        return d_x, d_x_v  # (B, N, d): X_v = E[ids] reaches only the embedding
    return d_x + d_x_v, np.zeros_like(d_x_v)  # (B, N, d): X_v is X, a third use of it


def embedding_backward(d_x: Array, ids: Array, n_vocab: int, d_words: Array | None = None) -> tuple[Array, Array]:
    """Gradients through X = E[ids] + P (and E[ids] alone, ``d_words``): each row of E collects its tokens'
    rows; P the sum over the batch."""
    d = d_x.shape[-1]
    d_e = d_x if d_words is None else d_x + d_words  # (B, N, d): E[ids] is read by X and by the values
    # Row ids[b, n] of E collects d_e[b, n]: one bincount over (token, column) pairs sums them in the order
    # np.add.at would, for a quarter of its time.
    cells = (ids.reshape(-1, 1) * d + np.arange(d)).reshape(-1)  # (B·N·d,): the cell of E each number adds to
    d_embedding = np.bincount(cells, weights=d_e.reshape(-1), minlength=n_vocab * d).reshape(n_vocab, d)  # (V, d)
    d_positions = d_x.sum(axis=0)  # (B, N, d) -> (N, d)
    return d_embedding, d_positions


def backward(params: Params, cache: dict[str, Array], ids: Array, d_logits: Array, heads: int,
             word_values: bool = False) -> Params:
    """Every parameter's gradient: the forward steps differentiated in reverse order."""
    d_out, d_readout = readout_backward(d_logits, cache["out"], params["readout"])  # (B, N, d), (T, V, d)
    return {**layer_backward(params, cache, ids, d_out, heads, word_values), "readout": d_readout}


def layer_backward(params: Params, cache: dict[str, Array], ids: Array, d_out: Array, heads: int,
                   word_values: bool = False) -> Params:
    """The attention layer's gradients from O's: W_o down to the embedding, in reverse order."""
    d_concat, d_w_o = output_projection_backward(d_out, cache["concat"], params["W_o"])  # (B, N, d), (d, d)
    d_heads = merge_heads_backward(d_concat, heads)  # (B, h, N, d/h)
    if "kept" in cache:  # a dropped head passed nothing on, so nothing comes back to it
        d_heads = d_heads * cache["kept"][:, :, None, None]  # (B, h, N, d/h)
    d_weights, d_v = weigh_values_backward(d_heads, cache["weights"], cache["v"])  # (B, h, N, N), (B, h, N, d/h)
    d_scores = softmax_backward(d_weights, cache["weights"])  # (B, h, N, N)
    d_q, d_k = attention_scores_backward(d_scores, cache["q"], cache["k"])  # 2 × (B, h, N, d/h)
    d_q, d_k, d_v = (split_heads_backward(g) for g in (d_q, d_k, d_v))  # 3 × (B, N, d)
    d_x, d_x_v, d_w_q, d_w_k, d_w_v = projections_backward(d_q, d_k, d_v, cache["x"], cache["x_v"],
                                                           params)  # 2 × (B, N, d), 3 × (d, d)
    d_x, d_words = value_inputs_backward(d_x, d_x_v, word_values)  # 2 × (B, N, d)
    d_embedding, d_positions = embedding_backward(d_x, ids, params["embedding"].shape[0], d_words)  # (V, d), (N, d)
    return {"embedding": d_embedding, "positions": d_positions, "W_q": d_w_q, "W_k": d_w_k, "W_v": d_w_v,
            "W_o": d_w_o}


def head_readouts(w_r: Array, w_o: Array, heads: int) -> Array:
    """R_t W_o^i: how target t's readout reads head i (logits_t = Σ_i head_i (R_t W_o^i)ᵀ).

    W_o^i are the d/h columns of W_o that read head i, so R_t W_o holds every head's block side by side: one
    matrix product (an einsum over the blocks took 18 % of a training step)."""
    n_targets, n_vocab, d = w_r.shape
    return (w_r @ w_o).reshape(n_targets, n_vocab, heads, d // heads)  # (T, V, d) @ (d, d) -> (T, V, h, d/h)


def _through_blocks(g: Array, w_r: Array, w_o: Array) -> tuple[Array, Array]:
    """Gradients for R and W_o from the gradient of the blocks P = R W_o, (T, V, h, d/h)."""
    n_targets, n_vocab, d = w_r.shape
    g = g.reshape(n_targets, n_vocab, d)  # (T, V, h, d/h) -> (T, V, d)
    d_w_r = g @ w_o.T  # (T, V, d) @ (d, d) -> (T, V, d)
    d_w_o = w_r.reshape(-1, d).T @ g.reshape(-1, d)  # (d, T·V) @ (T·V, d) -> (d, d)
    return d_w_r, d_w_o


def head_sparsity(w_r: Array, w_o: Array, heads: int, strength: float) -> tuple[float, Array, Array]:
    """The group-lasso penalty λ Σ_t Σ_i ||R_t W_o^i||_F and its gradients for R and W_o.

    A sum of norms (not of squares) drives whole blocks to zero: a readout pays for every head it reads at
    all, so it learns to read the fewest heads, and switching a head off then costs only the relations whose
    readouts read it.
    """
    p = head_readouts(w_r, w_o, heads)  # (T, V, h, d/h)
    norm = np.sqrt((p * p).sum(axis=(1, 3), keepdims=True))  # (T, 1, h, 1)
    g = strength * p / np.maximum(norm, 1e-12)  # (T, V, h, d/h): ∂λ||P||/∂P, 0 for a block that is 0
    d_w_r, d_w_o = _through_blocks(g, w_r, w_o)  # (T, V, d), (d, d)
    return strength * float(norm.sum()), d_w_r, d_w_o


def head_concentration(w_r: Array, w_o: Array, heads: int, strength: float) -> tuple[float, Array, Array]:
    """The penalty λ Σ_t ‖n_t‖₁ / ‖n_t‖₂ over n_ti = ||R_t W_o^i||_F, and its gradients for R and W_o.

    ‖n‖₁/‖n‖₂ is 1 when readout t reads one head and √h when it reads all alike, whatever the readout's size:
    unlike the group lasso it asks a readout to read few heads without asking its logits to be small.  One
    head has nothing to choose: the penalty is λ·T and its gradient exactly 0 (not rounding noise).
    """
    if heads == 1:
        return strength * w_r.shape[0], np.zeros_like(w_r), np.zeros_like(w_o)
    p = head_readouts(w_r, w_o, heads)  # (T, V, h, d/h)
    norm = np.sqrt((p * p).sum(axis=(1, 3)))  # (T, h): n_ti
    l1 = norm.sum(axis=1, keepdims=True)  # (T, 1)
    l2 = np.sqrt((norm * norm).sum(axis=1, keepdims=True))  # (T, 1)
    d_norm = strength * (1.0 / l2 - l1 * norm / l2 ** 3)  # (T, h): ∂(λ l1/l2)/∂n_ti
    g = (d_norm / np.maximum(norm, 1e-12))[:, None, :, None] * p  # (T, V, h, d/h): through n_ti = ||P_ti||
    d_w_r, d_w_o = _through_blocks(g, w_r, w_o)  # (T, V, d), (d, d)
    return strength * float((l1 / l2).sum()), d_w_r, d_w_o


def loss_and_grads(params: Params, ids: Array, targets: Array, heads: int, causal: bool, pad: int | None = None,
                   word_values: bool = False, scored: Array | None = None,
                   sparsity: float = 0.0, kept: Array | None = None,
                   concentration: float = 0.0) -> tuple[float, Params, Array]:
    """One forward and backward pass: the loss, every gradient, and which predictions were right.

    ``scored`` (T, B, N): the loss is over those answers only (None: every position and target);
    ``sparsity``: the strength λ of :func:`head_sparsity`, added to the loss (0: none); ``kept`` (B, h): which
    heads speak in each sequence (:func:`dropped_heads`; None: all); ``concentration``: λ of
    :func:`head_concentration` (0: none).
    """
    if scored is None:
        cache = forward(params, ids, heads, causal, pad, word_values, kept=kept)
        loss, d_logits, correct = cross_entropy(cache["logits"], targets)
        grads = backward(params, cache, ids, d_logits, heads, word_values)
    else:
        cache = forward(params, ids, heads, causal, pad, word_values, logits=False, kept=kept)
        logits = scored_readout(cache["out"], params["readout"], scored)  # T × (M_t, V)
        loss, d_scored, correct = scored_cross_entropy(logits, targets, scored)
        d_out, d_readout = scored_readout_backward(d_scored, cache["out"], params["readout"], scored)
        grads = {**layer_backward(params, cache, ids, d_out, heads, word_values), "readout": d_readout}
    if sparsity:
        penalty, d_w_r, d_w_o = head_sparsity(params["readout"], params["W_o"], heads, sparsity)
        loss += penalty
        grads["readout"] = grads["readout"] + d_w_r
        grads["W_o"] = grads["W_o"] + d_w_o
    if concentration:
        penalty, d_w_r, d_w_o = head_concentration(params["readout"], params["W_o"], heads, concentration)
        loss += penalty
        grads["readout"] = grads["readout"] + d_w_r
        grads["W_o"] = grads["W_o"] + d_w_o
    return loss, grads, correct


# ----------------------------------------------------------------------------- Adam


@dataclass
class Adam:
    """Adam (Kingma & Ba): a per-number step size from running means of the gradient and its square."""

    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: Params = field(default_factory=dict)
    v: Params = field(default_factory=dict)

    def step(self, params: Params, grads: Params, names: Sequence[str]) -> None:
        """Update ``params[name]`` in place for every name."""
        self.t += 1
        # The bias corrections undo the zero start of m and v, folded into one step size.
        step = self.lr * math.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        for name in names:
            g = grads[name]
            m = self.m.setdefault(name, np.zeros_like(g))
            v = self.v.setdefault(name, np.zeros_like(g))
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            params[name] -= step * m / (np.sqrt(v) + self.eps)


# ----------------------------------------------------------------------------- results


def _frozen(a: Array) -> Array:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


# A head is named for a relation only when its most-weighted key is the relation's key, clear of chance, on at
# least this share of the queries that have the relation (the one evidence rule: mhacli.core.evidence).
NAMED_SHARE = evidence.NAME_SHARE


def _picked_argmax(weights: Array, blocked: Array | None = None) -> Array:
    """(B, h, N): each query's most-weighted key where its weight clears chance (:mod:`evidence`), else −1.

    ``blocked``: the run's key mask (:func:`key_mask`, True = may not look), which sets how many keys each
    query sees and so what chance is; None: every key."""
    looked = weights.argmax(axis=-1)
    top = np.take_along_axis(weights, looked[..., None], axis=-1)[..., 0]
    n = weights.shape[-1]
    seen = np.full(top.shape, n) if blocked is None else np.broadcast_to((~blocked).sum(axis=-1), top.shape)
    return np.where(evidence.picks(top, seen), looked, -1)


def head_relations(weights: Array, blocked: Array | None = None) -> tuple[tuple[str, float], ...]:
    """Each head's relation: the named place its per-query argmax hits most often, and how often.

    ``weights`` is (B, h, N, N); a query counts for a relation only where that place exists.  Below
    :data:`NAMED_SHARE` of the queries the head learned no clear relation (its best share is kept): a head
    whose argmax lands on "itself" 23 % of the time has learned nothing worth a name.
    """
    n = weights.shape[-1]
    looked = _picked_argmax(weights, blocked)  # (B, h, N): the key each query looks at most, if clear of chance
    labels = []
    for i in range(weights.shape[1]):
        best = ("", -1.0)
        for name, key_of in RELATION_KEYS.items():
            keys = np.array([key_of(q) for q in range(n)])  # (N,)
            valid = (keys >= 0) & (keys < n)  # (N,)
            share = float(np.mean(looked[:, i, valid] == keys[valid]))
            if share > best[1]:
                best = (name, share)
        labels.append(best if evidence.named(best[1]) else (NO_RELATION, best[1]))
    return tuple(labels)


def sentence_relations(weights: Array, keys: Array, names: Sequence[str],
                       blocked: Array | None = None) -> tuple[tuple[str, float], ...]:
    """Each head's relation measured against the parse: the relation whose true key its argmax hits most.

    ``weights`` is (B, h, N, N); ``keys`` (R, B, N) the true key of each named relation's queries (-1: none).
    A head below :data:`NAMED_SHARE` on every relation is ``no clear relation`` with its best share.
    """
    looked = _picked_argmax(weights, blocked)  # (B, h, N)
    labels = []
    for i in range(weights.shape[1]):
        shares = [float(np.mean(looked[:, i][keys[r] >= 0] == keys[r][keys[r] >= 0])) for r in range(len(names))]
        best = int(np.argmax(shares))
        labels.append((names[best] if evidence.named(shares[best]) else NO_RELATION, shares[best]))
    return tuple(labels)


@dataclass(frozen=True)
class TrainedModel:
    """A trained layer: its parameters (read-only), the task's vocabulary, and each head's relation.

    A grammar model carries its report card (:mod:`mhacli.core.card`): then each head's relation and label
    come from the card, measured on fresh sentences, and from nothing else.
    """

    config: TrainConfig
    params: dict[str, Array]
    vocabulary: tuple[str, ...]
    targets: tuple[str, ...]
    relations: tuple[tuple[str, float], ...]  # per head: (relation name, share of queries following it)
    card: Card | None = None  # a grammar model's report card: its heads' names follow it
    words: WordMap = WordMap()  # new words, each read as a word of its grammar class (core.words.with_words)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", {k: _frozen(v) for k, v in self.params.items()})
        if self.card is not None:  # one naming rule for every surface: the card's
            object.__setattr__(self, "relations", tuple(self.card.relation(i) for i in range(self.card.heads)))

    @property
    def labels(self) -> tuple[str, ...]:
        """Each head's learned relation as a label: ``previous token (98% of queries)``; from the card when the
        model has one: ``subject (92% trained) — verb → its subject on 1,108 of 1,204 held-out queries …``."""
        if self.card is not None:
            return self.card.labels
        return tuple(f"{name} (under half of any relation's queries: at most {math.floor(100 * share)}%)"
                     if name == NO_RELATION else f"{RELATION_NAMES.get(name, name)} ({share:.0%} of queries)"
                     for name, share in self.relations)

    @property
    def sentences(self) -> bool:
        """True for a model of the grammar: it reads words (capitals folded), an unknown word as one token."""
        return UNKNOWN in self.vocabulary

    def unknown(self, tokens: Sequence[str]) -> tuple[str, ...]:
        """The distinct tokens a grammar model never saw (each read as the one unknown token)."""
        known = set(self.vocabulary) - {UNKNOWN, BOUNDARY}
        return tuple(t for t in dict.fromkeys(tokens) if t.lower() not in known and self.words.class_of(t) is None)

    def stand_ins(self, tokens: Sequence[str]) -> dict[str, str]:
        """Each token outside the trained vocabulary, and the trained word that stands in for it.

        The heads learned relations of position (previous token, first token …), not
        of meaning, so any text can go through them: a word the model never saw is
        read as one of its words, picked by a stable hash (SHA-256, the same on every
        machine), and the relations still show.
        """
        import hashlib

        if self.sentences:  # a word model names what it does not know instead (see :meth:`unknown`)
            return {}
        known = set(self.vocabulary)
        words = [w for w in self.vocabulary if w != BOUNDARY] or list(self.vocabulary)
        out: dict[str, str] = {}
        for t in dict.fromkeys(tokens):
            if t not in known:
                digest = hashlib.sha256(f"mhacli-stand-in\x00{t}".encode("utf-8")).digest()
                out[t] = words[int.from_bytes(digest[:8], "little") % len(words)]
        return out

    def ids(self, tokens: Sequence[str]) -> Array:
        """Token ids in the trained vocabulary (a stand-in for words it never saw; see :meth:`stand_ins`)."""
        index = {t: i for i, t in enumerate(self.vocabulary)}
        if self.sentences:
            unknown = index[UNKNOWN]
            index |= {w: index[s] for w, s in stand_ins(tokens, self.words).items()}  # mapped: its stand-in's row
            return np.array([index.get(t.lower(), unknown) if t.lower() != BOUNDARY else unknown
                             for t in tokens], dtype=np.int64)
        stand = self.stand_ins(tokens)
        return np.array([index[stand.get(t, t)] for t in tokens], dtype=np.int64)

    def positions_for(self, n: int) -> Array:
        """P for n tokens: the sinusoids extend to any length; learned positions exist only as far as trained."""
        table = self.params["positions"]
        if n <= table.shape[0]:
            return table[:n]  # (N, d)
        if self.config.positions == "sinusoidal":
            return positional_encoding(n, self.config.d_model)  # (N, d), the same formula the model trained with
        raise UsageError(f"the trained model learned positions for {table.shape[0]} tokens, the text has {n}; "
                         "give a shorter text (or train with sinusoidal positions).")

    def inputs(self, tokens: Sequence[str]) -> tuple[Array, ...]:
        """E[tokens], P and W_q, W_k, W_v, W_o for a trace of ``tokens`` (see ``trace.run_tokens``)."""
        ids = self.ids(tokens)
        p = self.params
        return (p["embedding"][ids], self.positions_for(len(ids)), p["W_q"], p["W_k"], p["W_v"], p["W_o"])

    def forward(self, ids: Array) -> dict[str, Array]:
        """The model's own forward on id sequences (its heads, mask, padding and values), every intermediate."""
        c = self.config
        return forward(dict(self.params), ids, c.heads, c.causal, get_task(c.task).pad, c.word_values)

    def attention(self, ids: Array) -> Array:
        """Each head's weights on id sequences: (B, N) -> (B, h, N, N)."""
        return self.forward(ids)["weights"]


@dataclass(frozen=True)
class TrainResult:
    """What a training run measured, and the trained model."""

    config: TrainConfig
    loss: float  # held-out cross-entropy at the end
    accuracy: float  # held-out accuracy at the end: share of right answers over the scored positions and targets
    relation_accuracy: tuple[float, ...]  # held-out accuracy of each target relation (model.targets' order)
    history_loss: Array  # (steps,) training-batch loss at each step
    history_accuracy: Array  # (steps,) training-batch accuracy at each step
    parameters: int
    seconds: float  # wall time of the training loop
    snapshot_steps: tuple[int, ...]  # steps after which the snapshots were taken (0 = before training)
    snapshot_accuracy: tuple[float, ...]  # held-out accuracy at each snapshot
    snapshots: Array  # (moments, h, N, N): each head's weights on one held-out sequence
    snapshot_tokens: tuple[str, ...]  # that sequence
    model: TrainedModel

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray) and value.flags.writeable:
                object.__setattr__(self, name, _frozen(value))

    @property
    def heads(self) -> int:
        return self.config.heads


@dataclass(frozen=True)
class HeldOut:
    """The fixed sequences accuracy is measured on: ids, targets, true keys and which answers count."""

    ids: Array  # (H, N)
    targets: Array  # (T, H, N)
    keys: Array  # (T, H, N)
    scored: Array  # (T, H, N)


def _evaluate(params: Params, held: HeldOut,
              config: TrainConfig) -> tuple[float, float, tuple[float, ...], Array]:
    """On the held-out set: the loss, the accuracy over every scored answer, each relation's, and the weights.

    The loss is the one training lowers: over the asked answers only when it trains on those (the readouts'
    words where nothing is asked were never trained, so a loss there would measure nothing learned)."""
    cache = forward(params, held.ids, config.heads, config.causal, get_task(config.task).pad, config.word_values)
    loss, _, correct = cross_entropy(cache["logits"], held.targets)
    if config.scored_loss:
        asked = [cache["logits"][..., t, :][held.scored[t]] for t in range(held.scored.shape[0])]  # T × (M_t, V)
        loss = scored_cross_entropy(asked, held.targets, held.scored)[0]
    per = np.moveaxis(correct, -1, 0)  # (B, N, T) -> (T, B, N)
    accuracy = tuple(float(per[t][held.scored[t]].mean()) for t in range(per.shape[0]))
    return loss, _accuracy(correct, held.scored), accuracy, cache["weights"]


def _accuracy(correct: Array, scored: Array) -> float:
    """Share of right answers among the scored ones: ``correct`` (B, N, T), ``scored`` (T, B, N)."""
    return float(np.moveaxis(correct, -1, 0)[scored].mean())


def snapshot_steps(steps: int, moments: int) -> tuple[int, ...]:
    """``moments`` steps from 0 (untrained) to ``steps``, denser early, where the heads change most."""
    raw = steps * (np.linspace(0.0, 1.0, moments) ** 2)
    return tuple(sorted({int(round(s)) for s in raw} | {0, steps}))


def dropped_heads(rng: np.random.Generator, config: TrainConfig) -> Array:
    """(B, h) 1 = the head speaks: in a share ``head_dropout`` of the sequences one head drawn at random is 0."""
    kept = np.ones((config.batch, config.heads))  # (B, h)
    hit = rng.random(config.batch) < config.head_dropout  # (B,)
    kept[np.nonzero(hit)[0], rng.integers(0, config.heads, size=int(hit.sum()))] = 0.0
    return kept


def learning_rate(config: TrainConfig, step: int) -> float:
    """The step size at ``step`` (1 … steps): lr throughout, or lr·½(1 + cos(π·(step − 1)/steps)) down to near 0."""
    if config.schedule == "cosine":
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * (step - 1) / config.steps))
    return config.lr


def diverged(config: TrainConfig, step: int) -> RunError:
    """The one line for a run whose loss or parameters stopped being finite: nothing is saved or reported."""
    return RunError(f"training diverged at step {step:,} of {config.steps:,}: the loss or the parameters are no "
                    "longer finite numbers; use a smaller {lr:name} (0.001 to 0.05 works). Nothing was written.",
                    lr=config.lr)


def train(config: TrainConfig, on_step: Callable[[int, float, float], None] | None = None) -> TrainResult:
    """Train the layer on ``config.task``; ``on_step(step, loss, accuracy)`` is called after every step.

    Deterministic: one ``np.random.default_rng(config.seed)`` draws the initial
    parameters (whose shapes do not depend on the head count, so every head
    count starts from the same numbers), then the held-out set, then each batch.
    """
    task = config.the_task()
    rng = np.random.default_rng(config.seed)
    params = init_params(config, task, rng)
    ids, targets, keys = task.sample(rng, config.held_out, config.length)  # (H, N), (T, H, N), (T, H, N)
    held = HeldOut(ids, targets, keys, task.scored(keys))
    # The snapshots show the first held-out sequence; a sentence without its padding.
    shown = int(np.sum(ids[0] != task.pad)) if task.pad is not None else config.length
    names = trainable(config)
    adam = Adam(config.lr)
    moments = snapshot_steps(config.steps, config.snapshots)
    snaps: list[Array] = []
    snap_acc: list[float] = []
    history_loss = np.empty(config.steps)
    history_accuracy = np.empty(config.steps)

    def snapshot() -> None:
        _, overall, _, weights = _evaluate(params, held, config)
        snaps.append(weights[0, :, :shown, :shown].copy())  # (h, N, N) on the first held-out sequence
        snap_acc.append(overall)

    start = time.perf_counter()
    # The matrices are small (a batch of 64 × 12 tokens, d = 16): a second BLAS thread only waits
    # for the first. Measured on the 2-core machine with the other core busy, relations task:
    # 1 head 2.5 s with one BLAS thread against 16.9 s with two, 4 heads 3.2 s against 19.4 s.
    # A diverging run overflows on its way to NaN: it is refused below (diverged), not printed as numpy's warnings.
    with single_threaded_blas(), np.errstate(all="ignore"):
        snapshot()
        for step in range(1, config.steps + 1):
            ids, targets, keys = task.sample(rng, config.batch, config.length)  # (B, N), (T, B, N), (T, B, N)
            adam.lr = learning_rate(config, step)
            asked = task.scored(keys)  # (T, B, N)
            kept = dropped_heads(rng, config) if config.head_dropout else None  # (B, h)
            loss, grads, correct = loss_and_grads(params, ids, targets, config.heads, config.causal, task.pad,
                                                  config.word_values, asked if config.scored_loss else None,
                                                  config.head_sparsity, kept, config.head_concentration)
            adam.step(params, grads, names)
            history_loss[step - 1] = loss
            history_accuracy[step - 1] = acc = _accuracy(correct, asked)
            if not math.isfinite(loss):
                raise diverged(config, step)
            if step in moments:
                snapshot()
            if on_step is not None:
                on_step(step, loss, acc)
        seconds = time.perf_counter() - start
        loss, accuracy, per, weights = _evaluate(params, held, config)
    if not (math.isfinite(loss) and all(np.isfinite(p).all() for p in params.values())):
        raise diverged(config, config.steps)  # a model that is not finite is never saved nor reported
    blocked = key_mask(held.ids, config.causal, task.pad)  # what each held-out query could see: chance
    if task.sentences:
        from mhacli.core.grammar import HEAD_RELATIONS, head_keys

        relations = sentence_relations(weights, head_keys(held.ids, task.relation_keys(held.keys)), HEAD_RELATIONS,
                                       blocked)
    else:
        relations = head_relations(weights, blocked)
    model = TrainedModel(config=config, params=params, vocabulary=task.vocabulary, targets=task.targets,
                         relations=relations)
    return TrainResult(
        config=config, loss=loss, accuracy=accuracy, relation_accuracy=per,
        history_loss=history_loss, history_accuracy=history_accuracy, parameters=count_parameters(config),
        seconds=seconds, snapshot_steps=moments, snapshot_accuracy=tuple(snap_acc), snapshots=np.stack(snaps),
        snapshot_tokens=tuple(task.vocabulary[i] for i in held.ids[0][:shown]), model=model,
    )

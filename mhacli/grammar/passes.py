"""The trained layer's two passes: forward, backward, the losses and the head penalties, in numpy.

ids (B, N) → X = E[ids] + P → Q, K, V (B, h, N, d/h) → A (B, h, N, N) → heads → H (B, N, d) → O = H W_oᵀ → O R_tᵀ.
The forward reuses :mod:`mhacli.attention.attention`'s step functions; the backward runs it in reverse, one
function per step, named after it (``softmax_backward``). tests/test_train.py checks every gradient.
"""

from __future__ import annotations

import math

import numpy as np

from mhacli.attention.attention import attend, causal_mask, merge_heads, project, split_heads

Array = np.ndarray
Params = dict[str, Array]

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


def kv_heads(params: Params, heads: int) -> int:
    """g, the key/value heads the h query heads share, read from W_k's shape: (g·d/h, d); g = h is the article's."""
    w_q, w_k = params["W_q"], params["W_k"]
    return heads * w_k.shape[-2] // w_q.shape[-2]


def shared(grouped: Array, heads: int) -> Array:
    """Each query head's keys or values: query head i reads group i // (h/g), (…, g, N, d/h) -> (…, h, N, d/h)."""
    g = grouped.shape[-3]
    return grouped if g == heads else np.repeat(grouped, heads // g, axis=-3)


def shared_backward(d_per_head: Array, kv: int) -> Array:
    """A group's gradient is the sum of its query heads': (…, h, N, d/h) -> (…, g, N, d/h)."""
    h = d_per_head.shape[-3]
    if kv == h:
        return d_per_head
    lead, (n, d_k) = d_per_head.shape[:-3], d_per_head.shape[-2:]
    return d_per_head.reshape(*lead, kv, h // kv, n, d_k).sum(axis=-3)


def value_inputs(params: Params, ids: Array, x: Array, word_values: bool) -> Array:
    """What the values are made from: X = E[ids] + P, or the word embeddings E[ids] alone."""
    return params["embedding"][ids] if word_values else x  # (B, N, d)


def forward(params: Params, ids: Array, heads: int, causal: bool, pad: int | None = None,
            word_values: bool = False, logits: bool = True, kept: Array | None = None) -> dict[str, Array]:
    """The model on a batch of id sequences; every intermediate by name (the backward pass needs them).

    ``logits=False`` stops at O (:func:`scored_readout` reads out only the asked positions); ``kept`` (B, h):
    1 for a head that speaks in that sequence, 0 for one dropped (None: every head)."""
    x = embed_ids(params["embedding"], params["positions"], ids)  # (B, N, d)
    x_v = value_inputs(params, ids, x, word_values)  # (B, N, d): X, or E[ids] alone
    g = kv_heads(params, heads)
    q = split_heads(project(x, params["W_q"]), heads)  # (B, N, d) -> (B, h, N, d/h)
    k = shared(split_heads(project(x, params["W_k"]), g), heads)  # (B, N, g·d/h) -> (B, g, N, d/h) -> (B, h, N, d/h)
    v = shared(split_heads(project(x_v, params["W_v"]), g), heads)  # (B, N, g·d/h) -> (B, h, N, d/h)
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
             word_values: bool = False, d_weights_more: Array | None = None) -> Params:
    """Every parameter's gradient: the forward steps differentiated in reverse order."""
    d_out, d_readout = readout_backward(d_logits, cache["out"], params["readout"])  # (B, N, d), (T, V, d)
    return {**layer_backward(params, cache, ids, d_out, heads, word_values, d_weights_more), "readout": d_readout}


def layer_backward(params: Params, cache: dict[str, Array], ids: Array, d_out: Array, heads: int,
                   word_values: bool = False, d_weights_more: Array | None = None) -> Params:
    """The attention layer's gradients from O's: W_o down to the embedding, in reverse order.

    ``d_weights_more`` (B, h, N, N): a penalty's own gradient on the attention weights, added to theirs."""
    d_concat, d_w_o = output_projection_backward(d_out, cache["concat"], params["W_o"])  # (B, N, d), (d, d)
    d_heads = merge_heads_backward(d_concat, heads)  # (B, h, N, d/h)
    if "kept" in cache:  # a dropped head passed nothing on, so nothing comes back to it
        d_heads = d_heads * cache["kept"][:, :, None, None]  # (B, h, N, d/h)
    d_weights, d_v = weigh_values_backward(d_heads, cache["weights"], cache["v"])  # (B, h, N, N), (B, h, N, d/h)
    if d_weights_more is not None:
        d_weights = d_weights + d_weights_more  # (B, h, N, N)
    d_scores = softmax_backward(d_weights, cache["weights"])  # (B, h, N, N)
    d_q, d_k = attention_scores_backward(d_scores, cache["q"], cache["k"])  # 2 × (B, h, N, d/h)
    g = kv_heads(params, heads)  # shared keys and values: each group collects its query heads' gradients
    d_k, d_v = shared_backward(d_k, g), shared_backward(d_v, g)  # 2 × (B, g, N, d/h)
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

    A sum of norms drives whole blocks to zero, so each readout learns to read the fewest heads.
    """
    p = head_readouts(w_r, w_o, heads)  # (T, V, h, d/h)
    norm = np.sqrt((p * p).sum(axis=(1, 3), keepdims=True))  # (T, 1, h, 1)
    g = strength * p / np.maximum(norm, 1e-12)  # (T, V, h, d/h): ∂λ||P||/∂P, 0 for a block that is 0
    d_w_r, d_w_o = _through_blocks(g, w_r, w_o)  # (T, V, d), (d, d)
    return strength * float(norm.sum()), d_w_r, d_w_o


def head_concentration(w_r: Array, w_o: Array, heads: int, strength: float) -> tuple[Array, Array, Array]:
    """The penalty λ Σ_t ‖n_t‖₁ / ‖n_t‖₂ over n_ti = ||R_t W_o^i||_F, and its gradients for R and W_o.

    1 when readout t reads one head, √h when it reads all alike, whatever its size: few heads without small logits.
    One head has nothing to choose: the penalty is λ·T and its gradient exactly 0. One model, R (T, V, d) and W_o
    (d, d), or a stack of them (M, …) as the stacked step has: the penalty has the leading shape, () or (M,).
    """
    *lead, t, v, d = w_r.shape
    if heads == 1:
        return np.full(lead, strength * t), np.zeros_like(w_r), np.zeros_like(w_o)
    blocks = w_r @ w_o[..., None, :, :]  # (…, T, V, d) @ (…, 1, d, d) -> (…, T, V, d): R_t W_o, each head's block
    split = blocks.reshape(*lead, t, v, heads, d // heads)  # (…, T, V, h, d/h)
    # Σ over the words first (a reduction over the outer axis, fast), then over each head's d/h columns.
    norm = np.sqrt((blocks * blocks).sum(axis=-2).reshape(*lead, t, heads, d // heads).sum(axis=-1))  # (…, T, h)
    l1 = norm.sum(axis=-1, keepdims=True)  # (…, T, 1)
    l2 = np.sqrt((norm * norm).sum(axis=-1, keepdims=True))  # (…, T, 1)
    d_norm = strength * (1.0 / l2 - l1 * norm / l2 ** 3)  # (…, T, h): ∂(λ l1/l2)/∂n_ti
    g = (split * (d_norm / np.maximum(norm, 1e-12))[..., None, :, None]).reshape(*lead, t, v, d)  # (…, T, V, d)
    d_w_r = g @ np.swapaxes(w_o, -1, -2)[..., None, :, :]  # (…, T, V, d) @ (…, 1, d, d) -> (…, T, V, d)
    d_w_o = np.swapaxes(w_r.reshape(*lead, t * v, d), -1, -2) @ g.reshape(*lead, t * v, d)  # (…, d, d)
    return strength * (l1 / l2).sum(axis=(-2, -1)), d_w_r, d_w_o


def head_overlap(weights: Array, strength: float, queries: Array | None = None) -> tuple[float, Array]:
    """λ × the mean over query rows of Σ_{i≠j} ⟨A_i[q], A_j[q]⟩: two heads that look at one key from one query
    pay for it (disagreement regularisation, Li et al. 2018), so a relation is found by one head, not two.

    ``queries`` (B, N): the rows that count, a sentence's own words (None: every row). The padding after a
    sentence's end is no query: counting it would make the penalty depend on how far a batch is padded.
    With S = Σ_i A_i the sum is ⟨S, S⟩ − Σ_i ⟨A_i, A_i⟩, whose gradient on A_i is 2 (S − A_i)."""
    b, _, n, _ = weights.shape
    total = weights.sum(axis=1, keepdims=True)  # (B, 1, N, N)
    if queries is None:
        rows = b * n
        value = float(((total * total).sum() - (weights * weights).sum()) / rows)
        return strength * value, (2.0 * strength / rows) * (total - weights)  # (B, h, N, N)
    counted = queries[:, None, :, None]  # (B, 1, N, 1)
    rows = max(int(queries.sum()), 1)
    value = float((((total * total).sum(axis=1) - (weights * weights).sum(axis=1)) * counted[:, 0]).sum() / rows)
    return strength * value, (2.0 * strength / rows) * (total - weights) * counted  # (B, h, N, N)


def loss_and_grads(params: Params, ids: Array, targets: Array, heads: int, causal: bool, pad: int | None = None,
                   word_values: bool = False, scored: Array | None = None,
                   sparsity: float = 0.0, kept: Array | None = None,
                   concentration: float = 0.0, overlap: float = 0.0) -> tuple[float, Params, Array]:
    """One forward and backward pass: the loss, every gradient, and which predictions were right.

    ``scored`` (T, B, N): the answers the loss is over (None: all); ``kept`` (B, h): heads that speak; ``sparsity``,
    ``concentration``, ``overlap``: the λ of :func:`head_sparsity`, :func:`head_concentration`, :func:`head_overlap`.
    """
    cache = forward(params, ids, heads, causal, pad, word_values, logits=scored is None, kept=kept)
    queries = None if pad is None else ids != pad  # (B, N): a sentence's own words, not its padding
    penalty, d_weights = head_overlap(cache["weights"], overlap, queries) if overlap else (0.0, None)
    if scored is None:
        loss, d_logits, correct = cross_entropy(cache["logits"], targets)
        grads = backward(params, cache, ids, d_logits, heads, word_values, d_weights)
    else:
        logits = scored_readout(cache["out"], params["readout"], scored)  # T × (M_t, V)
        loss, d_scored, correct = scored_cross_entropy(logits, targets, scored)
        d_out, d_readout = scored_readout_backward(d_scored, cache["out"], params["readout"], scored)
        grads = {**layer_backward(params, cache, ids, d_out, heads, word_values, d_weights), "readout": d_readout}
    loss += penalty
    if sparsity:
        penalty, d_w_r, d_w_o = head_sparsity(params["readout"], params["W_o"], heads, sparsity)
        loss += penalty
        grads["readout"] = grads["readout"] + d_w_r
        grads["W_o"] = grads["W_o"] + d_w_o
    if concentration:
        value, d_w_r, d_w_o = head_concentration(params["readout"], params["W_o"], heads, concentration)
        loss += float(value)
        grads["readout"] = grads["readout"] + d_w_r
        grads["W_o"] = grads["W_o"] + d_w_o
    return loss, grads, correct

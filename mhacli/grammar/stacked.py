"""One training step for a stack of models: the passes of :mod:`mhacli.grammar.passes` with a leading model axis.

The seeds and head counts of one ``mha train`` stack as (M, …) arrays, so numpy pays its per-call cost once per
step, not once per model; each model keeps its own batch, so its numbers are those it gets trained alone.
Shapes: M models, B sequences of N tokens, h heads of d/h, T readouts over V words, R asked rows per readout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mhacli.grammar.passes import (Array, Params, head_concentration, head_sparsity, kv_heads, shared,
                                   shared_backward)


@dataclass(frozen=True)
class Batch:
    """What one step of every model reads: ids, the asked rows of each readout and their answers."""

    ids: Array  # (M, B, N)
    rows: Array  # (M, T, R) position b·N + n of each asked answer; 0 on spare rows (a model that asks fewer)
    labels: Array  # (M, T, R) the right word of each asked answer (0 on spare rows)
    asked: Array  # (M, T, R) True on real rows: the answers the loss is over
    count: Array  # (M,) asked answers per model (at least 1): the loss is a mean over them
    scored: Array  # (M, T, R) the answers that count for accuracy (the asked ones, or the grammar's among all)
    scored_count: Array  # (M,) how many (at least 1)
    kept: Array | None = None  # (M, B, h) 1 = the head speaks (head dropout), None: every head


def stack_batch(ids: Array, targets: Array, scored: Array, scored_loss: bool, kept: Array | None = None) -> Batch:
    """One :class:`Batch` from every model's ids (M, B, N), targets (M, T, B, N) and scored answers (M, T, B, N):
    the loss over the scored answers (``scored_loss``) or over every answer, the accuracy over the scored ones."""
    m, t, b, n = scored.shape
    flat = scored.reshape(m, t, b * n) if scored_loss else np.ones((m, t, b * n), dtype=bool)  # (M, T, B·N)
    per = flat.sum(axis=-1)  # (M, T): asked rows of each model and readout
    width = max(int(per.max()), 1)  # R: the most asked rows of any model and readout
    # Each readout's asked positions, in order, first: the rows a model alone would gather. np.nonzero lists them
    # model by model, readout by readout; each one's column is its place after its readout's first.
    at_m, at_t, at_row = np.nonzero(flat)  # (A,) each
    first = np.concatenate(([0], np.cumsum(per.reshape(-1))[:-1]))  # (M·T,): where each readout's run starts
    column = np.arange(len(at_row)) - first[at_m * t + at_t]  # (A,)
    rows = np.zeros((m, t, width), dtype=np.int64)  # (M, T, R): a spare row reads position 0, never counted
    rows[at_m, at_t, column] = at_row
    asked = np.zeros((m, t, width), dtype=bool)  # (M, T, R)
    asked[at_m, at_t, column] = True
    labels = np.zeros((m, t, width), dtype=targets.dtype)  # (M, T, R): 0 on spare rows
    labels[at_m, at_t, column] = targets.reshape(m, t, b * n)[at_m, at_t, at_row]
    counted = np.zeros((m, t, width), dtype=bool)  # (M, T, R)
    counted[at_m, at_t, column] = scored.reshape(m, t, b * n)[at_m, at_t, at_row]
    count = np.maximum(per.sum(axis=1), 1)  # (M,)
    return Batch(ids, rows, labels, asked, count, counted, np.maximum(scored.sum(axis=(1, 2, 3)), 1), kept)


def _t(a: Array) -> Array:
    return np.swapaxes(a, -1, -2)


def step(params: Params, batch: Batch, heads: int, causal: bool, pad: int | None, word_values: bool,
         sparsity: float = 0.0, concentration: float = 0.0,
         overlap: float = 0.0) -> tuple[Array, Params, Array]:
    """Every model's loss (M,), gradients (M, …) and right answers (M,) on its own batch: forward, then backward.

    The loss is the mean cross-entropy over each model's asked answers (every answer, for a task that scores
    every position) plus the penalties of :mod:`mhacli.grammar.passes`."""
    ids = batch.ids
    m, b, n = ids.shape
    e, p = params["embedding"], params["positions"]  # (M, V, d), (M, N, d)
    n_vocab, d = e.shape[1:]
    d_k = d // heads
    g = kv_heads(params, heads)  # key/value heads: g = h is the article's layer, g < h shared keys and values
    d_kv = g * d_k  # the width of K and V
    # ---- forward
    cells = ids + (np.arange(m) * n_vocab)[:, None, None]  # (M, B, N): row of the stacked table E
    words = e.reshape(m * n_vocab, d)[cells]  # (M, B, N, d): E[ids]
    x = words + p[:, None, :n]  # (M, B, N, d)
    x2 = x.reshape(m, b * n, d)  # (M, B·N, d)
    xv2 = words.reshape(m, b * n, d) if word_values else x2  # (M, B·N, d): what the values are made of
    w_qk = np.concatenate([params["W_q"], params["W_k"]], axis=1)  # (M, d + g·d/h, d): Q and K in one product
    qk = x2 @ _t(w_qk)  # (M, B·N, d) @ (M, d, d + g·d/h) -> (M, B·N, d + g·d/h)
    v2 = xv2 @ _t(params["W_v"])  # (M, B·N, d) @ (M, d, g·d/h) -> (M, B·N, g·d/h)
    q = qk[..., :d].reshape(m, b, n, heads, d_k).transpose(0, 1, 3, 2, 4)  # (M, B, h, N, d/h)
    # Query head i reads key/value group i // (h/g) (passes.shared): (M, B, g, N, d/h) -> (M, B, h, N, d/h).
    k = shared(qk[..., d:].reshape(m, b, n, g, d_k).transpose(0, 1, 3, 2, 4), heads)  # (M, B, h, N, d/h)
    v = shared(v2.reshape(m, b, n, g, d_k).transpose(0, 1, 3, 2, 4), heads)  # (M, B, h, N, d/h)
    scale = 1.0 / math.sqrt(d_k)
    qk[..., :d] *= scale  # Q/√(d/h) once, on the (B·N, d) queries rather than the (h, N, N) scores
    scores = q @ _t(k)  # (M, B, h, N, d/h) @ (M, B, h, d/h, N) -> (M, B, h, N, N)
    blocked = np.zeros((m, b, 1, 1, n), dtype=bool) if pad is None else (ids == pad)[:, :, None, None, :]
    if causal:
        blocked = blocked | (np.arange(n)[None, :] > np.arange(n)[:, None])  # (M, B, 1, N, N)
    if pad is not None or causal:
        np.copyto(scores, -np.inf, where=blocked)  # masked keys get exactly zero weight
    # Stable softmax: every row sees at least its first token, so no row is empty. Each sentence's head takes off
    # the largest of its N × N scores (one reduction over N² numbers; a max over each row is a reduction over N,
    # several times slower here): exp() ≤ 1 and the weights are the same up to rounding. The rows whose own
    # scores all lie so far below that their sum nears underflow (a trained head's sharp rows) take their own max.
    weights = scores - scores.reshape(m, b, heads, n * n).max(axis=-1)[..., None, None]  # (M, B, h, N, N)
    np.exp(weights, out=weights)
    total = weights @ np.ones((n, 1), dtype=weights.dtype)  # (M, B, h, N, 1): the rows' sums, as one product
    low = np.nonzero(total[..., 0] < math.sqrt(np.finfo(weights.dtype).tiny))  # the rows near underflow
    if len(low[0]):
        rows = scores[low]  # (K, N)
        rows = np.exp(rows - rows.max(axis=-1, keepdims=True))  # (K, N)
        weights[low] = rows
        total[low] = rows.sum(axis=-1, keepdims=True)
    weights *= 1.0 / total
    heads_out = weights @ v  # (M, B, h, N, N) @ (M, B, h, N, d/h) -> (M, B, h, N, d/h)
    if batch.kept is not None:
        heads_out = heads_out * batch.kept[..., None, None]  # a dropped head says nothing
    concat = heads_out.transpose(0, 1, 3, 2, 4).reshape(m, b * n, d)  # (M, B, h, N, d/h) -> (M, B·N, d)
    out = concat @ _t(params["W_o"])  # (M, B·N, d) @ (M, d, d) -> (M, B·N, d)
    t_count, r = batch.rows.shape[1:]
    # Plain indexing with each asked row's number in the stacked (M·B·N, d) O: take_along_axis costs more here.
    flat_rows = (batch.rows + (np.arange(m) * (b * n))[:, None, None]).reshape(-1)  # (M·T·R,)
    picked = out.reshape(m * b * n, d)[flat_rows].reshape(m, t_count, r, d)  # (M, T, R, d)
    w_r = params["readout"]  # (M, T, V, d)
    logits = picked @ _t(w_r)  # (M, T, R, d) @ (M, T, d, V) -> (M, T, R, V)
    right = (logits.argmax(axis=-1) == batch.labels) & batch.scored  # (M, T, R)
    prob = logits - logits.max(axis=-1, keepdims=True)  # (M, T, R, V)
    flat_prob = prob.reshape(-1, prob.shape[-1])  # (M·T·R, V), a view
    answer = (np.arange(len(flat_prob)), batch.labels.reshape(-1))  # each row's right word
    chosen = flat_prob[answer].reshape(m, t_count, r)  # (M, T, R)
    np.exp(prob, out=prob)
    total = prob.sum(axis=-1)  # (M, T, R)
    # Summed in float64: a stack pads R to its models' most asked rows, and a float32 sum would group the extra
    # zeros otherwise than the model alone does; in float64 these terms' sum is (almost always) not rounded at all.
    losses = np.where(batch.asked, np.log(total) - chosen, 0.0)  # (M, T, R)
    loss = losses.sum(axis=(1, 2), dtype=np.float64) / batch.count  # (M,)
    # ---- backward, in reverse order
    prob *= (batch.asked / batch.count[:, None, None] / total)[..., None]  # (M, T, R, V): softmax / count
    flat_prob[answer] -= (batch.asked / batch.count[:, None, None]).reshape(-1)  # minus one-hot / count
    d_logits = prob  # (M, T, R, V): zero on spare rows
    d_w_r = _t(d_logits) @ picked  # (M, T, V, R) @ (M, T, R, d) -> (M, T, V, d)
    d_picked = d_logits @ w_r  # (M, T, R, V) @ (M, T, V, d) -> (M, T, R, d): zero on spare rows
    # Row b·N + n of O collects every readout's gradient there (a verb is asked its subject and its object):
    # one bincount over (row, column) cells sums them, duplicates included.
    into = (flat_rows[:, None] * d + np.arange(d)).reshape(-1)  # (M·T·R·d,)
    d_out = np.bincount(into, weights=d_picked.reshape(-1), minlength=m * b * n * d)  # (M·B·N·d,)
    d_out = d_out.reshape(m, b * n, d).astype(out.dtype, copy=False)  # (M, B·N, d)
    d_w_o = _t(d_out) @ concat  # (M, d, B·N) @ (M, B·N, d) -> (M, d, d)
    d_concat = d_out @ params["W_o"]  # (M, B·N, d) @ (M, d, d) -> (M, B·N, d)
    d_heads = d_concat.reshape(m, b, n, heads, d_k).transpose(0, 1, 3, 2, 4)  # (M, B, h, N, d/h)
    if batch.kept is not None:
        d_heads = d_heads * batch.kept[..., None, None]
    d_weights = d_heads @ _t(v)  # (M, B, h, N, d/h) @ (M, B, h, d/h, N) -> (M, B, h, N, N)
    d_v = _t(weights) @ d_heads  # (M, B, h, N, N) @ (M, B, h, N, d/h) -> (M, B, h, N, d/h)
    if overlap:  # passes.head_overlap on every model: λ mean_q Σ_{i≠j} ⟨A_i[q], A_j[q]⟩, gradient 2λ(S − A_i)
        together = weights.sum(axis=2, keepdims=True)  # (M, B, 1, N, N)
        spread = together - weights  # (M, B, h, N, N): S − A_i
        # Σ_i ⟨S − A_i, A_i⟩ = ⟨S, S⟩ − Σ_i ⟨A_i, A_i⟩, the sum over pairs, in one pass.
        if pad is None:  # every row is a query
            pairs = np.einsum("ij,ij->i", spread.reshape(m, -1), weights.reshape(m, -1))  # (M,)
            rows = np.full(m, float(b * n))  # (M,)
            spread *= (2.0 * overlap / rows).astype(weights.dtype)[:, None, None, None, None]
        else:  # the rows of a sentence's own words: the padding after its end is no query
            real = ids != pad  # (M, B, N)
            per_row = np.einsum("mbiqk,mbiqk->mbq", spread, weights)  # (M, B, N)
            pairs = np.einsum("mbq,mbq->m", per_row, real.astype(per_row.dtype))  # (M,)
            rows = np.maximum(real.sum(axis=(1, 2)), 1).astype(np.float64)  # (M,)
            spread *= ((2.0 * overlap / rows)[:, None, None] * real).astype(weights.dtype)[:, :, None, :, None]
        loss = loss + overlap * pairs / rows
        d_weights += spread  # 2λ (S − A_i) / rows on the counted rows, 0 on padding rows
    # Σ_k dA_k A_k of each row by einsum: a product and a short sum over the last axis take several times longer.
    d_scores = weights * (d_weights - np.einsum("...qk,...qk->...q", d_weights, weights)[..., None])  # (M, B, h, N, N)
    # S = (Q/√(d/h)) Kᵀ with q holding Q/√(d/h): dQ = (dS K)/√(d/h), dK = dSᵀ (Q/√(d/h)).
    if g == heads:
        d_qk = np.empty((m, b, n, 2, heads, d_k), dtype=out.dtype)  # dQ beside dK, merged straight into (B·N, 2d)
        np.matmul(d_scores, k, out=d_qk[:, :, :, 0].transpose(0, 1, 3, 2, 4))  # (M, B, h, N, N) @ (…, N, d/h)
        np.matmul(_t(d_scores), q, out=d_qk[:, :, :, 1].transpose(0, 1, 3, 2, 4))  # (M, B, h, N, N) @ (…, N, d/h)
        d_qk = d_qk.reshape(m, b * n, 2 * d)  # (M, B, N, 2, h, d/h) -> (M, B·N, 2d)
    else:  # each group's dK is the sum of its query heads' (passes.shared_backward), and so is its dV
        d_k_groups = shared_backward(_t(d_scores) @ q, g)  # (M, B, h, N, d/h) -> (M, B, g, N, d/h)
        d_qk = np.concatenate([(d_scores @ k).transpose(0, 1, 3, 2, 4).reshape(m, b * n, d),
                               d_k_groups.transpose(0, 1, 3, 2, 4).reshape(m, b * n, d_kv)], axis=-1)
        d_v = shared_backward(d_v, g)  # (M, B, g, N, d/h)
    d_qk[..., :d] *= scale
    d_v2 = d_v.transpose(0, 1, 3, 2, 4).reshape(m, b * n, d_kv)  # (M, B, g, N, d/h) -> (M, B·N, g·d/h)
    d_w_qk = _t(d_qk) @ x2  # (M, d + g·d/h, B·N) @ (M, B·N, d) -> (M, d + g·d/h, d)
    d_w_v = _t(d_v2) @ xv2  # (M, g·d/h, B·N) @ (M, B·N, d) -> (M, g·d/h, d)
    d_x = d_qk @ w_qk  # (M, B·N, d + g·d/h) @ (M, d + g·d/h, d) -> (M, B·N, d): X feeds Q and K, their gradients add
    d_xv = d_v2 @ params["W_v"]  # (M, B·N, g·d/h) @ (M, g·d/h, d) -> (M, B·N, d)
    d_words = d_x + d_xv  # (M, B·N, d): E[ids] is read by X, and by the values (as X or alone)
    if not word_values:
        d_x = d_words  # the values read X: a third use of it
    # Row ids[m, b, n] of the stacked E collects d_words[m, b·N + n]: the rows in order of their word, each
    # word's run summed by one reduceat (a bincount over every (row, column) cell takes several times longer).
    flat_cells = cells.reshape(-1)  # (M·B·N,)
    by_word = np.argsort(flat_cells, kind="stable")  # (M·B·N,)
    sorted_cells = flat_cells[by_word]
    starts = np.flatnonzero(np.concatenate(([True], sorted_cells[1:] != sorted_cells[:-1])))  # (U,): each word's run
    d_e = np.zeros((m * n_vocab, d), dtype=e.dtype)  # (M·V, d)
    d_e[sorted_cells[starts]] = np.add.reduceat(d_words.reshape(-1, d)[by_word], starts, axis=0)  # (U, d)
    d_e = d_e.reshape(m, n_vocab, d)
    d_p = np.zeros_like(p)  # (M, N_table, d)
    d_p[:, :n] = d_x.reshape(m, b, n, d).sum(axis=1)  # (M, B, N, d) -> (M, N, d)
    grads = {"embedding": d_e, "positions": d_p, "W_q": d_w_qk[:, :d], "W_k": d_w_qk[:, d:], "W_v": d_w_v,
             "W_o": d_w_o, "readout": d_w_r}
    if sparsity:  # small (T, V, d) matrices: model by model
        for i in range(m):
            value, g_r, g_o = head_sparsity(w_r[i], params["W_o"][i], heads, sparsity)
            loss[i] += value
            grads["readout"][i] += g_r
            grads["W_o"][i] += g_o
    if concentration:  # on every model at once (one head: λ·T, gradient 0)
        values, g_r, g_o = head_concentration(w_r, params["W_o"], heads, concentration)
        loss = loss + values
        grads["readout"] += g_r
        grads["W_o"] += g_o
    return loss, grads, right.sum(axis=(1, 2)) / batch.scored_count


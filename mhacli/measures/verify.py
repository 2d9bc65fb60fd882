"""Recompute a saved trace independently and report the largest difference of each array.

The reference is deliberately plain: one head at a time, one query row at a
time, sharing no code with :mod:`mhacli.attention.trace`.  When PyTorch happens to be
installed, its ``multi_head_attention_forward`` is asked too (never required).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from mhacli.attention.trace import Trace

TOLERANCE = {"float64": 1e-9, "float32": 1e-4}


@dataclass(frozen=True)
class Check:
    """One compared array: who computed the reference, and the largest |difference|."""

    reference: str
    array: str
    max_diff: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance


def reference_loop(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray,
                   w_o: np.ndarray, heads: int, causal: bool,
                   biases: dict[str, np.ndarray] | None = None,
                   x_v: np.ndarray | None = None, kv_heads: int | None = None,
                   rope_theta: float | None = None) -> dict[str, np.ndarray]:
    """Multi-head attention the slow, obvious way, in float64 (``biases``: b_q, b_k, b_v, b_o, each optional;
    ``x_v``: the values' input when it is not x; ``kv_heads``: g key/value groups, K and V one per group;
    ``rope_theta``: rotary positions, Q and K turned row by row)."""
    x = x.astype(np.float64)
    x_v = x if x_v is None else x_v.astype(np.float64)
    n, d = x.shape
    d_k = d // heads
    zero = np.zeros(d)
    b = {name: np.asarray((biases or {}).get(name, zero), dtype=np.float64) for name in ("b_q", "b_k", "b_v", "b_o")}
    out: dict[str, list] = {k: [] for k in ("Q", "K", "V", "scores", "weights", "heads")}
    g = heads if kv_heads is None else kv_heads
    for i in range(heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        j = i * g // heads  # the key/value group head i reads
        kv = slice(j * d_k, (j + 1) * d_k)
        q = x @ w_q[rows].astype(np.float64).T + b["b_q"][rows]  # the article's X W_q^i (+ its bias)
        k = x @ w_k[kv].astype(np.float64).T + b["b_k"][kv]
        v = x_v @ w_v[kv].astype(np.float64).T + b["b_v"][kv]
        if rope_theta is not None:
            q, k = _turned(q, rope_theta), _turned(k, rope_theta)
        s = np.empty((n, n))
        a = np.zeros((n, n))
        for r in range(n):
            # One query row at a time, with the article's formulas written out; numpy only
            # does each row's dot products, so a 5,000-token trace verifies in seconds.
            visible = r + 1 if causal else n
            s[r] = -math.inf
            s[r, :visible] = (k[:visible] @ q[r]) / math.sqrt(d_k)
            e = np.exp(s[r, :visible] - s[r, :visible].max())
            a[r, :visible] = e / e.sum()
        for name, value in zip(("Q", "K", "V", "scores", "weights", "heads"), (q, k, v, s, a, a @ v)):
            out[name].append(value)
    result = {name: np.stack(values) for name, values in out.items()}
    result["K"], result["V"] = result["K"][:: heads // g], result["V"][:: heads // g]  # one per group
    result["concat"] = np.concatenate(out["heads"], axis=1)
    result["output"] = result["concat"] @ w_o.astype(np.float64).T + b["b_o"]
    return result


def _turned(m: np.ndarray, theta: float) -> np.ndarray:
    """Row p of ``m`` (N, d_k) with each pair of dims (j, j + d_k/2) turned by the angle p·θ^(−2j/d_k)."""
    half = m.shape[1] // 2
    out = m.copy()
    for p in range(m.shape[0]):
        for j in range(half):
            angle = p * theta ** (-2 * j / m.shape[1])
            c, s = math.cos(angle), math.sin(angle)
            out[p, j], out[p, j + half] = m[p, j] * c - m[p, j + half] * s, m[p, j + half] * c + m[p, j] * s
    return out


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):  # −∞ − (−∞) is NaN; those cells are equal, set to 0 below
        diff = np.where(same_inf, 0.0, np.abs(a - b))
    return float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0))


def torch_reference(trace: Trace, torch: ModuleType) -> dict[str, np.ndarray]:
    """PyTorch's own multi-head attention on the same X and weights (``torch`` imported by the caller, guarded)."""
    F = torch.nn.functional
    d, h, n = trace.d_model, trace.num_heads, trace.n_tokens
    x = torch.from_numpy(np.array(trace.X, dtype=np.float64))[:, None, :]  # (N, 1, d): (L, batch, E)
    x_v = torch.from_numpy(np.array(trace.X_v, dtype=np.float64))[:, None, :]  # (N, 1, d): the values' input
    per = h // trace.kv_heads  # PyTorch's module has no shared keys: each group's rows written out once per head
    w_k, w_v = (np.repeat(np.asarray(w).reshape(trace.kv_heads, -1, d), per, axis=0).reshape(d, d)
                for w in (trace.W_k, trace.W_v))  # (g·d/h, d) -> (d, d)
    in_proj = torch.from_numpy(np.concatenate([trace.W_q, w_k, w_v]).astype(np.float64))
    b = {k: np.repeat(np.asarray(v).reshape(trace.kv_heads, -1), per, axis=0).ravel() if k in ("b_k", "b_v") else v
         for k, v in trace.biases.items()}
    in_bias = out_bias = None
    if b:
        zero = np.zeros(d)
        in_bias = torch.from_numpy(np.concatenate([np.asarray(b.get(k, zero), dtype=np.float64)
                                                   for k in ("b_q", "b_k", "b_v")]))
        out_bias = torch.from_numpy(np.array(b.get("b_o", zero), dtype=np.float64))
    mask = torch.from_numpy(np.triu(np.ones((n, n), dtype=bool), 1)) if trace.config.causal else None
    out, weights = F.multi_head_attention_forward(
        x, x, x_v, d, h, in_proj, in_bias, None, None, False, 0.0,
        torch.from_numpy(np.array(trace.W_o, dtype=np.float64)), out_bias,
        training=False, need_weights=True, attn_mask=mask, average_attn_weights=False,
    )
    assert weights is not None  # need_weights=True
    return {"weights": weights[0].numpy(), "output": out[:, 0, :].numpy()}


def verify(trace: Trace, torch: ModuleType | None = None) -> list[Check]:
    """Every array of the trace against the plain loop, and against PyTorch when ``torch`` is given.

    ``torch``: the module, imported under :func:`mhacli.models.torch_import.torch_or_none`'s guard (the host's
    memory limit decides whether it can load; the core never asks)."""
    tol = TOLERANCE[trace.config.dtype]
    ref = reference_loop(trace.X, trace.W_q, trace.W_k, trace.W_v, trace.W_o,
                         trace.num_heads, trace.config.causal, trace.biases, trace.X_v, trace.config.kv_heads,
                         trace.rope_theta)
    checks = [Check("per-head loop", name, _max_diff(getattr(trace, name), value), tol)
              for name, value in ref.items()]
    if torch is not None and trace.rope_theta is None:  # PyTorch's module has no rotary positions to compare
        checks += [Check("PyTorch", name, _max_diff(getattr(trace, name), value), tol)
                   for name, value in torch_reference(trace, torch).items()]
    return checks

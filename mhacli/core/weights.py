"""Your own weights: a PyTorch ``nn.MultiheadAttention``'s parameters, checked once.

PyTorch keeps the three input projections stacked in one matrix,
``in_proj_weight`` (3d × d: W_q, then W_k, then W_v, each in the ``x Wᵀ``
layout mhacli uses), their biases in ``in_proj_bias`` (3d), and the output
projection in ``out_proj.weight`` (d × d) and ``out_proj.bias`` (d).  The
number of heads is not stored in a state dict: the caller says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from mhacli.core.errors import UsageError

Array = np.ndarray

REQUIRED = ("in_proj_weight", "out_proj.weight")
OPTIONAL = ("in_proj_bias", "out_proj.bias")
# Names a state dict of a model holding the module may carry in front of these (e.g. "attn.in_proj_weight").
KNOWN = REQUIRED + OPTIONAL


@dataclass(frozen=True)
class AttentionWeights:
    """W_q, W_k, W_v, W_o (d × d, PyTorch layout) and their biases (d,), or None where the module had none."""

    w_q: Array
    w_k: Array
    w_v: Array
    w_o: Array
    b_q: Array | None = None
    b_k: Array | None = None
    b_v: Array | None = None
    b_o: Array | None = None

    @property
    def d_model(self) -> int:
        return int(self.w_q.shape[0])

    @property
    def has_biases(self) -> bool:
        return any(b is not None for b in (self.b_q, self.b_k, self.b_v, self.b_o))

    def biases(self) -> dict[str, Array]:
        """The biases present, by the name :func:`mhacli.core.attention.multi_head_attention` takes."""
        named = {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}
        return {k: v for k, v in named.items() if v is not None}

    def astype(self, dtype: Any) -> "AttentionWeights":
        def cast(a: Array | None) -> Array | None:
            return None if a is None else np.asarray(a, dtype=dtype)

        return AttentionWeights(*(cast(getattr(self, f)) for f in
                                  ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")))  # type: ignore[arg-type]


def _strip_prefix(state: Mapping[str, Any]) -> dict[str, Any]:
    """Accept keys with a module prefix ("attn.in_proj_weight") when exactly one such module is inside."""
    found: dict[str, Any] = {}
    for key, value in state.items():
        for name in KNOWN:
            if key == name or key.endswith("." + name):
                if name in found:
                    raise UsageError(f"the weights hold more than one {name!r} (several attention modules?); "
                                     "save the state dict of one nn.MultiheadAttention.")
                found[name] = value
    return found


def _array(name: str, value: Any) -> Array:
    try:
        a = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{name!r} in the weights is not an array of numbers ({exc}).") from None
    if a.dtype.kind not in "fiu":
        raise UsageError(f"{name!r} in the weights is not an array of numbers (dtype {a.dtype}).")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise UsageError(f"{name!r} in the weights holds infinite or NaN values.")
    return a


def from_state_dict(state: Mapping[str, Any]) -> AttentionWeights:
    """Check an ``nn.MultiheadAttention`` state dict (numpy arrays or tensors) and split it into W_q … b_o."""
    found = _strip_prefix(state)
    missing = [k for k in REQUIRED if k not in found]
    if missing:
        keys = ", ".join(sorted(map(str, state))[:8]) or "none"
        raise UsageError(f"the weights have no {' or '.join(repr(m) for m in missing)}; expected an "
                         f"nn.MultiheadAttention state dict (in_proj_weight, in_proj_bias, out_proj.weight, "
                         f"out_proj.bias); found keys: {keys}.")
    w_in, w_o = _array("in_proj_weight", found["in_proj_weight"]), _array("out_proj.weight", found["out_proj.weight"])
    if w_o.ndim != 2 or w_o.shape[0] != w_o.shape[1] or w_o.shape[0] < 1:
        raise UsageError(f"'out_proj.weight' must be d × d, got shape {w_o.shape}.")
    d = w_o.shape[0]
    if w_in.shape != (3 * d, d):
        raise UsageError(f"'in_proj_weight' must be 3d × d = {3 * d} × {d} for out_proj.weight's d = {d}, "
                         f"got shape {w_in.shape}.")
    b_in = b_o = None
    if found.get("in_proj_bias") is not None:
        b_in = _array("in_proj_bias", found["in_proj_bias"])
        if b_in.shape != (3 * d,):
            raise UsageError(f"'in_proj_bias' must have 3d = {3 * d} numbers, got shape {b_in.shape}.")
    if found.get("out_proj.bias") is not None:
        b_o = _array("out_proj.bias", found["out_proj.bias"])
        if b_o.shape != (d,):
            raise UsageError(f"'out_proj.bias' must have d = {d} numbers, got shape {b_o.shape}.")
    w_q, w_k, w_v = w_in[:d], w_in[d : 2 * d], w_in[2 * d :]  # (3d, d) -> 3 × (d, d), PyTorch's order
    b_q, b_k, b_v = (None, None, None) if b_in is None else (b_in[:d], b_in[d : 2 * d], b_in[2 * d :])
    return AttentionWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)


def to_state_dict(weights: AttentionWeights) -> dict[str, Array]:
    """The same weights under PyTorch's names, ready for ``module.load_state_dict`` after ``torch.from_numpy``."""
    out = {"in_proj_weight": np.concatenate([weights.w_q, weights.w_k, weights.w_v]),  # (3d, d)
           "out_proj.weight": np.asarray(weights.w_o)}
    if weights.has_biases:
        d = weights.d_model
        zero = np.zeros(d)
        out["in_proj_bias"] = np.concatenate([zero if b is None else b
                                              for b in (weights.b_q, weights.b_k, weights.b_v)])
        out["out_proj.bias"] = zero if weights.b_o is None else np.asarray(weights.b_o)
    return out

"""A Llama- or Mistral-style attention layer (``q_proj`` … ``o_proj``): the article's attention with h query heads
sharing g key/value heads and positions turning Q and K (rotary, Su et al. 2021) instead of adding to X.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import layer_of, literal

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
ROPE_THETA = 10_000.0  # Llama 2's rotary base, used when the state dict records none
#: Scalars a state dict may hold beside the arrays (mhacli's own files, or a user's), as a config.json names them.
RECORDED = ("num_attention_heads", "num_key_value_heads", "rope_theta")
#: Parts of such a layer that change its attention and that mhacli does not model: refused by name.
UNMODELLED = {"q_norm": "a normalisation of each query head (Qwen3, OLMo-2) before the scores",
              "k_norm": "a normalisation of each key head (Qwen3, OLMo-2) before the scores",
              "rope_scaling": "a rescaled rotary base for long texts (Llama 3.1's rope_scaling)"}


def llama_layers(state: Mapping[str, Any]) -> list[str]:
    """The prefixes (``model.layers.0.self_attn.``) of every Llama-style attention module in ``state``."""
    return sorted({key[: -len("q_proj.weight")] for key in state if key.endswith("q_proj.weight")
                   and (key == "q_proj.weight" or key.endswith(".q_proj.weight"))},
                  key=lambda p: tuple(int(t) if t.isdigit() else t for t in p.replace(".", " ").split()))


def _scalar(state: Mapping[str, Any], prefix: str, name: str, where: str) -> float | None:
    from mhacli.attention.checks import tensor_values

    for key in (prefix + name, name):
        if key in state:
            value = np.asarray(tensor_values(key, state[key], where))
            if value.shape != () or value.dtype.kind not in "iuf" or not np.isfinite(value) or float(value) <= 0:
                raise UsageError(f"{key!r} in {literal(where)} must be one positive number, got {value!r}.")
            return float(value)
    return None


def from_llama(state: Mapping[str, Any], heads: object, layer: object, where: str) -> Any:
    """The layer ``layer`` names of a Llama-style state dict: :class:`AttentionWeights` with g and the rotary base."""
    from mhacli.attention.checks import whole_number
    from mhacli.models.state_dict import AttentionWeights, _array, _pick

    prefixes = llama_layers(state)
    modules: dict[str, tuple[str, dict[str, Any]]] = {p: ("llama", {}) for p in prefixes}
    prefix = _pick(modules, layer, where)
    for key in state:
        if key.startswith(prefix) or key in RECORDED + tuple(UNMODELLED):
            part = key[len(prefix):] if key.startswith(prefix) else key
            for name, what in UNMODELLED.items():
                if part.split(".")[0] == name:
                    raise UsageError(f"{literal(where)} hold {key!r}: {what}; mhacli does not model it, so its "
                                     "numbers would be wrong. Use a layer without it.")
    w: dict[str, np.ndarray] = {}
    b: dict[str, np.ndarray | None] = {}
    for name in PROJECTIONS:
        if prefix + name + ".weight" not in state:
            raise UsageError(f"{literal(where)} have no {prefix + name + '.weight'!r}; a Llama-style layer has "
                             "q_proj, k_proj, v_proj and o_proj.")
        w[name] = _array(prefix + name + ".weight", state[prefix + name + ".weight"], where)
        bias = state.get(prefix + name + ".bias")
        b[name] = None if bias is None else _array(prefix + name + ".bias", bias, where)
    d = w["o_proj"].shape[0]
    recorded = _scalar(state, prefix, "num_attention_heads", where)
    h = whole_number("heads", heads, low=1) if heads is not None else None
    if h is None:
        if recorded is None:
            raise UsageError(f"{literal(where)} do not record how many query heads the layer has; give "
                             "{heads:name} (the config's num_attention_heads).", heads=None)
        h = int(recorded)
    elif recorded is not None and h != int(recorded):
        raise UsageError("{heads} disagrees with " + f"{literal(where)}, which record {int(recorded)} heads; leave "
                         "{heads:name} out to use them.", heads=h)
    if w["q_proj"].shape != (d, d) or w["o_proj"].shape != (d, d) or d % h:
        raise UsageError(f"{literal(where)}: q_proj {w['q_proj'].shape} and o_proj {w['o_proj'].shape} are not "
                         f"d × d with d divisible by {h} heads; mhacli reads layers whose heads are d/h wide "
                         "(a config's head_dim other than d/h is not modelled).")
    d_k = d // h
    if d_k % 2:
        raise UsageError(f"{literal(where)}: heads of width d/h = {d_k} cannot be turned by rotary positions, which "
                         "turn pairs of dims; a Llama-style layer's heads have an even width (check {heads:name}).",
                         heads=h)
    rows = w["k_proj"].shape[0]
    if w["k_proj"].shape != w["v_proj"].shape or w["k_proj"].shape[1:] != (d,) or rows % d_k or h % (rows // d_k):
        raise UsageError(f"{literal(where)}: k_proj {w['k_proj'].shape} and v_proj {w['v_proj'].shape} are not "
                         f"(g·d/h) × d for a g that divides {h} heads of width {d_k}.")
    g = rows // d_k
    named_g = _scalar(state, prefix, "num_key_value_heads", where)
    if named_g is not None and int(named_g) != g:
        raise UsageError(f"{literal(where)} record num_key_value_heads {int(named_g)}, but k_proj holds {g} "
                         f"key/value heads of width {d_k}.")
    for name, n in (("q_proj", d), ("k_proj", rows), ("v_proj", rows), ("o_proj", d)):
        bias = b[name]
        if bias is not None and bias.shape != (n,):
            raise UsageError(f"{prefix + name + '.bias'!r} has shape {bias.shape}, not ({n},).")
    theta = _scalar(state, prefix, "rope_theta", where) or ROPE_THETA
    own = llama_layers(state)
    label = prefix.rstrip(".") or "(top level)"
    shown = None if len(own) == 1 else f"{label} ({layer_of(own.index(prefix), len(own))})"
    return AttentionWeights(w["q_proj"], w["k_proj"], w["v_proj"], w["o_proj"], b["q_proj"], b["k_proj"],
                            b["v_proj"], b["o_proj"], heads=h, causal=True, name=shown, kv_heads=g, rope_theta=theta)


__all__ = ["PROJECTIONS", "ROPE_THETA", "from_llama", "llama_layers"]

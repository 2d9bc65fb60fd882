"""Your own weights: one self-attention layer found in a state dict and checked once (:func:`from_state_dict`).

Layouts that map exactly onto the article's equations: ``nn.MultiheadAttention`` (alone or in a TransformerEncoder),
BERT's ``query/key/value``, GPT-2's ``c_attn``/``c_proj``; what mhacli does not model is refused (:data:`UNMODELLED`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from mhacli.attention.checks import layer_index, recorded_heads, tensor_values
from mhacli.attention.errors import UsageError
from mhacli.attention.messages import MAX_PATH_SHOWN, layer_of, literal, shown
from mhacli.attention.numbers import whole_number

Array = np.ndarray

HEADS_KEY = "num_heads"  # a whole number beside the arrays: the head count, when a file records it

# The largest |weight| taken: a trained layer's weights are within a few tens; at 1e6 the scores of a
# d = 8192 run (≈ d · w² · x²) stay far inside float32's range, so nothing overflows to inf or NaN.
MAX_ABS_WEIGHT = 1e6

# Each layout: its name, the key suffixes (after the module's prefix) it reads, and which identify it.
_MHA = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias", "q_proj_weight", "k_proj_weight",
        "v_proj_weight", "bias_k", "bias_v"}
_BERT = {f"self.{p}.{t}" for p in ("query", "key", "value") for t in ("weight", "bias")} | {
    "output.dense.weight", "output.dense.bias"}
_GPT2 = {"c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"}
_IDENTIFY = {"pytorch": ("in_proj_weight", "q_proj_weight", "out_proj.weight"),
             "bert": ("self.query.weight",), "gpt2": ("c_attn.weight",)}
_SUFFIXES = {"pytorch": _MHA, "bert": _BERT, "gpt2": _GPT2}

# Parts of these modules that change what attention computes and that mhacli does not model: refused by name.
UNMODELLED = {
    "bias_k": "a learned extra key (add_bias_kv=True) that every query may attend to, beyond the N tokens",
    "bias_v": "a learned extra value (add_bias_kv=True) that every query may attend to, beyond the N tokens",
    "distance_embedding": "relative position scores (position_embedding_type='relative_key') added to QKᵀ",
    "q_attn": "GPT-2's cross-attention to an encoder (add_cross_attention=True)",
}
# Module names that are attention from one sequence to another, not self-attention.
CROSS = ("multihead_attn", "encoder_attn", "crossattention", "cross_attn")


@dataclass(frozen=True)
class AttentionWeights:
    """W_q, W_k, W_v, W_o (d × d, PyTorch layout), their biases (d,) or None, the head count the source recorded,
    whether the model masks later tokens, which module it is and whether a decoder's (:func:`causal_note`)."""

    w_q: Array
    w_k: Array
    w_v: Array
    w_o: Array
    b_q: Array | None = None
    b_k: Array | None = None
    b_v: Array | None = None
    b_o: Array | None = None
    heads: int | None = None
    causal: bool | None = None
    name: str | None = None
    decoder: bool = False
    kv_heads: int | None = None  # key/value heads g of a Llama-style layer (W_k, W_v are (g·d/h) × d)
    rope_theta: float | None = None  # its rotary positions' base (mhacli.models.llama)

    @property
    def d_model(self) -> int:
        return int(self.w_q.shape[0])

    def biases(self) -> dict[str, Array]:
        """The biases present, by the name :func:`mhacli.attention.attention.multi_head_attention` takes."""
        named = {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}
        return {k: v for k, v in named.items() if v is not None}


def _kind(value: Any) -> str:
    """What a non-state-dict object is, in a user's words."""
    if value is None:
        return "None"
    if callable(getattr(value, "state_dict", None)):
        return f"a PyTorch module ({type(value).__name__}), not its state dict"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} item{'s' if len(value) != 1 else ''}"
    kind = type(value).__name__
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _mapping(state: Any, where: str) -> Mapping[str, Any]:
    """``state`` if it is a mapping of names to arrays; anything else refused in one line."""
    if isinstance(state, Mapping):
        bad = [k for k in state if not isinstance(k, str)]
        if bad:
            raise UsageError(f"{where} must be keyed by parameter names (text), but a key is {bad[0]!r} "
                             f"({type(bad[0]).__name__}); save module.state_dict() itself.")
        return state
    hint = "pass module.state_dict() and heads=module.num_heads" if callable(getattr(state, "state_dict", None)) \
        else "pass a state dict (module.state_dict()), the path of a weights file, or 'random', 'designed', 'trained'"
    raise UsageError(f"{where} are {_kind(state)}; {hint}.")


def _array(name: str, value: Any, where: str) -> Array:
    """One parameter as a finite float64 array of sane magnitude (tensors, bfloat16 included, converted)."""
    value = tensor_values(name, value, where)  # a torch tensor's values, or one line saying what it is
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise UsageError(f"{name!r} of {where} is not an array of numbers ({type(exc).__name__}).") from None
    if a.dtype.kind not in "fiu":
        raise UsageError(f"{name!r} of {where} is not an array of numbers (dtype {a.dtype}).")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise UsageError(f"{name!r} of {where} holds infinite or NaN values.")
    biggest = float(np.max(np.abs(a), initial=0.0))
    if biggest > MAX_ABS_WEIGHT:
        raise UsageError(f"{name!r} of {where} holds values up to {biggest:.3g}; mhacli takes weights within "
                         f"±{MAX_ABS_WEIGHT:.0e} (a trained layer's are within a few tens), so that the scores "
                         "stay finite.")
    return a


def stack(prefix: str) -> str | None:
    """``"encoder"`` or ``"decoder"``: the stack of an encoder-decoder model a module is in (the first of the two
    its name holds: a BERT2BERT decoder is ``decoder.bert.encoder.layer.N``), else None."""
    return next((part for part in prefix.split(".") if part in ("encoder", "decoder")), None)


def _model_order(prefix: str) -> tuple[Any, ...]:
    """Sort key numbering layers as the model runs them: an encoder's before a decoder's (never alphabetically,
    which put nn.Transformer's ``decoder.layers.0`` first), then ``layers.2`` before ``layers.10``."""
    return (stack(prefix) == "decoder", tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", prefix)))


def find_modules(state: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every attention module in ``state``: its prefix (``layers.1.self_attn.``) -> (layout, {suffix: value})."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for layout, suffixes in _SUFFIXES.items():
        groups: dict[str, dict[str, Any]] = {}
        for key, value in state.items():
            for suffix in suffixes:
                if key == suffix or key.endswith("." + suffix):
                    groups.setdefault(key[: len(key) - len(suffix)], {})[suffix] = value
        for prefix, parts in groups.items():
            if any(k in parts for k in _IDENTIFY[layout]) and prefix not in found:
                found[prefix] = (layout, parts)
    return dict(sorted(found.items(), key=lambda item: _model_order(item[0])))


def _label(prefix: str) -> str:
    return prefix.rstrip(".") or "(top level)"


def _is_cross(prefix: str) -> bool:
    return any(part in CROSS for part in prefix.rstrip(".").split("."))


def _pick(modules: dict[str, tuple[str, dict[str, Any]]], layer: object, where: str) -> str:
    """The prefix of the self-attention module ``layer`` names (its number from 0, or its name) among several."""
    own = [p for p in modules if not _is_cross(p)]
    if not own:
        cross = _label(next(iter(modules)))
        raise UsageError(f"{where} hold only cross-attention ({cross!r}: from one sequence to another, as in a "
                         "decoder); mhacli draws self-attention over one text.")
    names = [_label(p) for p in own]
    listed = ", ".join(names[:3]) + (f", …, {names[-1]}" if len(names) > 3 else "")
    asked = layer.strip().casefold() if isinstance(layer, str) else None
    named = next((_label(p) for p in modules if _is_cross(p) and _label(p).casefold() == asked), None)
    if named is not None:
        raise UsageError(f"{shown(named, limit=MAX_PATH_SHOWN)} in {literal(where)} is cross-attention (a decoder's "
                         "queries over the encoder's output, two sequences); mhacli draws self-attention over one "
                         f"text: pick one of {literal(listed)}.")
    if layer is None:
        if len(own) == 1:
            return own[0]
        raise UsageError(f"{literal(where)} hold the self-attention of {len(own)} layers ({literal(listed)}); pick "
                         "one with {layer:name} 0 to " + f"{len(own) - 1} (or its name).", layer=None)
    index = layer_index(layer, names)  # a number from 0, or a name (case and spaces do not count), as mha show
    if index is not None:
        return own[index]
    typed = whole_number(layer) if isinstance(layer, str) else None  # "3" typed is the number 3 in the message
    if isinstance(layer, str) and typed is None:  # a name, quoted whole: {layer} would cut a long one mid-name
        raise UsageError("{layer:name} " + f"{literal(shown(layer, limit=MAX_PATH_SHOWN))} is not a layer of "
                         f"{literal(where)}; give a number from 0 to {len(own) - 1} or one of its names: "
                         f"{literal(listed)}.", layer=layer)
    raise UsageError("{layer} is not a layer of " + f"{literal(where)}; give a number from 0 to {len(own) - 1} or "
                     f"one of its names: {literal(listed)}.", layer=layer if typed is None else typed)


def _refuse_unmodelled(state: Mapping[str, Any], prefix: str, where: str) -> None:
    for key in state:
        if not key.startswith(prefix):
            continue
        part = key[len(prefix):].split(".")
        for name, what in UNMODELLED.items():
            if name in part:
                raise UsageError(f"{where} hold {key!r}: {what}; mhacli does not model it, so its numbers would "
                                 "be wrong. Use a layer without it.")


def _recorded_heads(state: Mapping[str, Any], prefix: str, where: str) -> int | None:
    for key in (prefix + HEADS_KEY, HEADS_KEY):
        if key in state:
            value = np.asarray(tensor_values(key, state[key], where))
            if value.shape != () or value.dtype.kind not in "iu" or int(value) < 1:
                raise UsageError(f"{key!r} in {where} must be one whole number of heads, got {value!r}.")
            return int(value)
    return None


def _mha(parts: dict[str, Any], where: str) -> tuple[Array, Array, Array | None, Array | None]:
    """W_q, W_k, W_v, W_o and b_in, b_o of an nn.MultiheadAttention's parameters."""
    if "out_proj.weight" not in parts:
        raise UsageError(f"{where} have no 'out_proj.weight'; expected an nn.MultiheadAttention state dict "
                         "(in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias).")
    w_o = _array("out_proj.weight", parts["out_proj.weight"], where)
    if w_o.ndim != 2 or w_o.shape[0] != w_o.shape[1] or w_o.shape[0] < 1:
        raise UsageError(f"'out_proj.weight' must be d × d, got shape {w_o.shape}.")
    d = w_o.shape[0]
    if "in_proj_weight" in parts:
        w_in = _array("in_proj_weight", parts["in_proj_weight"], where)
        if w_in.shape != (3 * d, d):
            raise UsageError(f"'in_proj_weight' must be 3d × d = {3 * d} × {d} for out_proj.weight's d = {d}, "
                             f"got shape {w_in.shape}.")
    else:
        missing = [k for k in ("q_proj_weight", "k_proj_weight", "v_proj_weight") if k not in parts]
        if missing:
            raise UsageError(f"{where} have no 'in_proj_weight' (nor {', '.join(repr(m) for m in missing)}); "
                             "expected an nn.MultiheadAttention state dict.")
        separate = [_array(k, parts[k], where) for k in ("q_proj_weight", "k_proj_weight", "v_proj_weight")]
        for key, w in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), separate):
            if w.shape != (d, d):
                raise UsageError(f"{key!r} is {' × '.join(map(str, w.shape))}, not d × d = {d} × {d}: the module "
                                 "takes keys or values of another width (kdim/vdim), so it attends to another "
                                 "sequence; mhacli draws self-attention over one text.")
        w_in = np.concatenate(separate)  # 3 × (d, d) -> (3d, d), PyTorch's own order
    b_in = b_o = None
    if parts.get("in_proj_bias") is not None:
        b_in = _array("in_proj_bias", parts["in_proj_bias"], where)
        if b_in.shape != (3 * d,):
            raise UsageError(f"'in_proj_bias' must have 3d = {3 * d} numbers, got shape {b_in.shape}.")
    if parts.get("out_proj.bias") is not None:
        b_o = _array("out_proj.bias", parts["out_proj.bias"], where)
        if b_o.shape != (d,):
            raise UsageError(f"'out_proj.bias' must have d = {d} numbers, got shape {b_o.shape}.")
    return w_in, w_o, b_in, b_o


def _linear(parts: dict[str, Any], name: str, prefix: str, where: str, d: int | None,
            transposed: bool = False) -> tuple[Array, Array | None]:
    """A Linear (``x Wᵀ + b``) or, ``transposed``, a GPT-2 Conv1D (``x W + b``) as PyTorch-layout W and b."""
    if f"{name}.weight" not in parts:
        raise UsageError(f"{where} have no {prefix + name + '.weight'!r}; the layer is incomplete.")
    w = _array(prefix + name + ".weight", parts[f"{name}.weight"], where)
    w = w.T if transposed else w  # Conv1D (in, out) -> Linear (out, in)
    b = _array(prefix + name + ".bias", parts[f"{name}.bias"], where) if f"{name}.bias" in parts else None
    if w.ndim != 2 or (d is not None and w.shape[1] != d) or (b is not None and b.shape != (w.shape[0],)):
        raise UsageError(f"{prefix + name!r} has weight {w.shape}"
                         f"{'' if b is None else f' and bias {b.shape}'}, which do not fit a layer of width d.")
    return w, b


def from_state_dict(state: Any, heads: object = None, layer: object = None,
                    where: str = "the weights") -> AttentionWeights:
    """Find one self-attention layer in ``state`` (``layer``: a number from 0 or a name, among several), check it
    (``heads`` against a recorded count) and split it into W_q … b_o; ``where`` names the source in messages."""
    state = _mapping(state, where)
    modules = find_modules(state)
    if not modules:
        keys = ", ".join(sorted(state)[:8]) or "none"
        raise UsageError(f"{where} have no 'in_proj_weight' or 'out_proj.weight'; expected an "
                         "nn.MultiheadAttention state dict (in_proj_weight, in_proj_bias, out_proj.weight, "
                         "out_proj.bias), or a TransformerEncoder, BERT or GPT-2 one; found keys: " + keys + ".")
    prefix = _pick(modules, layer, where)
    layout, parts = modules[prefix]
    _refuse_unmodelled(state, prefix, where)
    causal: bool | None = None
    w_in: Array
    w_o: Array
    b_in: Array | None
    b_o: Array | None
    if layout == "pytorch":
        w_in, w_o, b_in, b_o = _mha(parts, where)
        d = w_o.shape[0]
    else:
        if layout == "bert":
            (w_q, b_q), (w_k, b_k), (w_v, b_v) = (_linear(parts, f"self.{p}", prefix, where, None)
                                                  for p in ("query", "key", "value"))
            w_o, b_o = _linear(parts, "output.dense", prefix, where, None)
            w_in = np.concatenate([w_q, w_k, w_v])  # 3 × (d, d) -> (3d, d)
            b_in = None if b_q is None or b_k is None or b_v is None else np.concatenate([b_q, b_k, b_v])
        else:  # GPT-2: c_attn is (d, 3d) in Conv1D's x W layout; its attention is causal
            w_in, b_in = _linear(parts, "c_attn", prefix, where, None, transposed=True)
            w_o, b_o = _linear(parts, "c_proj", prefix, where, None, transposed=True)
            causal = True
        d = w_o.shape[0]
        if w_in.shape != (3 * d, d) or w_o.shape != (d, d):
            raise UsageError(f"{_label(prefix)!r} in {where} has projections of shapes {w_in.shape} and "
                             f"{w_o.shape}, not the 3d × d and d × d of one self-attention layer.")
    parent = prefix.rstrip(".").rpartition(".")[0]  # 'layers.0' of 'layers.0.self_attn.'
    decoder = stack(prefix) == "decoder" or any(_is_cross(p) and p.rstrip(".").rpartition(".")[0] == parent
                                                for p in modules)  # a cross-attention beside it: a decoder layer
    if decoder:
        causal = True  # a decoder's self-attention is trained with later tokens masked (nn.Transformer's tgt_mask)
    recorded = _recorded_heads(state, prefix, where)
    if recorded is not None and heads is not None and heads != recorded:
        raise UsageError("{heads} disagrees with " + f"{literal(where)}, which record {recorded} heads; leave "
                         "{heads:name} out to use them.", heads=heads)
    w_q, w_k, w_v = w_in[:d], w_in[d : 2 * d], w_in[2 * d :]  # (3d, d) -> 3 × (d, d), PyTorch's order
    b_q, b_k, b_v = (None, None, None) if b_in is None else (b_in[:d], b_in[d : 2 * d], b_in[2 * d :])
    own = [p for p in modules if not _is_cross(p)]
    name = None if len(own) == 1 else f"{_label(prefix)} ({layer_of(own.index(prefix), len(own))})"
    return AttentionWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, heads=recorded, causal=causal, name=name,
                            decoder=decoder)


def causal_note(weights: AttentionWeights, causal: bool) -> str:
    """The clause after "ran the self-attention NAME" saying how a causal model's layer was run."""
    if not weights.causal:
        return ""
    decoder = weights.decoder
    if causal:
        return (", causal, as a decoder's self-attention runs (run it with causal off to let each query see every key)"
                if decoder else ", causal as the model was trained")
    model = "a decoder's self-attention" if decoder else "the model"
    return (f", over every key as asked, though {model} only ever looks at earlier tokens: its weights on later "
            "keys are ones it never used")


def checked_heads(weights: AttentionWeights, heads: object, where: str = "the weights") -> int:
    """The head count a run of ``weights`` uses: the one given, else the one the source recorded; without either,
    a usage error (a wrong guess would give wrong numbers without a sign)."""
    from mhacli.attention.checks import whole_number

    if heads is None:
        if weights.heads is None:
            from mhacli.attention.config import divisors

            choices = ", ".join(str(n) for n in divisors(weights.d_model)[:12])
            raise UsageError(f"{literal(where)} do not record how many heads the layer has (a PyTorch state dict "
                             "never does); give {heads:name} (one of " + f"{choices} for its d = {weights.d_model}).",
                             heads=None)
        return recorded_heads(weights.heads, weights.d_model, where)  # 3 or 2**62 for d = 8: the file is named
    count = whole_number("heads", heads, low=1)
    if weights.heads is not None and count != weights.heads:
        raise UsageError("{heads} disagrees with " + f"{literal(where)}, which record {weights.heads} heads; leave "
                         "{heads:name} out to use them.", heads=count)
    return count


def to_state_dict(weights: AttentionWeights) -> dict[str, Array]:
    """The same weights under PyTorch's names, ready for ``module.load_state_dict`` after ``torch.from_numpy``."""
    out = {"in_proj_weight": np.concatenate([weights.w_q, weights.w_k, weights.w_v]),  # (3d, d)
           "out_proj.weight": np.asarray(weights.w_o)}
    if weights.biases():
        d = weights.d_model
        zero = np.zeros(d)
        out["in_proj_bias"] = np.concatenate([zero if b is None else b
                                              for b in (weights.b_q, weights.b_k, weights.b_v)])
        out["out_proj.bias"] = zero if weights.b_o is None else np.asarray(weights.b_o)
    return out

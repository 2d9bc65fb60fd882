"""Your own attention: weights from any model, checked once, as a view every renderer can read.

BertViz's ``head_view(attention, tokens)`` and CircuitsVis's
``attention_heads(attention, tokens)`` take arrays and tokens, never a model;
so does :func:`from_attention`.  A view knows only the attention weights: it has
no steps, no Q/K/V and no parameter count, and the renderers show only what it knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from mhacli.attention.display import page_of
from mhacli.attention.trace import freeze
from mhacli.attention.errors import UsageError

Array = np.ndarray

MAX_HEADS = 4096
MAX_TOKENS = 32768
# Machine epsilon of each precision attention arrives in.  A half-precision softmax is
# accumulated in float32 and rounded once when stored, so a row is off by at most a few of its
# epsilons, plus float32's summation error over N keys (torch.softmax in bfloat16 at N = 5 gives
# rows of 0.9985).  float64 arrays are most often float32 results cast up: they get float32's room.
EPSILON = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23, "float64": 2.0**-23}
SDPA_HINT = ("a model using SDPA or flash attention returns no attention weights; load it with "
             "attn_implementation=\"eager\" and run it with output_attentions=True")


def row_sum_tolerance(precision: str, n_keys: int) -> float:
    """How far from 1 a row of softmax weights stored in ``precision`` may honestly sum, over ``n_keys`` keys."""
    return 4 * EPSILON.get(precision, EPSILON["float32"]) + n_keys * EPSILON["float32"]


def _as_array(weights: Any) -> tuple[Array, str]:
    """Numpy arrays, or anything with ``__array__`` (a torch tensor on the CPU) — torch is never imported.

    Returns the float64 array and the precision the weights came in.
    """
    if weights is None:
        raise UsageError(f"a layer's attention weights are None: {SDPA_HINT}.")
    name = str(getattr(weights, "dtype", "float64")).replace("torch.", "")
    precision = name if name in ("bfloat16", "float16", "float32") else "float64"  # what they were stored in
    if hasattr(weights, "detach"):  # a tensor that may require grad: numpy() refuses those
        weights = weights.detach()
    if hasattr(weights, "cpu"):
        weights = weights.cpu()
    if precision == "bfloat16" and hasattr(weights, "float"):
        weights = weights.float()  # numpy has no bfloat16; float32 holds every bfloat16 exactly
    try:
        a = np.asarray(weights)
        if a.dtype.kind not in "fiub" and a.dtype.name != "bfloat16":
            raise TypeError(f"dtype {a.dtype}")
        return np.asarray(a, dtype=np.float64), precision
    except (TypeError, ValueError) as exc:
        raise UsageError(f"the attention weights are not an array of numbers ({type(exc).__name__}: {exc}).") from None


def _one_sequence(a: Array, batch_index: int | None, what: str) -> Array:
    """(B, ...) -> (...): the sequence ``batch_index`` picks; a batch of one needs no index."""
    if batch_index is None:
        if a.shape[0] != 1:
            raise UsageError(f"{what} hold a batch of {a.shape[0]} sequences; pick one with "
                             "{batch_index:name} (0 to " + f"{a.shape[0] - 1}).", batch_index=None)
        return a[0]
    if not 0 <= batch_index < a.shape[0]:
        raise UsageError("{batch_index} is out of range: " + f"{what} hold {a.shape[0]} sequence"
                         f"{'s' if a.shape[0] != 1 else ''} (0 to {a.shape[0] - 1}).", batch_index=batch_index)
    return a[batch_index]


def _stack_layers(weights: Any, batch_index: int | None = None) -> tuple[Array, str]:
    """One (layers, h, N, N) array from (h, N, N), (layers, h, N, N), (layers, batch, h, N, N), or a tuple
    of per-layer (batch, h, N, N) as Hugging Face's ``output_attentions``; and the precision they came in."""
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise UsageError(f"the attention weights are an empty list: {SDPA_HINT}.")
        converted = [_as_array(w) for w in weights]
        layers = [a for a, _ in converted]
        shapes = {a.shape for a in layers}
        if len(shapes) > 1:
            raise UsageError(f"the layers' attention arrays have different shapes: {sorted(shapes)}.")
        if layers[0].ndim == 4:  # Hugging Face / BertViz: (batch, h, N, N) per layer
            layers = [_one_sequence(a, batch_index, "the attention weights") for a in layers]
        elif batch_index is not None:
            raise UsageError("{batch_index:name} picks a sequence of a batch; these weights hold one "
                             "(drop it).", batch_index=batch_index)
        if layers[0].ndim != 3:
            raise UsageError(f"each layer's attention must be (h, N, N) or (batch, h, N, N), got {layers[0].shape}.")
        return np.stack(layers), converted[0][1]  # L × (h, N, N) -> (L, h, N, N)
    a, precision = _as_array(weights)
    if a.ndim == 5:  # (L, B, h, N, N): Hugging Face's tuple stacked
        return np.stack([_one_sequence(layer, batch_index, "the attention weights") for layer in a]), precision
    if batch_index is not None:
        raise UsageError("{batch_index:name} picks a sequence of a batch: give (layers, batch, h, N, N) "
                         "weights, or drop it.", batch_index=batch_index)
    if a.size == 0 and a.ndim < 3:
        raise UsageError(f"the attention weights are empty (shape {a.shape}): {SDPA_HINT}.")
    if a.ndim == 3:
        return a[None], precision  # (h, N, N) -> (1, h, N, N)
    if a.ndim == 4:
        return a, precision  # (L, h, N, N)
    raise UsageError(f"the attention weights must be (h, N, N) or (layers, h, N, N), got shape {a.shape}.")


def _check(weights: Array, tokens: tuple[str, ...], precision: str = "float64") -> None:
    n_layers, h, n, m = weights.shape
    if weights.size == 0:
        hint = f"; {SDPA_HINT}" if n_layers == 0 else ""
        raise UsageError(f"the attention weights are empty (shape {weights.shape}: {n_layers} layers × {h} heads × "
                         f"{n} × {m}); give at least one layer, one head and one token{hint}.")
    if n != m:
        raise UsageError(f"each head's attention must be square (N × N), got {n} × {m}.")
    if n != len(tokens):
        raise UsageError(f"the attention covers {n} tokens but {len(tokens)} tokens were given; "
                         "pass the tokens the model saw (special tokens included).")
    if not 1 <= h <= MAX_HEADS or not 1 <= n <= MAX_TOKENS:
        raise UsageError(f"{h} heads of {n} tokens is outside what can be drawn "
                         f"(1–{MAX_HEADS} heads, 1–{MAX_TOKENS} tokens).")
    if not np.all(np.isfinite(weights)):
        raise UsageError("the attention weights hold infinite or NaN values.")
    tolerance = row_sum_tolerance(precision, n)
    lowest = float(weights.min())
    if lowest < -tolerance:
        raise UsageError(f"the attention weights hold negative values (down to {lowest:.3g}), which no softmax "
                         "gives: these look like scores (before softmax); pass the weights after softmax.")
    sums = weights.sum(axis=-1)  # (L, h, N)
    worst = np.unravel_index(np.argmax(np.abs(sums - 1.0)), sums.shape)
    off = abs(float(sums[worst]) - 1.0)
    if off > tolerance:
        layer, head, row = (int(i) for i in worst)
        where = f"row {row} of head {head + 1} in layer {layer} sums to {sums[worst]:.6g}, not 1 (off by {off:.2g})"
        if float(weights.max()) > 1.0 + tolerance:
            why = "weights above 1 are not probabilities: these look like scores; pass the weights after softmax"
        elif np.all(np.abs(weights.sum(axis=-2) - 1.0) <= tolerance):
            why = "its columns sum to 1: the array seems transposed (keys × queries); pass queries × keys"
        else:
            guess = "were some keys cut off?" if sums[worst] < 1 else "were heads or layers added together?"
            why = (f"further from 1 than {precision} rounding allows ({tolerance:.2g}); each query's row of "
                   f"weights must sum to 1 ({guess})")
        raise UsageError(f"{where}: {why}.")


@dataclass(frozen=True, repr=False)
class AttentionView:
    """Attention weights of one or more layers over ``tokens``, read-only: what a renderer needs, nothing invented."""

    tokens: tuple[str, ...]
    layers: Array  # (L, h, N, N) each row a probability distribution
    layer_names: tuple[str, ...]
    head_names: tuple[str, ...] | None = None
    causal: bool = False
    layer: int = 0  # the layer shown
    source: str | None = None
    padded: Array | None = None  # (N,) True at a position attention_mask marks as padding
    note: str | None = None  # what the view was told that the weights say otherwise (causal=False on causal ones)
    key_value_heads: int | None = None  # g key/value groups the h query heads share (from_attention's kv_heads)
    kind: str = field(default="your model", init=False)

    def __post_init__(self) -> None:
        freeze(self)

    def __repr__(self) -> str:
        words = " ".join(self.tokens[:8]) + (" …" if self.n_tokens > 8 else "")
        groups = "" if self.key_value_heads is None else f" in {self.key_value_heads} key/value groups"
        return (f"<mhacli AttentionView: {self.n_layers} layer(s) × {self.num_heads} heads{groups} over "
                f"{self.n_tokens} tokens, {'causal' if self.causal else 'bidirectional'}, "
                f"showing {self.layer_names[self.layer]}\n"
                f"  tokens: {words}>")

    def _repr_html_(self) -> str | None:
        """Jupyter shows a view as its interactive page, isolated in an iframe (see mhacli.notebook)."""
        return page_of(self)

    @property
    def weights(self) -> Array:
        """(h, N, N): the shown layer's heads, as a trace's ``weights``."""
        return self.layers[self.layer]

    @property
    def n_layers(self) -> int:
        return int(self.layers.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.layers.shape[1])

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def kv_heads(self) -> int:
        """Key/value heads g the query heads share (h unless ``from_attention`` was told ``kv_heads``), as a
        trace's: the figures and the page mark the heads of one group."""
        return self.num_heads if self.key_value_heads is None else self.key_value_heads

    @property
    def head_groups(self) -> tuple[int, ...]:
        """The key/value group each query head reads (0-based): ⌊i / (h/g)⌋."""
        from mhacli.attention.kv import group_of

        return tuple(group_of(i, self.num_heads, self.kv_heads) for i in range(self.num_heads))

    @property
    def mask(self) -> Array | None:
        """(N, N) True where a query may not look: later keys when every head of every layer is causal, and a
        padded position's row and column (it is no token of the text: no measure counts it)."""
        n = self.n_tokens
        blocked = np.triu(np.ones((n, n), dtype=bool), 1) if self.causal else np.zeros((n, n), dtype=bool)  # (N, N)
        if self.padded is not None:
            blocked |= self.padded[None, :] | self.padded[:, None]  # (N,) -> (N, N)
        return blocked if self.causal or (self.padded is not None and self.padded.any()) else None

    @property
    def rules(self) -> tuple[str, ...] | None:
        return self.head_names

    def at_layer(self, layer: int) -> "AttentionView":
        """The same view showing another layer, counted from 0 as ``outputs.attentions[layer]`` counts it."""
        if not 0 <= layer < self.n_layers:
            from mhacli.attention.messages import layers_range

            raise UsageError("{layer} is out of range: this attention has " + layers_range(self.n_layers) + ".",
                             layer=layer)
        return replace(self, layer=layer)


def is_causal(layers: Array) -> bool:
    """True when no query gives any weight to a later key, in every head of every layer."""
    upper = np.triu(np.ones(layers.shape[-2:], dtype=bool), 1)
    return bool(layers.shape[-1] > 1 and np.all(layers[..., upper] == 0.0))


def from_attention(weights: Any, tokens: Sequence[str], *, causal: object = None,
                   names: Sequence[str] | None = None, layer_names: Sequence[str] | None = None,
                   layer: object = 0, batch_index: object = None, attention_mask: Any = None,
                   raw_tokens: object = False, kv_heads: object = None) -> AttentionView:
    """A view of your model's attention: ``weights`` (h, N, N), (layers, h, N, N) or Hugging Face's per-layer tuple.

    ``causal=None`` reads it from the weights; ``layer`` and ``batch_index`` are 0-based; ``attention_mask`` (1 token,
    0 padding) keeps padding out of every measure; tokenizer markers are read (``Ġcat``: ``cat``) unless ``raw_tokens``.
    ``kv_heads`` (g dividing h: ``config.num_key_value_heads``) names the key/value group each query head reads.
    """
    from mhacli.attention.checks import flag, strings, whole_number
    from mhacli.attention.tokenize import readable

    wanted_layer = whole_number("layer", layer, low=0)
    wanted_causal = None if causal is None else flag("causal", causal)
    raw = flag("raw_tokens", raw_tokens)
    index = None if batch_index is None else whole_number("batch_index", batch_index, low=0)
    token_tuple = strings("tokens", tokens, "one per position", ids=False)  # not one string, not a tokenizer's ids
    if token_tuple is None:  # required: the tokens label every row and column
        raise UsageError("{tokens:name} must be a list of strings, one per position, got None.", tokens=None)
    layers, precision = _stack_layers(weights, index)  # (L, h, N, N)
    _check(layers, token_tuple, precision)
    n_layers, h = layers.shape[:2]
    found = is_causal(layers)
    if wanted_causal and not found:
        raise UsageError("causal=True, but some query gives weight to a later key; leave causal out to let "
                         "mhacli find out.")
    head_names = strings("names", names)  # names="head" is refused, never four heads 'h', 'e', 'a', 'd'
    if head_names is not None and len(head_names) != h:
        raise UsageError(f"{len(head_names)} head names for {h} heads; give one name per head.")
    lnames = strings("layer_names", layer_names, "one per layer") or tuple(f"layer {i}" for i in range(n_layers))
    if len(lnames) != n_layers:
        raise UsageError(f"{len(lnames)} layer names for {n_layers} layers; give one name per layer.")
    groups = None if kv_heads is None else _groups(kv_heads, h)
    padded = None if attention_mask is None else _padded(attention_mask, index, layers, token_tuple, precision)
    note = None
    if wanted_causal is False and found:  # the hatching would go without a word: the model never looked ahead
        note = ("causal=False, though no query gives any weight to a later key (a causal model's weights): drawn "
                "over every key as asked, the later keys' zeros are ones the model never computed")
    view = AttentionView(token_tuple if raw else readable(token_tuple), layers, lnames, head_names,
                         found if wanted_causal is None else wanted_causal, padded=padded, note=note,
                         key_value_heads=groups)
    return view.at_layer(wanted_layer) if wanted_layer else view


def _groups(kv_heads: object, h: int) -> int | None:
    """``kv_heads`` checked against the weights' h heads: a whole number g dividing h (None when g = h)."""
    from mhacli.attention.checks import whole_number
    from mhacli.attention.config import divisors

    g = whole_number("kv_heads", kv_heads)
    if not 1 <= g <= h or h % g:
        raise UsageError(f"{{kv_heads:name}} {g} must divide the {h} heads of these weights (each key/value group "
                         f"serves the same number of query heads); choose one of "
                         f"{', '.join(str(k) for k in divisors(h))}.", kv_heads=g)
    return None if g == h else g


def _padded(attention_mask: Any, batch_index: int | None, layers: Array, tokens: tuple[str, ...],
            precision: str) -> Array:
    """(N,) True at padding, from Hugging Face's ``attention_mask`` (1 = token, 0 = padding; (N,) or (B, N)),
    checked against the weights: a model gives a padded key no weight."""
    mask, _ = _as_array(attention_mask)
    if mask.ndim == 2:  # (B, N): the sequence batch_index picks, as for the weights
        mask = _one_sequence(mask, batch_index, "attention_mask")
    n = len(tokens)
    if mask.shape != (n,) or not np.all((mask == 0) | (mask == 1)):
        raise UsageError(f"{{attention_mask:name}} must be 1 for each token and 0 for padding, one per position "
                         f"((N,) or (batch, N) for N = {n}), got shape {mask.shape}"
                         f"{'' if mask.shape != (n,) else ' with values other than 0 and 1'}.", attention_mask=None)
    padded = mask == 0  # (N,)
    if padded.all():
        raise UsageError("{attention_mask:name} marks every position as padding; it has no token to draw.",
                         attention_mask=None)
    seen = layers[..., ~padded, :][..., padded]  # (L, h, real queries, padded keys)
    if seen.size and float(seen.max()) > row_sum_tolerance(precision, n):
        layer, head, q, k = (int(i) for i in np.unravel_index(np.argmax(seen), seen.shape))
        query, key = np.flatnonzero(~padded)[q], np.flatnonzero(padded)[k]
        raise UsageError(f"{{attention_mask:name}} marks position {key} as padding, but head {head + 1} of layer "
                         f"{layer} gives it weight {float(seen.max()):.3g} from query {query}: a model gives padding "
                         "none; pass the mask of the same sequence.", attention_mask=None)
    return padded

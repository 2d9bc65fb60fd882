"""Your own attention: weights from any model, checked once, as a view every renderer can read.

BertViz's ``head_view(attention, tokens)`` and CircuitsVis's
``attention_heads(attention, tokens)`` take arrays and tokens, never a model;
so does :func:`from_attention`.  A view knows only the attention weights: it has
no steps, no Q/K/V and no parameter count, and the renderers show only what it knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from mhacli.core.errors import UsageError

Array = np.ndarray

ROW_SUM_TOLERANCE = 1e-3  # float16/bfloat16 models round their softmax; a row far from 1 is not attention
MAX_HEADS = 4096
MAX_TOKENS = 32768


def _as_array(weights: Any) -> Array:
    """Numpy arrays, or anything with ``__array__`` (a torch tensor on the CPU) — torch is never imported."""
    if hasattr(weights, "detach"):  # a tensor that may require grad: numpy() refuses those
        weights = weights.detach()
    if hasattr(weights, "cpu"):
        weights = weights.cpu()
    if hasattr(weights, "float") and getattr(weights, "dtype", None) is not None and "bfloat16" in str(weights.dtype):
        weights = weights.float()  # numpy has no bfloat16
    try:
        return np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"the attention weights are not an array of numbers ({type(exc).__name__}: {exc}).") from None


def _stack_layers(weights: Any) -> Array:
    """One (layers, h, N, N) array from (h, N, N), (layers, h, N, N), or a tuple of per-layer (1, h, N, N)."""
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise UsageError("the attention weights are an empty list; give one array per layer.")
        layers = [_as_array(w) for w in weights]
        shapes = {a.shape for a in layers}
        if len(shapes) > 1:
            raise UsageError(f"the layers' attention arrays have different shapes: {sorted(shapes)}.")
        layers = [a[0] if a.ndim == 4 and a.shape[0] == 1 else a for a in layers]  # BertViz: (batch=1, h, N, N)
        if layers[0].ndim != 3:
            raise UsageError(f"each layer's attention must be (h, N, N) or (1, h, N, N), got {layers[0].shape}.")
        return np.stack(layers)  # L × (h, N, N) -> (L, h, N, N)
    a = _as_array(weights)
    if a.ndim == 3:
        return a[None]  # (h, N, N) -> (1, h, N, N)
    if a.ndim == 4:
        return a  # (L, h, N, N)
    if a.ndim == 5 and a.shape[1] == 1:
        return a[:, 0]  # (L, 1, h, N, N): a stacked Hugging Face output_attentions with batch 1
    raise UsageError(f"the attention weights must be (h, N, N) or (layers, h, N, N), got shape {a.shape}.")


def _check(weights: Array, tokens: tuple[str, ...]) -> None:
    n_layers, h, n, m = weights.shape
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
    if weights.min() < -ROW_SUM_TOLERANCE:
        raise UsageError(f"the attention weights hold negative values (down to {weights.min():.3g}); "
                         "pass the weights after softmax, not the scores.")
    sums = weights.sum(axis=-1)  # (L, h, N)
    worst = np.unravel_index(np.argmax(np.abs(sums - 1.0)), sums.shape)
    if abs(sums[worst] - 1.0) > ROW_SUM_TOLERANCE:
        layer, head, row = (int(i) for i in worst)
        raise UsageError(f"row {row} of head {head + 1} in layer {layer + 1} sums to {sums[worst]:.4g}, not 1: "
                         "pass the weights after softmax (each query's row sums to 1), not the scores.")


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
    kind: str = field(default="your model", init=False)

    def __post_init__(self) -> None:
        if self.layers.flags.writeable:
            frozen = np.array(self.layers, copy=True)
            frozen.setflags(write=False)
            object.__setattr__(self, "layers", frozen)

    def __repr__(self) -> str:
        words = " ".join(self.tokens[:8]) + (" …" if self.n_tokens > 8 else "")
        return (f"<mhacli AttentionView: {self.n_layers} layer(s) × {self.num_heads} heads over {self.n_tokens} "
                f"tokens, {'causal' if self.causal else 'bidirectional'}, showing {self.layer_names[self.layer]}\n"
                f"  tokens: {words}>")

    def _repr_html_(self) -> str:
        """Jupyter shows a view as its interactive page, isolated in an iframe (see mhacli.render.notebook)."""
        from mhacli.render.notebook import html_frame  # the display protocol asks the object; drawing is render's

        return html_frame(self)

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
    def mask(self) -> Array | None:
        """(N, N) True where a query may not look, when every head of every layer is causal."""
        return np.triu(np.ones((self.n_tokens, self.n_tokens), dtype=bool), 1) if self.causal else None

    @property
    def rules(self) -> tuple[str, ...] | None:
        return self.head_names

    def at_layer(self, layer: int) -> "AttentionView":
        """The same view showing another layer (0-based)."""
        if not 0 <= layer < self.n_layers:
            raise UsageError("{layer} is out of range: this attention has "
                             f"{self.n_layers} layer{'s' if self.n_layers != 1 else ''} (1–{self.n_layers}).",
                             layer=layer + 1)
        return AttentionView(self.tokens, self.layers, self.layer_names, self.head_names, self.causal, layer,
                             self.source)


def is_causal(layers: Array) -> bool:
    """True when no query gives any weight to a later key, in every head of every layer."""
    upper = np.triu(np.ones(layers.shape[-2:], dtype=bool), 1)
    return bool(layers.shape[-1] > 1 and np.all(layers[..., upper] == 0.0))


def from_attention(weights: Any, tokens: Sequence[str], *, causal: bool | None = None,
                   names: Sequence[str] | None = None, layer_names: Sequence[str] | None = None,
                   layer: int = 0) -> AttentionView:
    """A view of your model's attention: ``weights`` (h, N, N), (layers, h, N, N) or BertViz's per-layer tuple.

    ``causal=None`` finds out from the weights (all zero above the diagonal);
    ``names`` names the heads; ``layer`` (0-based) picks the layer shown first.

    >>> import numpy as np
    >>> view = from_attention(np.full((2, 3, 3), 1 / 3), ["a", "b", "c"])
    >>> view.num_heads, view.n_tokens, view.causal
    (2, 3, False)
    """
    token_tuple = tuple(str(t) for t in tokens)
    layers = _stack_layers(weights)  # (L, h, N, N)
    _check(layers, token_tuple)
    n_layers, h = layers.shape[:2]
    found = is_causal(layers)
    if causal is True and not found:
        raise UsageError("causal=True, but some query gives weight to a later key; leave causal out to let "
                         "mhacli find out.")
    head_names = tuple(str(n) for n in names) if names is not None else None
    if head_names is not None and len(head_names) != h:
        raise UsageError(f"{len(head_names)} head names for {h} heads; give one name per head.")
    lnames = tuple(str(n) for n in layer_names) if layer_names is not None else tuple(
        f"layer {i + 1}" for i in range(n_layers))
    if len(lnames) != n_layers:
        raise UsageError(f"{len(lnames)} layer names for {n_layers} layers; give one name per layer.")
    view = AttentionView(token_tuple, layers, lnames, head_names, found if causal is None else bool(causal))
    return view.at_layer(layer) if layer else view

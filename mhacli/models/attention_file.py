"""Your model's attention as an npz (docs/your-model.md): ``weights`` (or ``attentions``, ``attention``) of shape
(h, N, N), (layers, h, N, N) or (layers, batch, h, N, N), ``tokens``, optional ``layer_names``, ``head_names``,
``attention_mask`` and ``kv_heads``, read through :mod:`mhacli.io.archive` as an AttentionView.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import literal, shown_path
from mhacli.io.archive import WEIGHT_KEYS, is_attention_npz
from mhacli.measures.view import AttentionView, from_attention

MAX_ATTENTION_BYTES = 4 * 2**30  # 24 layers × 16 heads × 2,048² float32 is 6 GiB: beyond a picture
TEXT_KEYS = ("tokens", "layer_names", "head_names")
MASK_KEY = "attention_mask"  # Hugging Face's: 1 for a token, 0 for padding (optional)
KV_KEY = "kv_heads"  # g key/value groups the heads share (optional; a grouped-query model's num_key_value_heads)
_HINT = "give an .npz of 'weights' and 'tokens' (docs/your-model.md)"


def is_attention_file(path: Path) -> bool:
    """Whether ``path`` is a regular .npz holding an attention view (read from the zip's names, no data)."""
    from mhacli.io.archive import zip_names

    names = zip_names(path)
    return names is not None and is_attention_npz(names)


def _strings(path: Path, key: str, a: np.ndarray) -> list[str]:
    """A 1-d array of text: str as it is, bytes decoded as UTF-8 (bytes that are not UTF-8 spelled \\xNN)."""
    if a.dtype.kind not in "US" or a.ndim != 1:
        raise UsageError(f"{shown_path(path)}: {key!r} must be a 1-d array of strings, got {a.dtype} {a.shape}.")
    if a.dtype.kind == "S":
        return [bytes(x).decode("utf-8", "backslashreplace") for x in a.tolist()]
    return [str(x) for x in a.tolist()]


def _one_attention(path: Path, arrays: dict[str, np.ndarray], keys: list[str]) -> str:
    """The one attention member: several accepted names are taken only when they hold the same array."""
    first = keys[0]
    for other in keys[1:]:
        if not np.array_equal(arrays[first], arrays[other]):
            raise UsageError(f"{shown_path(path)} holds different attention under {first!r} and {other!r}; "
                             "mha cannot tell which to draw: keep one of them (docs/your-model.md).")
    return first


def load_attention(path: Path, layer: int | None = None, batch_index: int | None = None,
                   raw_tokens: bool = False) -> AttentionView:
    """The attention view saved in ``path``; ``layer`` (from 0, as everywhere) picks the layer shown,
    ``batch_index`` (0-based) one sequence of a batch; ``raw_tokens`` keeps the tokenizer's markers; a
    ``kv_heads`` member (g) says which heads share a key/value group."""
    from mhacli.io.archive import read_npz

    path = Path(path)

    def bad(detail: str) -> UsageError:
        return UsageError(f"{shown_path(path)} is not a readable attention file: {detail}.")

    chosen: list[str] = []  # the attention member, decided from the names before anything is read

    def check_names(names: list[str]) -> None:
        if not is_attention_npz(names):
            found = ", ".join(sorted(names)[:8]) or "nothing"
            raise UsageError(f"{shown_path(path)} holds no attention ('weights', 'attentions' or 'attention') and "
                             f"'tokens' arrays (it holds {found}); see docs/your-model.md.")
        chosen.extend(k for k in WEIGHT_KEYS if k in names)

    arrays = read_npz(path, noun="attention file", hint=_HINT, bad=bad, cap=MAX_ATTENTION_BYTES,
                      names_check=check_names,
                      wanted=lambda name: name in TEXT_KEYS or name in chosen or name in (MASK_KEY, KV_KEY))
    key = _one_attention(path, arrays, chosen)
    tokens = _strings(path, "tokens", arrays["tokens"])
    layer_names = _strings(path, "layer_names", arrays["layer_names"]) if "layer_names" in arrays else None
    head_names = _strings(path, "head_names", arrays["head_names"]) if "head_names" in arrays else None
    if arrays[key].dtype.kind not in "fiu":
        raise UsageError(f"{shown_path(path)}: {key!r} must hold numbers, got {arrays[key].dtype}.")
    try:
        view = from_attention(arrays[key], tokens, names=head_names, layer_names=layer_names,
                              batch_index=batch_index, attention_mask=arrays.get(MASK_KEY), raw_tokens=raw_tokens,
                              kv_heads=_kv_heads(path, arrays.get(KV_KEY), arrays[key]))
    except UsageError as exc:  # the same check as in Python, said of this file
        where = literal(shown_path(path))
        raise UsageError(f"{where}: {exc.template}", **exc.params) from None
    view = view if layer is None else view.at_layer(layer)
    return replace(view, source=str(path))


def _kv_heads(path: Path, a: np.ndarray | None, attention: np.ndarray) -> int | None:
    """The file's ``kv_heads`` as one whole number dividing its heads (h: the third axis from the end), or None."""
    from mhacli.attention.config import divisors

    if a is None:
        return None
    if a.shape != () or a.dtype.kind not in "iu":
        raise UsageError(f"{shown_path(path)}: 'kv_heads' must be one whole number (the key/value groups g), "
                         f"got {a.dtype} {a.shape}.")
    g, h = int(a), attention.shape[-3] if attention.ndim >= 3 else 0
    if h and (not 1 <= g <= h or h % g):
        raise UsageError(f"{shown_path(path)}: its 'kv_heads' {g} must divide its {h} heads (each key/value group "
                         f"serves the same number of query heads): one of {', '.join(map(str, divisors(h)))}.")
    return g


def save_attention(view: AttentionView, path: Path) -> None:
    """Write ``view`` in the same format (used by the tests and by anyone converting a trace)."""
    arrays: dict[str, Any] = {"weights": view.layers, "tokens": np.array(view.tokens),
                              "layer_names": np.array(view.layer_names)}
    if view.head_names:
        arrays["head_names"] = np.array(view.head_names)
    if view.padded is not None:
        arrays[MASK_KEY] = (~view.padded).astype(np.int64)  # (N,): 1 for a token, 0 for padding
    if view.key_value_heads is not None:
        arrays[KV_KEY] = np.array(view.key_value_heads)
    np.savez(path, **arrays)

"""Your model's attention saved as an npz: ``weights`` (h, N, N) or (layers, h, N, N), ``tokens``, and
optionally ``layer_names`` and ``head_names``; read back as an :class:`~mhacli.core.view.AttentionView`.

docs/your-model.md shows how to write one from a Hugging Face model's ``output_attentions``.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from mhacli.core.errors import UsageError
from mhacli.core.messages import shown_path
from mhacli.core.view import AttentionView, from_attention

MAX_ATTENTION_BYTES = 4 * 2**30  # 24 layers × 16 heads × 2,048² float32 is 6 GiB: beyond a picture


def is_attention_npz(names: list[str]) -> bool:
    """An attention file has ``weights`` and ``tokens`` and none of a trace's step arrays."""
    return "weights" in names and "tokens" in names and "Q" not in names


def is_attention_file(path: Path) -> bool:
    """Whether ``path`` is a regular .npz holding an attention view (read from the zip's names, no data)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with zipfile.ZipFile(path) as archive:
            names = [n[:-4] for n in archive.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return is_attention_npz(names)


def _strings(path: Path, key: str, a: np.ndarray) -> list[str]:
    if a.dtype.kind not in "US" or a.ndim != 1:
        raise UsageError(f"{shown_path(path)}: {key!r} must be a 1-d array of strings, got {a.dtype} {a.shape}.")
    return [str(x) for x in a.tolist()]


def load_attention(path: Path, layer: int | None = None) -> AttentionView:
    """The attention view saved in ``path``; ``layer`` (1-based, as on the command line) picks the layer shown."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UsageError(f"cannot read {shown_path(path)}: {exc.strerror}.") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{shown_path(path)} is not a regular file; give an .npz file.")
    if info.st_size > MAX_ATTENTION_BYTES:
        raise UsageError(f"{shown_path(path)} is {info.st_size:,} bytes, more than the {MAX_ATTENTION_BYTES:,} "
                         "an attention picture can use; save fewer layers or a shorter text.")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays: dict[str, Any] = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{shown_path(path)} is not a readable .npz ({type(exc).__name__}).") from None
    if not is_attention_npz(list(arrays)):
        raise UsageError(f"{shown_path(path)} holds no 'weights' and 'tokens' arrays; see docs/your-model.md.")
    tokens = _strings(path, "tokens", arrays["tokens"])
    layer_names = _strings(path, "layer_names", arrays["layer_names"]) if "layer_names" in arrays else None
    head_names = _strings(path, "head_names", arrays["head_names"]) if "head_names" in arrays else None
    if arrays["weights"].dtype.kind not in "fiu":
        raise UsageError(f"{shown_path(path)}: 'weights' must hold numbers, got {arrays['weights'].dtype}.")
    view = from_attention(arrays["weights"], tokens, names=head_names, layer_names=layer_names)
    view = view if layer is None else view.at_layer(layer - 1)
    return AttentionView(view.tokens, view.layers, view.layer_names, view.head_names, view.causal, view.layer,
                         str(path))


def save_attention(view: AttentionView, path: Path) -> None:
    """Write ``view`` in the same format (used by the tests and by anyone converting a trace)."""
    arrays: dict[str, Any] = {"weights": view.layers, "tokens": np.array(view.tokens),
                              "layer_names": np.array(view.layer_names)}
    if view.head_names:
        arrays["head_names"] = np.array(view.head_names)
    np.savez(path, **arrays)

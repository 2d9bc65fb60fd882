"""Reading your own attention weights from a file: an npz or (with PyTorch installed) a ``.pt`` state dict.

The npz holds the arrays of one ``nn.MultiheadAttention`` under PyTorch's names
(``in_proj_weight``, ``out_proj.weight``, optional ``in_proj_bias`` and
``out_proj.bias``), for example written by
``np.savez("mine.npz", **{k: v.numpy() for k, v in module.state_dict().items()})``.
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
from mhacli.core.weights import AttentionWeights, from_state_dict

MAX_WEIGHT_BYTES = 2 * 2**30  # a d = 8192 layer is 1 GiB in float64; more is not a teaching run


def _check_file(path: Path) -> None:
    """Refuse at once what is not a regular file of a sane size (a device would be read forever)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"no weights file {shown_path(path)}; check the path.") from None
    except OSError as exc:
        raise UsageError(f"cannot read the weights file {shown_path(path)}: {exc.strerror}.") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{shown_path(path)} is not a regular file; give an .npz or .pt file of weights.")
    if info.st_size > MAX_WEIGHT_BYTES:
        raise UsageError(f"{shown_path(path)} is {info.st_size:,} bytes, more than the "
                         f"{MAX_WEIGHT_BYTES:,} an attention layer for teaching needs.")


def _read_npz(path: Path) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{shown_path(path)} is not a readable .npz of weights ({type(exc).__name__}).") from None


def _read_pt(path: Path) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        raise UsageError(f"{shown_path(path)} is a PyTorch file and PyTorch is not installed; save the state "
                         "dict as .npz instead (see docs/your-model.md).") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # never unpickles arbitrary objects
    except Exception as exc:  # torch raises many kinds for a bad file
        raise UsageError(f"{shown_path(path)} is not a readable PyTorch state dict ({type(exc).__name__}).") from None
    if not isinstance(state, dict):
        raise UsageError(f"{shown_path(path)} holds a {type(state).__name__}, not a state dict.")
    return state


def read_state(path: Path) -> dict[str, Any]:
    """The arrays of a weights file, by name, after the file itself was checked."""
    path = Path(path)
    _check_file(path)
    if path.suffix.lower() in (".pt", ".pth"):
        return _read_pt(path)
    return _read_npz(path)


SHIPPED_MODEL = "trained.npz"  # in mhacli/data/, made by the command in docs/training.md
SHIPPED_ALONE = "trained-1-head.npz"  # the same task and command with --heads 1: mha compare's lone head
SHIPPED_GRAMMAR = "grammar.npz"  # the grammar model (--weights grammar), by the command in docs/training.md
SHIPPED_GRAMMAR_ALONE = "grammar-1-head.npz"  # the same command with --heads 1


def shipped_model_path(alone: bool = False, name: str = "trained") -> Path:
    """A model that ships in the package (``--weights trained`` or ``grammar``), or its one-head twin."""
    from importlib import resources

    if name == "grammar":
        file = SHIPPED_GRAMMAR_ALONE if alone else SHIPPED_GRAMMAR
    else:
        file = SHIPPED_ALONE if alone else SHIPPED_MODEL
    return Path(str(resources.files("mhacli") / "data" / file))


def _is_trained(path: Path) -> bool:
    """A file written by ``mha train --save`` (its ``kind`` member says so), not a PyTorch state dict."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return "kind" in getattr(npz, "files", ()) and "embedding" in npz.files
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return False


def resolve_weights(value: str) -> Any:
    """``--weights VALUE`` that is not random or designed: the shipped trained model, a file, or a refusal.

    Returns :class:`AttentionWeights` (your nn.MultiheadAttention) or a trained model.
    """
    from mhacli.core.config import WEIGHT_KINDS
    from mhacli.core.messages import shown
    from mhacli.io.trained import load_trained

    if value in ("trained", "grammar"):
        return load_trained(shipped_model_path(name=value))[0]
    path = Path(value)
    try:
        exists = path.exists()
    except OSError as exc:  # a name the file system refuses (too long): a bad value, not a failure
        raise UsageError(f"cannot use the weights file {shown_path(path)}: {exc.strerror or exc}.") from None
    if not exists and path.suffix.lower() not in (".npz", ".pt", ".pth"):
        raise UsageError(f"unknown weights {shown(value)}; choose one of: {', '.join(WEIGHT_KINDS)}, "
                         "or give the path of a weights file (.npz or .pt).")
    _check_file(path)
    if path.suffix.lower() == ".npz" and _is_trained(path):
        return load_trained(path)[0]
    return load_weights(path)


def load_weights(path: Path) -> AttentionWeights:
    """Your nn.MultiheadAttention's weights from an npz or .pt file, checked."""
    return from_state_dict(read_state(path))


def run(text: str, **options: Any) -> Any:
    """:func:`mhacli.core.trace.run`, where ``weights`` may also be "trained" (the model shipped in the
    package) or the path of a weights file (your nn.MultiheadAttention's, or one from ``mha train --save``).

    >>> trace = run("the cat sat", heads=2, weights="mine.npz")  # doctest: +SKIP
    """
    from mhacli.core.trace import run as run_core

    given = options.get("weights")
    if isinstance(given, os.PathLike) or (isinstance(given, str) and given not in ("random", "designed")):
        options = {**options, "weights": resolve_weights(str(given))}
    return run_core(text, **options)

"""PyTorch, optional, imported only where needed under one guard: its import can abort the process from C++ under
``ulimit -v``, so the limit is checked first; every failure becomes one sentence, its warnings are silenced."""

from __future__ import annotations

import warnings
from types import ModuleType

from mhacli.io.host import address_space_left

# Importing torch after numpy grows the address space by about 500 MiB (docs/performance.md); 768 MiB of
# headroom leaves a margin for other builds.
TORCH_ADDRESS_SPACE = 768 * 2**20

_failure: list[str] = []  # why the import failed, once: a second import of a half-loaded torch is not safe
_last: list[str] = []  # why the latest attempt failed, whatever the reason (for the note that says so)


class TorchUnavailable(Exception):
    """PyTorch cannot be used here; ``str(exc)`` says why in one clause ("PyTorch is not installed")."""


def load_torch() -> ModuleType:
    """``torch``, or :class:`TorchUnavailable` saying why not (never an abort, never a stray warning)."""
    try:
        torch = _load()
    except TorchUnavailable as exc:
        _last[:] = [str(exc)]
        raise
    _last.clear()
    return torch


def _load() -> ModuleType:
    import sys

    if _failure:
        raise TorchUnavailable(_failure[0])
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "from_numpy"):
        return sys.modules["torch"]
    left = address_space_left()
    if left is not None and left < TORCH_ADDRESS_SPACE:  # checked again next time: the limit may change
        raise TorchUnavailable(f"PyTorch cannot start under this process's memory limit (ulimit -v leaves "
                               f"{left // 2**20} MiB; it needs about {TORCH_ADDRESS_SPACE // 2**20} MiB)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
    except ImportError as exc:
        # Nothing of torch was loaded (or its import stopped cleanly): a later import may be tried again,
        # e.g. after a test put sys.modules["torch"] back.
        raise TorchUnavailable("PyTorch is not installed" if getattr(exc, "name", None) == "torch"
                               else f"PyTorch is installed but cannot be imported ({type(exc).__name__})") from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # MemoryError, OSError from a shared library, RuntimeError: all one line
        reason = f"PyTorch is installed but cannot be imported ({type(exc).__name__})"
        _failure.append(reason)  # a half-loaded torch: importing it a second time is not safe
        raise TorchUnavailable(reason) from None
    return torch


def torch_or_none() -> ModuleType | None:
    """``torch`` if it can be used here, else None (for what PyTorch only adds to: a second reference)."""
    try:
        return load_torch()
    except TorchUnavailable:
        return None


def torch_reason() -> str | None:
    """Why PyTorch could not be used, when the latest import tried failed (else None)."""
    return _last[0] if _last else None

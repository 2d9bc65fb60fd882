"""PyTorch, imported only where it is needed and under one guard.

PyTorch is optional (reading ``.pt`` weights, checking a run against its own
attention).  Importing it can fail in ways an ``except ImportError`` never sees:
under an address-space limit (``ulimit -v`` around 550 MB) its shared libraries
abort the whole process from C++ (``std::bad_alloc``, "cannot allocate memory
for thread-local data"), before Python could catch anything.  So the limit is
checked first, every exception of the import becomes one sentence, and the
warnings PyTorch prints while loading are silenced: the caller turns the
sentence into one note or one error line.
"""

from __future__ import annotations

import warnings
from types import ModuleType

# Measured on the 2-core Linux machine (torch 2.13, CPU): importing torch after numpy grows the
# address space by ~500 MiB (VmPeak 139 MB -> 639 MB); with 600 MB of ulimit -v it aborted, with
# 650 MB it loaded.  Asking for 768 MiB of headroom leaves a margin for other builds.
TORCH_ADDRESS_SPACE = 768 * 2**20

_failure: list[str] = []  # why the import failed, once: a second import of a half-loaded torch is not safe


class TorchUnavailable(Exception):
    """PyTorch cannot be used here; ``str(exc)`` says why in one clause ("PyTorch is not installed")."""


def _address_space_left() -> int | None:
    """Bytes this process may still map under ``ulimit -v`` (None: no limit)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None
    if soft in (resource.RLIM_INFINITY, -1) or soft <= 0:
        return None
    used = 0
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return max(0, soft - used)


def load_torch() -> ModuleType:
    """``torch``, or :class:`TorchUnavailable` saying why not (never an abort, never a stray warning)."""
    import sys

    if _failure:
        raise TorchUnavailable(_failure[0])
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "from_numpy"):
        return sys.modules["torch"]
    left = _address_space_left()
    if left is not None and left < TORCH_ADDRESS_SPACE:
        reason = (f"PyTorch cannot start under this process's memory limit (ulimit -v leaves {left // 2**20} MiB; "
                  f"it needs about {TORCH_ADDRESS_SPACE // 2**20} MiB)")
        _failure.append(reason)
        raise TorchUnavailable(reason)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
    except ImportError as exc:
        reason = ("PyTorch is not installed" if getattr(exc, "name", None) == "torch"
                  else f"PyTorch is installed but cannot be imported ({type(exc).__name__})")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # MemoryError, OSError from a shared library, RuntimeError: all one line
        reason = f"PyTorch is installed but cannot be imported ({type(exc).__name__})"
    else:
        return torch
    _failure.append(reason)
    raise TorchUnavailable(reason)


def torch_or_none() -> ModuleType | None:
    """``torch`` if it can be used here, else None (for what PyTorch only adds to: a second reference)."""
    try:
        return load_torch()
    except TorchUnavailable:
        return None


def torch_reason() -> str | None:
    """Why PyTorch could not be used, once an import was tried and failed (else None)."""
    return _failure[0] if _failure else None

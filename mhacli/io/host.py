"""What this process may use of the machine (cores, address space, the BLAS numpy loaded), read here and handed
to the core as numbers."""

from __future__ import annotations

import os


def cpu_count() -> int:
    """Cores this process may run on (its affinity mask, not the whole machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def address_space_left() -> int | None:
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


def numpy_blas() -> list[dict]:
    """The BLAS libraries numpy loaded, as threadpoolctl sees them (PyTorch's own, once imported, are left out)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - a declared dependency
        return []
    blas = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    return [lib for lib in blas if "numpy" in str(lib.get("filepath", ""))] or blas


def blas_kernel() -> str:
    """numpy's BLAS and the kernel it picked for this CPU ('openblas 0.3.31 Haswell'), or 'unknown': a trained
    model file records it, since another kernel rounds differently and thousands of Adam steps carry that far."""
    own = numpy_blas()
    if not own:
        return "unknown"
    return " ".join(str(own[0][k]) for k in ("internal_api", "version", "architecture") if own[0].get(k))

"""Exports a student can check: the trace as ``.npz`` and as JSON, and back.

The npz holds exactly the arrays the issue promises, plain dtypes only, so
``np.load(path)`` works without ``allow_pickle``.  :func:`load_trace` reads
one back into a :class:`~mhacli.core.trace.Trace` without recomputing anything.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from mhacli import __version__
from mhacli.core.config import Config
from mhacli.core.embed import vocabulary
from mhacli.core.trace import Trace
from mhacli.core.errors import UsageError
from mhacli.io.files import atomic_write

ARRAY_FIELDS = ("X", "W_q", "W_k", "W_v", "W_o", "Q", "K", "V", "heads", "scores", "weights",
                "concat", "output")
SCALAR_FIELDS = ("num_heads", "d_model", "seed", "causal")
NPZ_KEYS = ("tokens", *ARRAY_FIELDS, *SCALAR_FIELDS)


def npz_arrays(trace: Trace) -> dict[str, np.ndarray]:
    """The arrays of an npz export, by name."""
    out: dict[str, np.ndarray] = {"tokens": np.array(trace.tokens, dtype=np.str_)}
    for name in ARRAY_FIELDS:
        out[name] = np.asarray(getattr(trace, name))
    out["num_heads"] = np.array(trace.num_heads, dtype=np.int64)
    out["d_model"] = np.array(trace.d_model, dtype=np.int64)
    out["seed"] = np.array(trace.config.seed, dtype=np.int64)
    out["causal"] = np.array(trace.config.causal, dtype=np.bool_)
    return out


def save_npz(trace: Trace, path: Path) -> Path:
    """Write the trace as an uncompressed npz, atomically."""
    arrays = npz_arrays(trace)
    return atomic_write(Path(path), lambda handle: np.savez(handle, **arrays))


def _shape_error(path: Path, detail: str) -> UsageError:
    from mhacli.core.messages import shown_path

    return UsageError(f"{shown_path(path)} is not a valid mha trace: {detail}.")


def _describe_read_error(exc: BaseException) -> str:
    """Why numpy could not open the file, in words a student can act on."""
    text = str(exc)
    if isinstance(exc, (zipfile.BadZipFile, EOFError)) or "zip" in text.lower():
        return "it is truncated or damaged (was it copied before 'mha explain' finished?); write it again"
    if "Object arrays" in text:
        return "it holds Python objects, which mha never writes"
    if "pickle" in text.lower():
        return "it is not an npz file (text or another format)"
    return f"it cannot be read as npz ({type(exc).__name__})"


def load_trace(path: Path) -> Trace:
    """Read an npz written by ``mha explain --save-npz`` back into a Trace (no recomputation)."""
    from mhacli.core.config import memory_limit_bytes
    from mhacli.core.messages import shown_path

    path = Path(path)
    where = shown_path(path)
    hint = "write one with 'mha explain TEXT --save-npz FILE'"
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as exc:
        raise UsageError(f"trace file {where} cannot be used: {exc.strerror or exc}.") from None
    if not exists:
        raise UsageError(f"trace file {where} does not exist; {hint}.")
    if is_dir:
        raise UsageError(f"trace file {where} is a folder, not an npz file; {hint}.")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                # Refuse a (tampered) archive that would unpack beyond memory, before unpacking it.
                unpacked = sum(info.file_size for info in archive.infolist())
            if unpacked > memory_limit_bytes():
                raise _shape_error(path, "its arrays would not fit in this machine's memory")
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise _shape_error(path, f"it is a single .npy array, not an npz archive; {hint}")
        with data:
            missing = [k for k in NPZ_KEYS if k not in data.files]
            if len(missing) == len(NPZ_KEYS):
                found = ", ".join(sorted(data.files)[:6]) or "nothing"
                raise _shape_error(path, f"it was not written by mha (it holds {found}); {hint}")
            if missing:
                raise _shape_error(path, f"missing {', '.join(missing)}")
            arrays = {k: data[k] for k in NPZ_KEYS}
    except UsageError:
        raise
    except PermissionError:
        raise UsageError(f"trace file {where} cannot be read (permission denied).") from None
    except MemoryError:
        raise _shape_error(path, "its arrays would not fit in this machine's memory") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise _shape_error(path, _describe_read_error(exc)) from None
    return _trace_from_arrays(path, arrays)


def _trace_from_arrays(path: Path, a: dict[str, np.ndarray]) -> Trace:
    """Check every shape against the others, then build the Trace."""
    try:
        h, d = int(a["num_heads"]), int(a["d_model"])
        seed, causal = int(a["seed"]), bool(a["causal"])
    except (TypeError, ValueError):
        raise _shape_error(path, "num_heads, d_model, seed and causal must be scalars") from None
    if a["tokens"].dtype.kind != "U" or a["tokens"].ndim != 1:
        raise _shape_error(path, "tokens must be a 1-D array of strings")
    n = a["tokens"].shape[0]
    if n < 1 or h < 1 or d < 1 or d % h:
        raise _shape_error(path, f"inconsistent sizes (N={n}, d_model={d}, num_heads={h})")
    expected = {
        "X": (n, d), "W_q": (d, d), "W_k": (d, d), "W_v": (d, d), "W_o": (d, d),
        "Q": (h, n, d // h), "K": (h, n, d // h), "V": (h, n, d // h), "heads": (h, n, d // h),
        "scores": (h, n, n), "weights": (h, n, n), "concat": (n, d), "output": (n, d),
    }
    for name, shape in expected.items():
        if a[name].shape != shape:
            raise _shape_error(path, f"{name} has shape {a[name].shape}, expected {shape}")
        if a[name].dtype.kind != "f":
            raise _shape_error(path, f"{name} is not a float array")
    w = a["weights"]
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.allclose(w.sum(-1), 1.0, atol=1e-4):
        raise _shape_error(path, "its attention weights are not rows of probabilities (tampered?)")
    dtype = "float32" if a["X"].dtype == np.float32 else "float64"
    try:
        config = Config(heads=h, d_model=d, seed=seed, causal=causal, dtype=dtype)
    except UsageError as exc:
        raise _shape_error(path, str(exc).rstrip(".")) from None
    tokens = tuple(str(t) for t in a["tokens"])
    from mhacli.core.attention import causal_mask

    return Trace(
        config=config, tokens=tokens, token_ids=vocabulary(tokens)[1],
        **{name: a[name] for name in ARRAY_FIELDS},
        mask=causal_mask(n) if causal else None, source=str(path),
    )


def _jsonable(a: np.ndarray) -> Any:
    """Nested lists; −∞ (masked scores) becomes null, since JSON has no infinity."""
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        return [_jsonable(row) for row in a] if a.ndim > 1 else [
            None if not math.isfinite(x) else x for x in a.tolist()]
    return a.tolist()


def trace_document(trace: Trace) -> dict[str, Any]:
    """Everything a student needs to check the run, as one JSON-ready dict."""
    from mhacli.core.analysis import summarize_heads

    params = trace.parameters
    return {
        "mhacli_version": __version__,
        "config": trace.config.to_dict(),
        "tokens": list(trace.tokens),
        "token_ids": trace.token_ids.tolist(),
        "steps": [s.to_dict() for s in trace.steps],
        "total_madds": sum(s.madds for s in trace.steps),
        "parameters": params.to_dict(),
        "split_equals_direct_max_diff": trace.split_equals_direct(),
        "rules": list(trace.rules) if trace.rules else None,
        "head_summaries": [
            {"head": s.head + 1, "top_key": s.top_key, "top_token": trace.tokens[s.top_key],
             "top_share": s.top_share, "mean_entropy_bits": s.mean_entropy,
             "max_entropy_bits": s.max_entropy, "focus": s.focus}
            for s in summarize_heads(trace.weights, trace.config.causal)
        ],
        "notes": {
            "layout": "PyTorch nn.MultiheadAttention: Q = X @ W_q.T; head i uses rows i*d_k:(i+1)*d_k of W_q.",
            "masked_scores": "Masked scores are -inf in the npz and null here (JSON has no infinity).",
        },
        "arrays": {name: _jsonable(np.asarray(a)) for name, a in npz_arrays(trace).items()
                   if name not in ("tokens", *SCALAR_FIELDS)},
    }


def trace_json(trace: Trace) -> str:
    """:func:`trace_document` serialised (strict JSON: no NaN, no Infinity)."""
    return json.dumps(trace_document(trace), ensure_ascii=False, allow_nan=False)

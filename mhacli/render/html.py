"""One self-contained interactive page of a trace: ``mha explain … --html PATH``.

The page is a template shipped in the package (``mhacli/templates/page.html``)
with the trace's data embedded as JSON.  Everything is inline — styles,
script, data — so the file opens in any browser with no network, no server
and no Python.  Like every renderer, this module only reads the trace.

Safety: the data sits in ``<script type="application/json">`` with ``<``,
``>``, ``&``, U+2028 and U+2029 written as ``\\u`` escapes, so no token can
close the script element; the page's script then puts tokens on screen with
``textContent`` only, so a token such as ``<script>`` is shown as text.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mhacli import __version__
from mhacli.render import theme
from mhacli.core.analysis import summarize_heads
from mhacli.core.trace import Trace
from mhacli.io.files import atomic_write
from mhacli.core.tokenize import label

DEFAULT_MAX_TOKENS = 200
DATA_PLACEHOLDER = "/*MHA_DATA_JSON*/"
WEIGHT_DECIMALS = 4  # exact enough to read, small enough that 200 tokens stay a few MB
SCORE_DECIMALS = 3

# Written into a JSON string inside <script>: these must never appear raw.
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return "".join(_JSON_ESCAPES.get(ch, ch) for ch in text)


def _rounded(a: np.ndarray, decimals: int) -> list:
    """Nested lists rounded to ``decimals``; −∞ (masked scores) becomes null."""
    a = np.round(np.asarray(a, dtype=np.float64), decimals)
    out = a.tolist()
    if not np.all(np.isfinite(a)):
        def clean(x: Any) -> Any:
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x if np.isfinite(x) else None
        out = clean(out)
    return out


def page_data(trace: Trace, max_tokens: int = DEFAULT_MAX_TOKENS) -> dict[str, Any]:
    """Everything the page shows, as one JSON-ready dict (the first ``max_tokens`` tokens)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    n = trace.n_tokens
    m = min(n, max_tokens)
    weights = np.asarray(trace.weights, dtype=np.float64)  # (h, N, N)
    window = weights[:, :m, :m]  # (h, N, N) -> (h, m, m)
    average = weights.mean(axis=0)[:m, :m]  # (h, N, N) -> (m, m): what PyTorch returns by default
    params = trace.parameters
    steps = trace.steps
    summaries = summarize_heads(weights, trace.config.causal)
    mask = np.asarray(trace.mask)[:m, :m] if trace.mask is not None else None
    return {
        "mhacli_version": __version__,
        "source": trace.source,
        "config": trace.config.to_dict(),
        "n_tokens": n,
        "window": {"start": 0, "stop": m, "total": n, "max_tokens": max_tokens, "windowed": m < n},
        "tokens": list(trace.tokens[:m]),
        "labels": [label(t, 24) for t in trace.tokens[:m]],
        "heads": trace.num_heads,
        "colors": [theme.head_color(i) for i in range(trace.num_heads)],
        "average_color": theme.AVERAGE_COLOR,
        "mask_color": theme.MASK_COLOR,
        "hatch_color": theme.HATCH_COLOR,
        # The same anchors the terminal grid interpolates, sampled from the figures' colour map.
        "cmap": {"name": theme.HEATMAP_CMAP, "stops": list(theme.HEATMAP_ANCHORS)},
        "decimals": WEIGHT_DECIMALS,
        "weights": _rounded(window, WEIGHT_DECIMALS),
        "average": _rounded(average, WEIGHT_DECIMALS),
        # Attention each query pays to tokens cut off by the window (0 when not windowed).
        "outside": _rounded(weights[:, :m, m:].sum(axis=-1), WEIGHT_DECIMALS),
        "outside_average": _rounded(weights.mean(axis=0)[:m, m:].sum(axis=-1), WEIGHT_DECIMALS),
        "scores": _rounded(np.asarray(trace.scores)[:, :m, :m], SCORE_DECIMALS),
        "causal": bool(trace.config.causal),
        "mask": mask.astype(int).tolist() if mask is not None else None,
        "rules": list(trace.rules) if trace.rules else None,
        "steps": [s.to_dict() for s in steps],
        "total_madds": sum(s.madds for s in steps),
        "parameters": {**params.to_dict(), "d_model": params.d_model, "heads": params.heads,
                       "d_k": params.d_k},
        "split_equals_direct_max_diff": trace.split_equals_direct(),
        "summaries": [
            {"head": s.head, "top_key": s.top_key, "top_label": label(trace.tokens[s.top_key], 24),
             "top_share": s.top_share, "mean_entropy": s.mean_entropy,
             "max_entropy": s.max_entropy, "focus": s.focus, "describe": s.describe()}
            for s in summaries
        ],
    }


def template() -> str:
    """The page template shipped inside the package."""
    return (resources.files("mhacli.render") / "templates" / "page.html").read_text(encoding="utf-8")


def render_html(trace: Trace, max_tokens: int = DEFAULT_MAX_TOKENS) -> str:
    """The whole page as one string."""
    parts = template().split(DATA_PLACEHOLDER)
    if len(parts) != 2:  # pragma: no cover - guards the shipped template
        raise RuntimeError("the page template must contain the data placeholder exactly once")
    return parts[0] + embed_json(page_data(trace, max_tokens)) + parts[1]


def write_html(trace: Trace, path: Path, max_tokens: int = DEFAULT_MAX_TOKENS) -> Path:
    """Write the interactive page for ``trace`` to ``path``, atomically; returns the path."""
    page = render_html(trace, max_tokens).encode("utf-8")
    return atomic_write(Path(path), lambda handle: handle.write(page))

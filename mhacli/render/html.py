"""One self-contained interactive page of a trace or an attention view: ``mha explain … --html PATH``.

The package's template (``mhacli/templates/page.html``) with the data embedded as JSON; styles, script and data
inline, so it opens in any browser with no network, server or Python. Safety: ``<``, ``>``, ``&``, U+2028/9 are
``\\u`` escapes, so no token closes the script element; the page shows tokens with ``textContent`` only; every
string is :func:`escaped` first, so a control or bidi character is spelled out everywhere.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.version import __version__
from mhacli.measures.analysis import FIXED, Analysis
from mhacli.attention.messages import printable
from mhacli.measures import narrate
from mhacli.measures.narrate import head_caption
from mhacli.attention.tokenize import label
from mhacli.measures.window import PAGE_MAX_TOKENS
from mhacli.io.files import atomic_write
from mhacli.render import theme
from mhacli.render.labels import is_view, layer_note, pattern_words, weights_note

if TYPE_CHECKING:
    from mhacli.measures.view import AttentionView
    from mhacli.pipeline import Run
    from mhacli.render.labels import Shown

DEFAULT_MAX_TOKENS = PAGE_MAX_TOKENS
DATA_PLACEHOLDER = "/*MHA_DATA_JSON*/"
WEIGHT_DECIMALS = 4  # exact enough to read, small enough that 200 tokens stay a few MB
SCORE_DECIMALS = 3
LAYERS_BUDGET = 2_000_000  # weights embedded for the layer picker (about 15 MB of JSON); beyond, the shown layer only

# Written into a JSON string inside <script>: these must never appear raw.
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return "".join(_JSON_ESCAPES.get(ch, ch) for ch in text)


_NUMBERS = frozenset(("weights", "average", "outside", "outside_average", "scores", "mask"))


def escaped(value: Any) -> Any:
    """``value`` with every string in it (at any depth) through :func:`~mhacli.attention.messages.printable`: a
    control or bidi character in a token or a file name is shown spelled out (``\\x1b``), never obeyed."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):  # the arrays of numbers hold no text: not walked (1.4 M numbers in a BERT view)
        return {key: v if key in _NUMBERS else escaped(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value


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


def summaries(analysis: Analysis, hide_rules: bool = False) -> list[dict[str, Any]]:
    """Each head's per-query measures for the page (names left out with ``hide_rules``)."""
    out = []
    for s in analysis.heads:
        named = not hide_rules
        key = s.pattern_key if named and s.pattern == FIXED else None
        out.append({
            "head": s.head, "pattern": s.pattern if named else None, "pattern_key": key,
            "pattern_label": label(analysis.tokens[key], 24) if key is not None else None,
            "pattern_share": s.pattern_share if named else None,
            "pattern_rows": s.pattern_rows if named else None, "pattern_of": s.pattern_of if named else None,
            "counted_rows": s.counted_rows, "tied_rows": s.tied_rows,
            "words": pattern_words(analysis, s.head, hide_rules), "caption": head_caption(analysis, s.head, hide_rules),
            "mean_top_weight": s.mean_top_weight, "mean_entropy": s.mean_entropy, "max_entropy": s.max_entropy,
            "focus": s.focus, "describe": s.describe(),
        })
    return out


def _layer(shown: Shown, m: int, hide_rules: bool, analysis: Analysis) -> dict[str, Any]:
    """What changes from layer to layer (or is all there is, for a run): weights, average, measures, label.

    ``analysis``: the layer's measures for the page's window (each row's weight outside the first m tokens)."""
    weights = np.asarray(shown.weights, dtype=np.float64)  # (h, N, N)
    windowed = analysis
    outside = (np.zeros(weights.shape[:2]) if windowed.outside_rows is None
               else np.asarray(windowed.outside_rows))  # (h, N)
    return {
        "weights": _rounded(weights[:, :m, :m], WEIGHT_DECIMALS),  # (h, N, N) -> (h, m, m)
        "average": _rounded(np.asarray(analysis.average)[:m, :m], WEIGHT_DECIMALS),  # PyTorch's default
        # Attention each query pays to tokens cut off by the window (0 when not windowed).
        "outside": _rounded(outside[:, :m], WEIGHT_DECIMALS),
        "outside_average": _rounded(np.asarray(windowed.outside_average)[:m], WEIGHT_DECIMALS),
        "summaries": summaries(analysis, hide_rules),
        "weights_label": weights_note(shown, hide_rules, analysis),
        "layer_note": layer_note(shown),
    }


def _run_only(trace: Any, m: int, split_diff: float | None) -> dict[str, Any]:
    """What only a run of the tool has: its config, scores, steps and parameters."""
    params = trace.parameters
    steps = trace.steps
    return {
        "config": trace.config.to_dict(),
        "scores": _rounded(np.asarray(trace.scores)[:, :m, :m], SCORE_DECIMALS),
        "steps": [s.to_dict() for s in steps],
        "total_madds": sum(s.madds for s in steps),
        "parameters": {**params.to_dict(), "d_model": params.d_model, "heads": params.heads, "d_k": params.d_k},
        "split_equals_direct_max_diff": split_diff,
    }


def _layers(view: AttentionView, m: int, hide_rules: bool, shown: dict[str, Any],
            layers: Sequence[Analysis]) -> list[dict[str, Any]] | None:
    """Every layer for the page's layer picker, or None when there is one layer, they would not fit,
    or their analyses were not given (``layers``: one per layer, from :func:`mhacli.pipeline.paged`)."""
    if view.n_layers < 2 or len(layers) < 2 or view.n_layers * view.num_heads * m * m > LAYERS_BUDGET:
        return None
    return [shown if k == view.layer else _layer(view.at_layer(k), m, hide_rules, layers[k])
            for k in range(view.n_layers)]


MODEL_BUDGET = 400_000  # numbers of the model view's thumbnails; beyond, each averages a block of f × f weights


def model_data(view: AttentionView, m: int) -> dict[str, Any]:
    """Every layer × head as thumbnails (BertViz's ``model_view``), for the page's model view: the first ``m``
    tokens' weights as whole percents (a thumbnail shows no more), deflated; when they would exceed
    MODEL_BUDGET numbers, each thumbnail cell averages an f × f block of weights."""
    import base64
    import zlib

    n_layers, h = view.n_layers, view.num_heads
    f = 1
    while n_layers * h * (-(-m // f)) ** 2 > MODEL_BUDGET:
        f += 1
    t = -(-m // f)
    w = np.zeros((n_layers, h, t * f, t * f))
    w[..., :m, :m] = view.layers[..., :m, :m]
    pooled = w.reshape(n_layers, h, t, f, t, f).mean(axis=(3, 5))  # (L, h, m, m) -> (L, h, t, t)
    levels = np.rint(pooled * 255).astype(np.uint8)
    return {"u8": base64.b64encode(zlib.compress(levels.tobytes(), 6)).decode("ascii"),
            "shape": [n_layers, h, t, t], "block": f}


def parse_data(analysis: Analysis, m: int, hide_rules: bool) -> dict[str, Any] | None:
    """For a sentence the grammar parses: from each of the parse's words, every head's top key and its weight
    on the relation's noun (hidden: the words and top keys only, one row a word, no weight that marks the noun).
    None when the run has no parse, or its words lie outside the page's first ``m`` tokens."""
    reading = analysis.reading
    if reading is None:
        return None
    t = reading.parse.tokens
    rows: list[dict[str, Any]] = []
    asked: set[int] = set()
    for look in reading.looks:
        if look.query >= m or look.key >= m or max(look.top) >= m or (hide_rules and look.query in asked):
            continue
        asked.add(look.query)
        rows.append({
            "query": look.query, "word": label(t[look.query], 24), "tops": [label(t[k], 24) for k in look.top],
            "relation": None if hide_rules else look.relation,
            "noun": None if hide_rules else label(t[look.key], 24), "key": None if hide_rules else look.key,
            "weights": None if hide_rules else [round(float(w), 4) if k == look.key else None
                                                for k, w in zip(look.top, look.weight)],
        })
    if not rows:
        return None
    said = None if hide_rules else " ".join([narrate.parse_sentence(reading), *(
        line[0].upper() + line[1:] for line in narrate.reading_lines(reading))])
    return {"rows": rows, "said": said}


def page_data(result: Run, *, hide_rules: bool = False) -> dict[str, Any]:
    """Everything the page shows, as one JSON-ready dict (the first ``result.page.max_tokens`` tokens), from a
    result with the page's measures (:func:`mhacli.pipeline.paged`)."""
    if result.page is None:
        raise ValueError("the page draws a result with its page's measures: pass mhacli.pipeline.paged(result)")
    trace, max_tokens, layers = result.trace, result.page.max_tokens, result.page.layers
    n = trace.n_tokens
    m = min(n, max_tokens)
    mask = np.asarray(trace.mask)[:m, :m] if trace.mask is not None else None  # a view's own mask, as given
    view = is_view(trace)
    analysis = layers[trace.layer if view and len(layers) > 1 else 0]  # the shown layer's measures
    shown = _layer(trace, m, hide_rules, analysis)
    data: dict[str, Any] = {
        "mhacli_version": __version__,
        "kind": "view" if view else "run",
        "source": trace.source,
        "n_tokens": n,
        "window": {"start": 0, "stop": m, "total": n, "max_tokens": max_tokens, "windowed": m < n},
        # The page opens on the query where the heads' top keys differ most (the pipeline's choice); #q=K another.
        "start_query": result.page.start_query,
        "tokens": list(trace.tokens[:m]),
        "labels": [label(t, 24) for t in trace.tokens[:m]],
        "heads": trace.num_heads,
        "colors": [theme.head_color(i) for i in range(trace.num_heads)],
        # Heads that share keys and values (--kv-heads g, from_attention's kv_heads): the group each head reads.
        "kv_heads": trace.kv_heads,
        "groups": list(trace.head_groups) if trace.kv_heads != trace.num_heads else None,
        "average_color": theme.AVERAGE_COLOR,
        "mask_color": theme.MASK_COLOR,
        "hatch_color": theme.HATCH_COLOR,
        # The same anchors the terminal grid interpolates, sampled from the figures' colour map.
        "cmap": {"name": theme.HEATMAP_CMAP, "stops": list(theme.HEATMAP_ANCHORS)},
        "decimals": WEIGHT_DECIMALS,
        **shown,
        "causal": bool(trace.causal),
        "mask": mask.astype(int).tolist() if mask is not None else None,
        "rules": list(trace.rules) if trace.rules and not hide_rules else None,
        # A trained head's name is measured in training, never a rule; a designed head (or any run handed its
        # rules) follows a rule built by hand.
        "rules_word": "name" if view else "measured in training" if analysis.kind == narrate.TRAINED
        else "measured before training" if analysis.kind == narrate.UNTRAINED else "rule",
        "parse": parse_data(analysis, m, hide_rules),
        "hide_rules": hide_rules,
        "config": None, "scores": None, "steps": None, "total_madds": None, "parameters": None,
        "split_equals_direct_max_diff": None,
        "layer": None, "layer_names": None, "layers": None, "model": None,
    }
    if view:
        v: AttentionView = trace  # type: ignore[assignment]
        data.update(layer=v.layer, layer_names=list(v.layer_names), layers=_layers(v, m, hide_rules, shown, layers),
                    model=model_data(v, m) if v.n_layers > 1 and len(layers) > 1 else None)
    else:
        data.update(_run_only(trace, m, result.split_diff))
    return escaped(data)  # type: ignore[no-any-return]


COMPACT_KEYS = ("weights", "average", "outside", "outside_average")  # the arrays a compact page packs
_MISSING = 65535  # a null (masked) entry of a packed array


def _packed(values: Any) -> Any:
    """Nested lists of weights (multiples of 10^-WEIGHT_DECIMALS, or null) as deflated little-endian uint16."""
    import base64
    import zlib

    a = np.array(values, dtype=np.float64) if values else np.zeros((0,))  # None -> nan
    scale = 10 ** WEIGHT_DECIMALS
    units = np.where(np.isnan(a), _MISSING, np.rint(np.nan_to_num(a) * scale)).astype("<u2")
    return {"q16": base64.b64encode(zlib.compress(units.tobytes(), 6)).decode("ascii"), "shape": list(a.shape),
            "scale": scale}


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """``page_data`` with its weight arrays packed (:func:`_packed`) as whole multiples of 10^-4: nothing the page
    shows is lost, a fraction of the bytes (the exact values stay in ``--save-npz``)."""
    def packed_layer(layer: dict[str, Any]) -> dict[str, Any]:
        return {k: _packed(v) if k in COMPACT_KEYS and v is not None else v for k, v in layer.items()}

    out = packed_layer(data)
    if data.get("layers"):
        out["layers"] = [packed_layer(layer) for layer in data["layers"]]
    return out


def template() -> str:
    """The page template shipped inside the package."""
    return (resources.files("mhacli.render") / "templates" / "page.html").read_text(encoding="utf-8")


def render_html(result: Run, *, hide_rules: bool = False, packed: bool = False) -> str:
    """The whole page of a run or an attention view as one string (``packed``: its weights :func:`compact`, for a
    notebook's display, which starts with one head shown so that it fits a screen)."""
    parts = template().split(DATA_PLACEHOLDER)
    if len(parts) != 2:  # pragma: no cover - guards the shipped template
        raise RuntimeError("the page template must contain the data placeholder exactly once")
    data = page_data(result, hide_rules=hide_rules)
    return parts[0] + embed_json({**compact(data), "in_notebook": True} if packed else data) + parts[1]


def write_html(result: Run, path: Path, *, hide_rules: bool = False) -> Path:
    """Write the interactive page to ``path``, atomically (``hide_rules``: no rule or pattern names, data
    included); returns the path."""
    page = render_html(result, hide_rules=hide_rules).encode("utf-8")

    def write(handle: Any) -> None:
        handle.write(page)

    return atomic_write(Path(path), write)

"""What every picture says about its weights, and a few words per head, for figures, grids and the page alike.

A picture of random weights says so before anyone reads a pattern into it; a picture of someone's model says
whose attention it is. Plain strings, picked from :mod:`mhacli.measures.narrate` for a run or a view.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Union

from mhacli.measures import narrate
from mhacli.measures.analysis import COPY, FIXED, NONE, Analysis
from mhacli.grammar.grammar import short_name
from mhacli.attention.tokenize import label

if TYPE_CHECKING:
    from mhacli.attention.trace import Trace
    from mhacli.measures.view import AttentionView

    Shown = Union[Trace, AttentionView]

# How the tool's own non-narrated weight kinds are named (narrate has random, designed and trained).
_OTHER_KINDS = {
    "pytorch": "your own weights (an nn.MultiheadAttention state dict): each head's relation is measured",
    "worked": "the worked example's hand-sized weights: small numbers to redo by hand",
}


def is_view(shown: "Shown") -> bool:
    """An attention view (weights only) rather than a run of the tool (every step)."""
    return not hasattr(shown, "config")


def layer_note(shown: "Shown") -> str | None:
    """'layer 2 of 0–3 (encoder.2)' for a view with several layers; None otherwise."""
    if not is_view(shown) or shown.n_layers < 2:  # type: ignore[union-attr]
        return None
    v = shown
    name = v.layer_names[v.layer]  # type: ignore[union-attr]
    from mhacli.attention.messages import layer_of

    plain = f"layer {v.layer}"  # type: ignore[union-attr]
    said = layer_of(v.layer, v.n_layers)  # type: ignore[union-attr]
    return said + (f" ({label(name, 24)})" if name != plain else "")


def weights_note(shown: "Shown", hide_rules: bool = False, analysis: Analysis | None = None) -> str:
    """Which weights made the picture: random (they mean nothing yet), designed rules, trained, or a model's view.

    With the run's ``analysis``, its cautions follow (near-uniform weights, a model outside what it saw)."""
    said = _weights_note(shown, hide_rules)
    if analysis is None:
        return said
    kind = "view" if is_view(shown) else str(shown.config.weights)  # type: ignore[union-attr]
    if kind == narrate.RANDOM:
        return narrate.weights_label(kind, shown.rules, hide_rules, analysis)
    return "; ".join([said, *narrate.cautions(analysis)])


def _weights_note(shown: "Shown", hide_rules: bool) -> str:
    if is_view(shown):
        source = shown.source  # type: ignore[union-attr]
        where = f"attention from {label(Path(source).name, 40)}" if source else "attention from your model"
        layer = layer_note(shown)
        text = where + (f", {layer}" if layer else "")
        names = shown.head_names  # type: ignore[union-attr]
        if names and not hide_rules:
            text += ": " + "; ".join(f"head {i + 1}, {label(n, 24)}" for i, n in enumerate(names))
        return text
    kind = str(shown.config.weights)  # type: ignore[union-attr]
    if kind in _OTHER_KINDS:
        return _OTHER_KINDS[kind] if not hide_rules else _OTHER_KINDS[kind].split(":")[0]
    return narrate.weights_label(kind, shown.rules, hide_rules)


def pattern_words(analysis: Analysis, i: int, hide_rules: bool = False, max_chars: int = 24) -> str:
    """A few words for head ``i`` (0-based) in a small title: its rule, or the relation its per-query top key follows.

    'previous token' (a designed rule), 'itself · 100%', '“dog” · 60%', 'no single relation';
    with ``hide_rules`` only how sharp it is ('sharp').
    """
    s = analysis.heads[i]
    if hide_rules:
        return s.describe()
    if analysis.kind == narrate.DESIGNED and analysis.rules and i < len(analysis.rules):
        return label(analysis.rules[i], max_chars)
    if analysis.reading is not None and analysis.rules and i < len(analysis.rules):
        # A grammar model's head: what it learned, measured in training (its card's title when it has one).
        learned = narrate.learned_title(analysis.rules[i]) or short_name(analysis.rules[i])
        if learned is not None:
            return learned
    if s.pattern == NONE:
        return "no single relation"
    if s.pattern == FIXED and s.pattern_key is not None:
        name = f"“{label(analysis.tokens[s.pattern_key], 10)}”"
    elif s.pattern == COPY:
        name = "earlier copy"
    else:
        name = s.pattern
    return f"{name} · {s.pattern_share:.0%}"


def window_note(analysis: Analysis) -> str | None:
    """How much attention falls outside the window of tokens the analysis was made for (None when everything is shown).

    ``analysis``: measured for the window (:func:`mhacli.pipeline.shown`), holding each head's mass outside the window.
    """
    if analysis.window is None or (analysis.window[0] == 0 and analysis.window[1] >= len(analysis.tokens)):
        return None
    return narrate.window_sentence(analysis)

"""mhacli: make multi-head attention visible, one step at a time. :func:`mhacli.run` returns one immutable Run;
``import mhacli`` loads no numpy (``mha --help`` starts fast): the names below load on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mhacli.attention.display import register as register_display
from mhacli.version import __version__

_PUBLIC = {
    "run": "mhacli.pipeline",
    "Run": "mhacli.pipeline",
    # What a command asks for, for mhacli.run(request): model options (None = not given), text, outputs.
    "Request": "mhacli.request",
    "ModelOptions": "mhacli.request",
    "Config": "mhacli.attention.config",
    "Trace": "mhacli.attention.trace",
    "load_trace": "mhacli.io.export",
    "from_attention": "mhacli.measures.view",
    "AttentionView": "mhacli.measures.view",
    "AttentionWeights": "mhacli.models.state_dict",
    # A trained grammar model's report card and head knockout (issue 28): numbers, no pictures.
    "report_card": "mhacli.grammar.heldout",
    "Card": "mhacli.grammar.card",
    "knockout": "mhacli.grammar.knockout",
    "Knockout": "mhacli.grammar.knockout",
    # Attention in tiles (issue 45): the same output one block of keys at a time, with the online softmax.
    "attention_in_tiles": "mhacli.attention.tiles",
    "tiled_attention": "mhacli.attention.tiles",
    # Pictures, for notebooks and scripts: each returns a matplotlib Figure (shown inline in Jupyter).
    "head_figure": "mhacli.notebook",
    "heads_figure": "mhacli.notebook",
    "magnifiers_figure": "mhacli.notebook",
    "split_figure": "mhacli.notebook",
    "compare_figure": "mhacli.notebook",
    "html_page": "mhacli.notebook",
    "save_figures": "mhacli.notebook",
    "model_figure": "mhacli.notebook",
}

__all__ = ["__version__", "run", "Run", "Request", "ModelOptions", "Config", "Trace", "load_trace", "from_attention",
           "AttentionView", "AttentionWeights", "report_card", "Card", "knockout", "Knockout",
           "attention_in_tiles", "tiled_attention",
           "head_figure", "heads_figure", "magnifiers_figure", "split_figure", "compare_figure",
           "html_page", "save_figures", "model_figure"]

if TYPE_CHECKING:  # pragma: no cover
    from mhacli.grammar.card import Card
    from mhacli.grammar.heldout import report_card
    from mhacli.attention.config import Config
    from mhacli.grammar.knockout import Knockout, knockout
    from mhacli.attention.tiles import attention_in_tiles, tiled_attention
    from mhacli.attention.trace import Trace
    from mhacli.measures.view import AttentionView, from_attention
    from mhacli.models.state_dict import AttentionWeights
    from mhacli.io.export import load_trace
    from mhacli.pipeline import Run, run
    from mhacli.request import ModelOptions, Request
    from mhacli.notebook import (compare_figure, head_figure, heads_figure, html_page, magnifiers_figure,
                                 model_figure, save_figures, split_figure)


def _display_page(shown: Any) -> str:
    """Jupyter's page of a run, a trace or a view (the notebook layer, loaded when first asked)."""
    from mhacli.notebook import display_page

    return display_page(shown)


register_display(_display_page)  # the core's objects answer Jupyter through it, never importing a renderer


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'mhacli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

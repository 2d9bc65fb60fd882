"""Jupyter's display protocol for the core's results, the drawing left to the layer that registers it.

Jupyter asks an object itself for its HTML (``_repr_html_``).  A trace or a view
answers here by handing itself to the page maker the package registered at
import (:mod:`mhacli.notebook`); the core itself never imports a renderer.
"""

from __future__ import annotations

from typing import Any, Callable

_page_maker: list[Callable[[Any], str]] = []


def register(page: Callable[[Any], str]) -> None:
    """Make ``page(shown)`` the HTML Jupyter shows for a run, a trace or a view."""
    _page_maker[:] = [page]


def page_of(shown: Any) -> str | None:
    """The HTML of ``shown`` for Jupyter, or None when no page maker is registered (it shows the repr)."""
    return _page_maker[0](shown) if _page_maker else None

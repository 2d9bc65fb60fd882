"""What one command asks for, frozen: the model options, the text or tokens, and the outputs. Built and checked
once (:func:`mhacli.cli.flow.request`); ``None`` means "not given", so the weights or Config's default decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: The figures' default dots per inch, as the commands ask for them: mhacli.render.figures.view.DPI, written again
#: here because this module imports nothing (tests/test_figures.py checks that the two agree).
DPI = 100


@dataclass(frozen=True)
class ModelOptions:
    """The model options of a run by Config's field names, each None when not given (``layer``: of a weights file);
    a new one is a field here and an entry of ``MODEL_BLOCK`` in :mod:`mhacli.cli.options`."""

    heads: int | None = None
    d_model: int | None = None
    seed: int | None = None
    tokenizer: str | None = None
    positions: bool | None = None
    causal: bool | None = None
    weights: Any = None  # a kind, a path, or weights themselves (the API)
    layer: str | None = None
    words: Any = None  # --words: new words read as words of a grammar class (a grammar model only)
    dtype: str | None = None
    kv_heads: int | None = None  # --kv-heads: key/value heads g the query heads share (random weights only)

    def given(self) -> dict[str, Any]:
        """The options given, as the pipeline takes them (Config's field names)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Source:
    """Where the text came from, as typed: for 'what next' hints, and so that no output lands on an input."""

    text: str | None = None
    file: Path | None = None
    sample: str | None = None


@dataclass(frozen=True)
class Outputs:
    """Every output asked for: the terminal, the figures (``out``: their folder, None for none), the page
    (``page_max_tokens``: None unless --max-tokens was given), the JSON document, the arrays' file."""

    quiet: bool = False
    max_tokens: int = 40
    show_values: bool = False
    hide_rules: bool = False
    out: Path | None = None
    fmt: str = "png"
    dpi: int = DPI
    query: str | None = None
    html: str | None = None
    page_max_tokens: int | None = None
    json: bool = False
    json_arrays: bool = True
    save_npz: str | None = None


@dataclass(frozen=True)
class Request:
    """One command's request: what to run (``model``, ``text`` or ``tokens``) and what to make of it."""

    model: ModelOptions = field(default_factory=ModelOptions)
    text: str | None = None
    tokens: Any = None  # the API's tokens instead of a text, checked by the pipeline
    source: Source = field(default_factory=Source)
    outputs: Outputs = field(default_factory=Outputs)
    worked: bool = False  # explain --worked: the hand-sized example instead of a text


__all__ = ["ModelOptions", "Outputs", "Request", "Source"]

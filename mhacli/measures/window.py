"""Which tokens a picture shows: all of them, or a window of ``--max-tokens`` around the query.

Chosen once by the pipeline (:func:`mhacli.pipeline.shown`) and handed to the renderers with the
run's measures for exactly those tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

MAGNIFIER_MAX_TOKENS = 60  # a row of boxes per head stops being a picture beyond this
PAGE_MAX_TOKENS = 200  # the page's window unless --max-tokens is given: it stays quick up to there


@dataclass(frozen=True)
class View:
    """Which tokens a figure shows: all of them, or a window of ``--max-tokens`` (0-based, stop excluded)."""

    start: int
    stop: int
    n_total: int
    query: int | None = None

    @property
    def n(self) -> int:
        return self.stop - self.start

    @property
    def windowed(self) -> bool:
        return self.n < self.n_total

    @property
    def rows(self) -> slice:
        return slice(self.start, self.stop)

    def note(self) -> str:
        """What the window shows, for titles."""
        return (f"window: tokens {self.start}–{self.stop - 1} of {self.n_total} "
                f"(--max-tokens {self.n})")


def token_view(n_tokens: int, max_tokens: int, query: int | None = None) -> View:
    """The first ``max_tokens`` tokens, or a window centred on the query when it lies beyond them."""
    max_tokens = max(1, int(max_tokens))
    if n_tokens <= max_tokens:
        return View(0, n_tokens, n_tokens, query)
    start = 0
    if query is not None and query >= max_tokens:
        start = min(max(query - max_tokens // 2, 0), n_tokens - max_tokens)
    return View(start, start + max_tokens, n_tokens, query)

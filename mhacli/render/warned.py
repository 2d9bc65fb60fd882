"""The one place a library's warnings, raised while a figure is drawn or saved, become one note.

matplotlib (and numpy under it) report through :mod:`warnings`: printed as they
come, they are stray lines on stderr, one per label.  :func:`recording` catches
them for the length of a drawing, and :func:`note` says once what was caught,
after the figures are written.  Nothing caught is re-emitted: re-emitting inside
``catch_warnings(record=True)`` records it again, and the loop never ends.  A deprecation between two
libraries (an older matplotlib calling a newer pyparsing's old names) says nothing about the figure and
nothing the user can act on: it is not noted.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

MAX_LISTED = 3  # distinct messages quoted in the note; the rest are counted


@contextlib.contextmanager
def recording(into: dict[str, None]) -> Iterator[list[warnings.WarningMessage]]:
    """Catch every warning raised inside; on the way out, add each message to ``into`` (an ordered set).

    Yields the caught list, so a caller can take the warnings it understands
    (matplotlib's missing glyphs) out of it before the rest is kept.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield caught
        finally:
            # Read, never re-emitted: still recording here, a re-emitted warning would be caught again.
            for w in list(caught):
                if not issubclass(w.category, DeprecationWarning):
                    into[f"{w.category.__name__}: {w.message}"] = None


def note(messages: dict[str, None] | list[str]) -> str | None:
    """One line about the warnings caught while drawing, or None when there were none."""
    listed = list(messages)
    if not listed:
        return None
    shown = "; ".join(listed[:MAX_LISTED])
    more = f" (and {len(listed) - MAX_LISTED} more)" if len(listed) > MAX_LISTED else ""
    return (f"the drawing library warned while the figures were drawn ({shown}{more}); "
            "the figures were written, but may not look as intended.")


__all__ = ["note", "recording"]

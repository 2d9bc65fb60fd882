"""The one place a library's warnings, raised while a figure is drawn or saved, become one note.

:func:`recording` catches the warnings while drawing (not one stray stderr line per label); :func:`note` says
once what was caught. Nothing is re-emitted; a deprecation between two libraries is not noted.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

MAX_LISTED = 3  # distinct messages quoted in the note; the rest are counted


@contextlib.contextmanager
def recording(into: dict[str, None]) -> Iterator[list[warnings.WarningMessage]]:
    """Catch every warning raised inside and add each message to ``into`` on the way out; yields the caught list,
    so a caller can take out the ones it understands (missing glyphs) first."""
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

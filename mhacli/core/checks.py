"""The Python API's values checked one way: whole numbers and true/false flags.

A notebook passes numpy's own scalars as often as Python's (``heads=np.int64(2)``,
``causal=np.True_``): they are the same values and are taken; a value of
another kind (``causal="no"``, ``layer=1.5``) is a usage error, never read by
its truthiness.
"""

from __future__ import annotations

import numbers

import numpy as np

from mhacli.core.errors import UsageError


def whole_number(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` if it is a whole number (numpy integers included, bool not) within bounds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError("{%s:name} must be a whole number, got %s." % (name, _spelled(value)), **{name: value})
    number = int(value)
    if low is not None and number < low or high is not None and number > high:
        span = f"from {low} to {high}" if low is not None and high is not None else (
            f"at least {low}" if low is not None else f"at most {high}")
        raise UsageError("{%s:name} must be %s, got %s." % (name, span, _spelled(number)), **{name: number})
    return number


def flag(name: str, value: object) -> bool:
    """``value`` as a ``bool`` if it is True/False (numpy's too) or the integers 1/0; anything else refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, np.bool_) or isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise UsageError("{%s:name} must be True or False, got %s." % (name, _spelled(value)), **{name: value})


def _spelled(value: object) -> str:
    from mhacli.core.messages import shown

    text = shown(value) if isinstance(value, str) else repr(value)
    return (text[:40] + "…" if len(text) > 41 else text).replace("{", "{{").replace("}", "}}")

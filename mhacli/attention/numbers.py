"""The one rule for a whole number typed by a person: ASCII digits, one optional sign, an explicit bound.

``str.isdigit`` accepts '²' and '٣' and ``int`` accepts '2_0' and 5,000 digits
only up to Python's own limit; a count, a position or a seed is none of those.
Every integer option, ``--compare``'s list and ``--layer``'s number go through
:func:`whole_number`.
"""

from __future__ import annotations

import re

BOUND = 2**63 - 1  # the largest seed (numpy's default_rng takes any, the trace file stores int64)
MAX_DIGITS = len(str(BOUND))  # 19: more digits than this can only be out of bounds
_WHOLE = re.compile(r"[+-]?[0-9]+")  # [0-9], not \d: \d matches every script's digits


def whole_number(text: str) -> int | None:
    """``text`` (spaces around allowed) as an int within ±``BOUND``, or None when it is not one."""
    plain = text.strip()
    if not _WHOLE.fullmatch(plain) or len(plain.lstrip("+-")) > MAX_DIGITS:
        return None
    value = int(plain)
    return value if -BOUND <= value <= BOUND else None


def looks_numeric(text: str) -> bool:
    """Whether ``text`` was meant as a number (digits of any script, signs): a refused one deserves the rule."""
    plain = text.strip()
    return bool(plain) and any(ch.isdigit() for ch in plain) and all(ch.isdigit() or ch in "+-" for ch in plain)


RULE = "a whole number (digits 0-9)"
TOO_BIG = "a whole number up to 2**63-1"
SEED_RULE = "a whole number from 0 to 2**63-1"  # a seed's range (core.config says it in the same words)
TOO_SMALL = "a whole number from -(2**63-1) to 2**63-1"  # a refused one with a minus sign: too far below


def too_big(text: str) -> bool:
    """Whether ``text`` is ASCII digits that only fail :func:`whole_number` by being out of bounds."""
    plain = text.strip()
    return bool(_WHOLE.fullmatch(plain)) and whole_number(plain) is None

def head_counts(text: str, option: str = "--compare") -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` (repeats dropped); each part by :func:`whole_number`, each at least 1.

    Three refusals, each its own: a part that is not digits 0-9, one too large, one below 1.
    """
    from mhacli.attention.errors import UsageError
    from mhacli.attention.messages import shown

    parts = [p for p in str(text).split(",") if p.strip()]
    numbers = [whole_number(p) for p in parts]
    big = [p.strip() for p, n in zip(parts, numbers) if n is None and too_big(p)]
    if big:
        raise UsageError(f"{option} takes head counts, each {TOO_BIG}; got {shown(big[0], 24)}.")
    if not numbers or any(n is None for n in numbers):
        raise UsageError(f"{option} takes head counts separated by commas (digits 0-9), e.g. 1,2,4; got "
                         f"{shown(text)}.")
    low = [n for n in numbers if n is not None and n < 1]
    if low:
        raise UsageError(f"{option} takes head counts of at least 1 (a layer has one head or more); got {low[0]}.")
    return list(dict.fromkeys(n for n in numbers if n is not None))

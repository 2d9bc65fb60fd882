"""The one evidence rule: every word the tool puts on heads ("sharp", "mostly", a relation…) is decided here.

A row's lift is how far its top weight w goes from chance 1/v (v visible keys) to certain, (w − 1/v) / (1 − 1/v):
20 % means more over 25 keys than over 2. A row picks its top key from :data:`PICK_LIFT` unless a runner-up
ties it (:data:`TIE_MARGIN`); a head follows a relation when :data:`NAME_SHARE` of its rows pick its key. The other
thresholds (mostly, answers, card names, knockout costs, focus words) are the constants below, each with its reason.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray

PICK_LIFT = 0.25  # a row picks its top key from a quarter of the way between chance and certain
TIE_MARGIN = 0.05  # a runner-up within 5 points of the row's top weight ties it: the row picks neither key
NAME_SHARE = 0.5  # a relation is named when at least half the rows it is defined on pick its key
# A trained head is named on its report card (mhacli.grammar.card) only from this held-out hit rate on, with the
# lower end of its 95 % interval still clearing NAME_SHARE: a name has to hold on fresh sentences, not one sample.
CARD_NAME_RATE = 0.85
NAMED, PARTLY, UNNAMED = "named", "partly", "unnamed"  # what a head's card row earns it
# A head matters for a relation when switching it off (mhacli.grammar.knockout) costs the relation at least this
# many points of held-out accuracy: a held-out share over ~300 queries moves by about 2 points between samples.
KNOCKOUT_POINTS = 10.0
MOSTLY = 0.5  # "mostly" is at least half a row
ANSWER_SHARE = 0.5  # a head answers a parsed query with at least half its row on the true key
FOCUSED = 0.4  # focus above this is "focused" (or "sharp"): never near chance
FOCUS_WORDS = ((0.75, "sharp"), (FOCUSED, "focused"), (0.1, "spread"))  # above each cut; else nearly uniform
NEARLY_UNIFORM = "nearly uniform"
NO_RELATION = "no clear relation"
CLOSE_TO_UNIFORM = "these weights are close to uniform: no head follows a relation"


def chance(visible: Array | int) -> Array:
    """The uniform weight 1/v for each row seeing ``visible`` keys (1 where a row sees none)."""
    v = np.maximum(np.asarray(visible, dtype=np.float64), 1.0)
    return 1.0 / v


def lift(top: Array | float, visible: Array | int) -> Array:
    """How far each row's top weight goes from chance (0) to certain (1); 0 where a row sees 1 key or fewer."""
    v = np.asarray(visible, dtype=np.float64)
    c = chance(v)
    span = 1.0 - c
    out = np.divide(np.asarray(top, dtype=np.float64) - c, span, out=np.zeros(np.broadcast(v, top).shape),
                    where=span > 0)
    return np.clip(out, 0.0, 1.0)


def picks(top: Array | float, visible: Array | int) -> Array:
    """True where a row's top weight clears the rule (ties are the caller's: a tied row has no top key)."""
    return lift(top, visible) >= PICK_LIFT


def pick_weight(visible: int) -> float:
    """The smallest top weight that picks a key in a row seeing ``visible`` keys (for captions and tests)."""
    c = 1.0 / max(visible, 1)
    return c + PICK_LIFT * (1.0 - c)


def named(share: float) -> bool:
    """Is a relation followed on ``share`` of its rows enough to name it?"""
    return share >= NAME_SHARE


def card_word(rate: float, low: float) -> str:
    """NAMED, PARTLY or UNNAMED for a held-out hit rate and the lower end of its 95 % interval.

    Named from :data:`CARD_NAME_RATE` on when the interval's lower end clears :data:`NAME_SHARE`; "partly" from
    NAME_SHARE up to there (or a high rate on too few queries to be sure of it); below NAME_SHARE, unnamed.
    """
    if rate >= CARD_NAME_RATE and low >= NAME_SHARE:
        return NAMED
    return PARTLY if rate >= NAME_SHARE else UNNAMED


def beats(low: float, baseline: float) -> bool:
    """Does a hit rate whose interval starts at ``low`` beat a ``baseline`` hit rate by the rule's margin: a
    quarter (:data:`PICK_LIFT`) of the way from the baseline to certain, as a pick is from chance?"""
    return low > baseline and low - baseline >= PICK_LIFT * (1.0 - baseline)


def matters(cost_points: float) -> bool:
    """Does switching a head off cost a relation ``cost_points`` points of accuracy enough to say so?"""
    return cost_points >= KNOCKOUT_POINTS


def points(cost: float) -> str:
    """A knockout's cost in points as printed: whole points, or as many decimals as keep the printed number on
    the side of :data:`KNOCKOUT_POINTS` that :func:`matters` decides on (9.64 is '9.6', never '10')."""
    for digits in range(7):
        text = f"{cost:.{digits}f}"
        if matters(float(text)) == matters(cost):
            return text
    return repr(cost)


def near_chance(picked_rows: int, counted_rows: int, focus: float) -> bool:
    """A head whose rows are close to uniform: most of them pick no key, and it is at most "spread"."""
    return counted_rows > 0 and 2 * picked_rows < counted_rows and focus <= FOCUSED


def answers(weight: float) -> bool:
    """Does a head giving the true key ``weight`` answer the query?"""
    return weight >= ANSWER_SHARE


def focus_word(focus: float) -> str:
    """sharp, focused, spread or nearly uniform, for a focus value (1 − entropy / maximum)."""
    for cut, word in FOCUS_WORDS:
        if focus > cut:
            return word
    return NEARLY_UNIFORM

"""The one evidence rule: how far above chance a weight must be before the tool puts a word on it.

Every qualitative word the tool prints about heads — a named relation, "sharp", "focused",
"mostly", "learned", "agree", "different", "answers" — is decided here, and nowhere else.

**Chance** for a query row is the weight a uniform row gives each key it may see, ``1 / v`` for
``v`` visible keys.  A row's **lift** is how far its largest weight ``w`` goes from chance towards
certainty, ``(w − 1/v) / (1 − 1/v)``: 0 for a uniform row, 1 for a one-hot row, whatever ``v`` is.
(A raw weight cannot be the rule: 20 % is five times chance over 25 keys and a coin toss over 2.)

* A row **picks** its top key when its lift is at least :data:`PICK_LIFT` (a quarter of the way from
  chance to certain: over 6 keys, 37.5 %; over 13, 30.8 %; over 2, 62.5 %) and no other key ties it.
  Two keys **tie** when the runner-up comes within :data:`TIE_MARGIN` of the top weight (5 points of
  the row): a row split 51 / 49 between two copies of "the" is a coin toss, not a pick of either.
  A row that does not is **spread**: it follows no relation, agrees with no head and brings back
  nothing "different", though it stays counted.
* A head **follows a relation** when at least :data:`NAME_SHARE` of the rows where the relation is
  defined pick its key; below that it has **no clear relation**.
* A head is **near chance** when fewer than half its counted rows pick a key and its focus is no more
  than "spread" (at most :data:`FOCUSED`): a head that splits its rows between two keys is focused,
  not uniform, though it picks neither.  A run whose heads are all near chance says
  :data:`CLOSE_TO_UNIFORM`, whatever made the weights.
* **Mostly**: a weight is most of its row from :data:`MOSTLY` (half) on.
* A head **answers** a query of a grammar parse when it gives the true key at least
  :data:`ANSWER_SHARE` (half its row) — over the 10 to 13 words of a grammar sentence, several
  times chance.
* A trained head is **named** on its report card (:mod:`mhacli.grammar.card`) for a relation whose held-out
  hit rate is at least :data:`CARD_NAME_RATE` with the lower end of its 95 % interval at least NAME_SHARE;
  "partly" from NAME_SHARE up; below, unnamed (:func:`card_word`).
* A card names a head for a row only when the lower end of its interval also **beats** the row's baselines, a
  lookup that needs no query (:func:`beats`): a quarter of the way from each baseline to certain.
* Switching a head off **costs** a relation when its held-out accuracy falls by :data:`KNOCKOUT_POINTS` or more.
* **Sharp / focused / spread / nearly uniform** describe a head's mean focus, 1 − entropy / its
  uniform maximum (0 = chance, 1 = one-hot), cut at :data:`FOCUS_WORDS`.
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


def mostly(weight: float) -> bool:
    """Is ``weight`` most of its row?"""
    return weight >= MOSTLY


def answers(weight: float) -> bool:
    """Does a head giving the true key ``weight`` answer the query?"""
    return weight >= ANSWER_SHARE


def focus_word(focus: float) -> str:
    """sharp, focused, spread or nearly uniform, for a focus value (1 − entropy / maximum)."""
    for cut, word in FOCUS_WORDS:
        if focus > cut:
            return word
    return NEARLY_UNIFORM

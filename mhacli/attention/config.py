"""The run configuration: every knob of one attention run, validated once.

Pure Python (no numpy), so the CLI can validate options before it imports
anything heavy, and ``mha shapes`` never needs the numerical core.  The memory
plan is arithmetic only: how much this machine can spare is read by
:func:`mhacli.io.memory.memory_limit_bytes` and passed in as ``limit``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mhacli.attention.errors import UsageError
from mhacli.attention.errors import shown_value as _n  # a number as typed, shortened

TOKENIZERS = ("word", "char", "whitespace")
# What --weights NAME names (trained, grammar: shipped; grammar-untrained: the grammar model before training).
WEIGHT_KINDS = ("random", "designed", "trained", "grammar", "grammar-untrained")
# Where a run's weights came from, as a trace records it: the named kinds, your own
# nn.MultiheadAttention weights, or the hand-sized example of `mha explain --worked`.
# "grammar" runs as "trained"; "grammar-untrained" as "untrained" (a trained model's layer before its first step).
WEIGHT_SOURCES = ("random", "designed", "trained", "untrained", "pytorch", "worked")
DTYPES = ("float64", "float32")

# Bytes per float of the core; the memory plan below is in these units.
_DTYPE_BYTES = {"float64": 8, "float32": 4}

# What one run keeps alive at its peak, measured with ru_maxrss (see
# tests/test_properties_cli.py::test_planned_bytes_covers_the_measured_peak):
# scores and weights are (h, N, N) and the trace keeps them without copying;
# the softmax works in place a block of rows at a time, and the head summaries'
# entropy takes one head at a time, so about 2.3 such arrays are alive at once
# (2.6 with the figures drawing beside the walkthrough); 3 leaves a margin.
# Every (N, d) array exists about twice (the trace keeps copies) and there are
# ~11 of them; the four d x d weights exist three times (draw, cast, copy).
_ATTENTION_COPIES = 3.0
_PER_TOKEN_COPIES = 24
_WEIGHT_COPIES = 12
# --json turns every number into a Python float in a list and then into text:
# measured at ~120 bytes per number for each of scores and weights.
_JSON_BYTES_PER_NUMBER = 150
BASELINE_BYTES = 256 * 2**20  # Python, numpy, Rich and matplotlib themselves


def human_bytes(n: int | float, digits: int | None = None) -> str:
    """A size for people: ``3.9 GiB``, ``512 MiB``; astronomically large sizes say so.

    ``digits``: that many significant digits below 100 of a unit instead of one decimal (``1.25 GiB``, ``320 KiB``,
    ``10 GiB``: the cache sizes ``mha shapes`` prints, as the papers give them), and bytes with a thousands comma.
    """
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    value = float(n)
    for unit in units:
        if value < 1024 or unit == units[-1]:
            break
        value /= 1024
    if unit == "bytes":
        return f"{int(n)} bytes" if digits is None else f"{int(n):,} bytes"
    if unit == units[-1] and value >= 1024:
        return "over 1,000 EiB"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.1f} {unit}" if digits is None else f"{value:.{digits}g} {unit}"


def about_bytes(n: int | float) -> str:
    """``about 3.9 GiB``, or ``over 1,000 EiB`` for sizes beyond any machine."""
    size = human_bytes(n)
    return size if size.startswith("over") else f"about {size}"


def divisors(n: int) -> list[int]:
    """All head counts h that split d_model = n into equal heads (O(sqrt n), so any n is quick)."""
    small, large = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            small.append(k)
            if k * k != n:
                large.append(n // k)
        k += 1
    return small + large[::-1]


#: Above this width no machine holds the weights (12 copies of d² floats), so listing its divisors
#: (O(√d)) would only keep the user waiting for a refusal: the memory check says it instead.
_LISTED_UP_TO = 10**12


def _list_heads(d_model: int, asked: int | None = None) -> str:
    """The head counts that work for ``d_model`` (nearest to ``asked`` first), shortened when many."""
    if d_model > _LISTED_UP_TO:
        return "use a smaller {d_model:name}"
    ok = divisors(d_model)
    if len(ok) > 12:
        ok_text = ", ".join(str(k) for k in ok[:10]) + f" … {ok[-1]}, {len(ok)} in all"
    else:
        ok_text = ", ".join(str(k) for k in ok)
    if asked is not None:
        below = [k for k in ok if k < asked]
        above = [k for k in ok if k > asked]
        near = [str(k) for k in (below[-1:] + above[:1])]
        return f"try {{heads:name}} {' or '.join(near)} (all that work for {{d_model}}: {ok_text})"
    return f"head counts that work for {{d_model}}: {ok_text}"


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """Refuse a value outside ``choices``, suggesting the one a typo most likely meant."""
    if value in choices:
        return
    import difflib

    from mhacli.attention.messages import shown

    typed = str(value).strip().lower()
    close = [c for c in choices if len(typed) >= 3 and (c.startswith(typed) or typed.startswith(c))]
    if not close:
        # A near spelling, but never one that changes a number (float16 is not float64).
        digits = [ch for ch in typed if ch.isdigit()]
        close = [c for c in difflib.get_close_matches(typed, choices, n=1, cutoff=0.8)
                 if [ch for ch in c if ch.isdigit()] == digits]
    guess = f"did you mean {' or '.join(close[:2])}? " if close else ""
    raise UsageError(f"unknown {name} {shown(value)}; {guess}choose one of: {', '.join(choices)}.")


@dataclass(frozen=True)
class Config:
    """Everything that decides the numbers of a run (the trace records it)."""

    heads: int = 4
    d_model: int = 16
    seed: int = 0
    tokenizer: str = "word"
    positions: bool = True
    causal: bool = False
    weights: str = "random"
    dtype: str = "float64"
    kv_heads: int | None = None  # key/value heads g the h query heads share; None: g = h, the article's

    def __post_init__(self) -> None:
        self.validate()

    @property
    def d_k(self) -> int:
        """Width of one head, d/h."""
        return self.d_model // self.heads

    @property
    def groups(self) -> int:
        """Key/value heads g: h unless the query heads share keys and values."""
        return self.heads if self.kv_heads is None else self.kv_heads

    def validate(self) -> None:
        """Raise :class:`UsageError` with a one-line fix for any bad value."""
        for name in ("heads", "d_model", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{{{name}:name}} must be a whole number, got {_n(value)}.", **{name: value})
        if self.heads < 1:
            raise UsageError("{heads:name} must be at least 1, got " + f"{_n(self.heads)}.", heads=self.heads)
        if self.d_model < 1:
            raise UsageError("{d_model:name} must be at least 1, got " + f"{_n(self.d_model)}.",
                             d_model=self.d_model)
        if self.seed < 0 or self.seed >= 2**63:
            raise UsageError("{seed:name} must be a whole number from 0 to 2**63-1, got " + f"{_n(self.seed)}.",
                             seed=self.seed)
        _check_choice("tokenizer", self.tokenizer, TOKENIZERS)
        _check_choice("weights", self.weights, WEIGHT_SOURCES)
        _check_choice("dtype", self.dtype, DTYPES)
        if self.heads > self.d_model:
            raise UsageError(
                "{heads} is more than {d_model}: every head needs at "
                f"least one of the d dimensions; {_list_heads(self.d_model)}.",
                heads=self.heads, d_model=self.d_model,
            )
        # Memory is checked by the pipeline with this machine's limit (check_fits), before any array.
        if self.d_model % self.heads:
            raise UsageError(
                "{d_model} is not divisible by {heads}; "
                f"{_list_heads(self.d_model, self.heads)}.",
                d_model=self.d_model, heads=self.heads,
            )
        if self.kv_heads is not None:
            g = self.kv_heads
            if isinstance(g, bool) or not isinstance(g, int):
                raise UsageError(f"{{kv_heads:name}} must be a whole number, got {_n(g)}.", kv_heads=g)
            if not 1 <= g <= self.heads or self.heads % g:
                raise UsageError(f"{{kv_heads:name}} {_n(g)} must divide {{heads:name}} {self.heads} (each key/value "
                                 f"head serves the same number of query heads); choose one of "
                                 f"{', '.join(str(k) for k in divisors(self.heads))}.", kv_heads=g, heads=self.heads)

    def weight_bytes(self) -> int:
        """Memory the four d x d weight matrices take at their peak (drawn, cast, kept)."""
        return _WEIGHT_COPIES * self.d_model * self.d_model * 8

    def planned_bytes(self, n_tokens: int, json: bool = False) -> int:
        """Peak memory of a run over ``n_tokens``, rendering included (``json``: also ``--json``).

        Deliberately a little above the measured peak: under-planning means the
        kernel kills the run without a message.
        """
        n, d, h = n_tokens, self.d_model, self.heads
        f = max(_DTYPE_BYTES[self.dtype], 8)  # the head summaries work in float64 anyway
        need = (BASELINE_BYTES + self.weight_bytes() + _PER_TOKEN_COPIES * n * d * f
                + _ATTENTION_COPIES * h * n * n * f + n * n)  # + the (N, N) boolean mask
        if json:
            need += _JSON_BYTES_PER_NUMBER * (2 * h * n * n + 12 * n * d + 4 * d * d)
        return int(need)

    def max_tokens(self, limit: int, json: bool = False) -> int:
        """The most tokens whose run fits in ``limit`` bytes."""
        lo, hi = 0, 1
        while self.planned_bytes(hi, json=json) <= limit:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.planned_bytes(mid, json=json) <= limit else (lo, mid)
        return lo

    def check_fits(self, n_tokens: int, *, limit: int, json: bool = False, at_least: bool = False) -> None:
        """Refuse, before allocating, a run that would not fit in ``limit`` bytes (a usage error, never a
        MemoryError); ``limit`` is what this machine can spare (:func:`mhacli.io.memory.memory_limit_bytes`)."""
        if self.weight_bytes() > limit:
            raise UsageError(
                f"{{d_model}} needs {about_bytes(self.weight_bytes())} for its weights "
                f"alone, more than the {human_bytes(limit)} this machine can spare; "
                "use a smaller {d_model:name} (16 to 512 is plenty to see the heads).",
                d_model=self.d_model,
            )
        need = self.planned_bytes(n_tokens, json=json)
        if need > limit:
            if json and self.planned_bytes(n_tokens) <= limit:
                fix = "drop {json:name} and use {save_npz:name} FILE, which stores the same arrays compactly"
            else:
                most = self.max_tokens(limit, json=json)
                fix = (f"at most {most:,} tokens fit with these settings: use a shorter text, "
                       "fewer {heads:name} or a smaller {d_model:name}")
            raise UsageError(
                f"{'at least ' if at_least else ''}{n_tokens:,} tokens with {{d_model}} "
                "and {heads}"
                f"{' and {json:name}' if json else ''} need {about_bytes(need)}, more than the "
                f"{human_bytes(limit)} this machine can spare; {fix}.",
                d_model=self.d_model, heads=self.heads, json=json, save_npz=None,
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON, with the derived head width; kv_heads only when the heads share (g < h)."""
        out = {**asdict(self), "d_k": self.d_k}
        if self.groups == self.heads:
            del out["kv_heads"]
        return out


SHAPES_MAX_TOKENS = 10_000_000  # beyond any context length in use; keeps every number on one line
SHAPES_MAX_D_MODEL = 1_000_000  # beyond any model width in use; keeps listing the head counts quick


def check_shapes(n_tokens: int, d_model: int, heads: int) -> None:
    """Refuse sizes ``mha shapes`` cannot tabulate, with the same wording as a run's checks."""
    for name, value, top in (("tokens", n_tokens, SHAPES_MAX_TOKENS), ("d_model", d_model, SHAPES_MAX_D_MODEL),
                             ("heads", heads, SHAPES_MAX_D_MODEL)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{{{name}:name}} must be a whole number, got {value!r}.", **{name: value})
        if not 1 <= value <= top:
            raise UsageError(f"{{{name}:name}} must be from 1 to {top:,}, got {value:,}.", **{name: value})
    if heads > d_model:
        raise UsageError(f"{{heads:name}} {heads:,} is more than {{d_model:name}} {d_model:,}: every head needs at "
                         f"least one of the d dimensions; {_list_heads(d_model)}.", heads=heads, d_model=d_model)
    if d_model % heads:
        raise UsageError(f"{{d_model:name}} {d_model:,} is not divisible by {{heads:name}} {heads:,}; "
                         f"{_list_heads(d_model, heads)}.", heads=heads, d_model=d_model)

"""A bench run's rows, and what their numbers say: the cost of splitting d into heads, and noise (a busy machine
is said, not passed off as a property of attention). Each note holds its numbers and the sentence made from them,
so table, figure and ``--json`` agree.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Sequence


ARTICLE_CLAIM = "helps with the computational efficiency"
#: Repeats whose fastest and slowest differ by more than this share of their median are called noisy.
NOISY_SPREAD = 0.25
#: A larger N timed this much faster than the N before it is called a fall (a few per cent is rounding's size).
FALL_SHARE = 0.1


def human_seconds(s: float) -> str:
    """'1.25 s', '3.2 ms', '870 µs' (here, not in the runner, which imports this module)."""
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


@dataclass(frozen=True)
class SplitNote:
    """h heads of width d/h against one head of width d at the run's largest N: counted and timed."""

    n: int
    heads: int
    d_model: int
    madds: int
    madds_one_head: int
    weights: int  # attention weights made: h · N²
    weights_one_head: int  # N²
    seconds: float  # the core, h heads (median)
    one_head_seconds: float  # the core, one head of width d (median)
    cores: int
    kept: bool  # False with --blocked: the weights are made block by block and dropped
    sentence: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def split_sentence(n: int, d: int, h: int, madds: int, madds_one: int, weights: int, weights_one: int,
                   seconds: float, one_seconds: float, cores: int, kept: bool) -> str:
    """The article's claim beside what was counted and timed."""
    if madds == madds_one:
        counted = (f"counted at N = {n}, {h} heads of width {d // h} cost the same {madds:,} multiply-adds as "
                   f"one head of width {d}")
    else:
        counted = (f"counted at N = {n}, {h} heads of width {d // h} cost {madds:,} multiply-adds, one head "
                   f"of width {d} {madds_one:,}")
    ratio = seconds / one_seconds
    if ratio < 1:
        timed = (f"{h} heads took {human_seconds(seconds)}, one head {human_seconds(one_seconds)} "
                 f"({1 / ratio:.2f}× as long)")
    else:
        timed = f"{h} heads took {human_seconds(seconds)} ({ratio:.2f}× one head's {human_seconds(one_seconds)})"
    cores_text = f"the {cores} cores here" if cores > 1 else "several cores (this machine has one)"
    made = "kept" if kept else "made (and dropped block by block)"
    return (f"The article says splitting d into heads “{ARTICLE_CLAIM}”: {counted}; timed here, {timed}. "
            f"What the split changes: the {h} heads' products are independent, so they can run side by side "
            f"(on {cores_text}), and {h} × {n} × {n} = {weights:,} attention weights are {made} instead of "
            f"{weights_one:,}.")


@dataclass(frozen=True)
class Row:
    """Times (median seconds) and sizes for one N."""

    n: int
    seconds: float
    madds: int  # multiply-adds of the whole layer (mha shapes' table)
    quadratic_madds: int  # the part that grows with N²: scores and weighted values
    weights_bytes: int  # h · N² floats: what keeping every head's weights costs
    peak_bytes: int  # most memory the core held at once during a call (tracemalloc)
    matmul_seconds: float  # the core's own matrix products alone
    loop_seconds: float
    loop_kind: str  # "python" (verify.reference_loop) or "numpy" (a numpy loop over heads)
    torch_seconds: float | None = None  # need_weights=False
    torch_weights_seconds: float | None = None  # need_weights=True, average_attn_weights=False
    one_head_seconds: float | None = None  # the core with one head of width d, same X and weights
    repeat_seconds: tuple[float, ...] = ()  # the core's own repeats, of which ``seconds`` is the median

    @property
    def gflops(self) -> float:
        """Achieved billions of floating-point operations per second (one multiply-add = 2)."""
        return 2 * self.madds / self.seconds / 1e9

    def ratios(self) -> dict[str, float | None]:
        """The core's time divided by each contender's (below 1: the core is faster)."""
        def over(other: float | None) -> float | None:
            return self.seconds / other if other else None

        return {"loop": over(self.loop_seconds), "matmuls": over(self.matmul_seconds),
                "torch": over(self.torch_seconds), "torch_weights": over(self.torch_weights_seconds)}

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "gflops": self.gflops, "ratios": self.ratios()}


@dataclass(frozen=True)
class NoiseNote:
    """How steady the core's timings were: spread of the repeats, and medians that fall as N grows."""

    repeats: int
    widest_spread: float | None  # (slowest − fastest) / median of the core's repeats, at its widest; None: 1 repeat
    widest_at: int | None  # the N of that widest spread
    median_over_fastest: float | None  # the largest median / fastest repeat
    falls: tuple[tuple[str, int, int], ...]  # (contender, smaller N, larger N): the larger N's median lower
    noisy: bool
    sentences: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _spread(times: Sequence[float]) -> float:
    """(slowest − fastest) / median of one contender's repeats."""
    return (max(times) - min(times)) / statistics.median(times)


#: What each of a row's medians times, as the table's notes name it; the plain loop is one contender per method.
CONTENDERS = (("the core", "seconds"), ("one head", "one_head_seconds"), ("its matrix products", "matmul_seconds"),
              ("the loop", "loop_seconds"), ("PyTorch", "torch_seconds"), ("PyTorch with weights",
                                                                           "torch_weights_seconds"))


def _falls(rows: Sequence[Row]) -> tuple[tuple[str, int, int], ...]:
    """Every contender's medians that fell by more than FALL_SHARE from one N to the next."""
    found = []
    for label, field in CONTENDERS:
        for a, b in zip(rows, rows[1:]):
            t_a, t_b = getattr(a, field), getattr(b, field)
            if t_a is None or t_b is None or (field == "loop_seconds" and a.loop_kind != b.loop_kind):
                continue  # not timed, or two different loops
            if t_b < t_a * (1 - FALL_SHARE):
                found.append((label, a.n, b.n))
    return tuple(found)


def noise_note(rows: Sequence[Row], repeats: int) -> NoiseNote:
    """Read the timings: how far the core's repeats spread, and where a larger N was timed faster than a smaller one."""
    timed = [r for r in rows if len(r.repeat_seconds) >= 2]
    widest = max(timed, key=lambda r: _spread(r.repeat_seconds), default=None)
    spread = _spread(widest.repeat_seconds) if widest is not None else None
    over_fastest = max((r.seconds / min(r.repeat_seconds) for r in rows if r.repeat_seconds), default=None)
    # The work grows with N (every step's multiply-adds do): a median that falls as N grows is the machine.
    falls = _falls(rows)
    noisy = bool(falls) or (spread is not None and spread > NOISY_SPREAD)
    sentences = []
    if widest is None or spread is None:
        sentences.append(f"noise: {repeats} repeat{'s' if repeats != 1 else ''} per N; with one there is no "
                         "spread to judge noise by (use --repeats 3 or more).")
    else:
        fastest = f"; medians at most {over_fastest:.2f}× the fastest repeat" if over_fastest is not None else ""
        sentences.append(f"noise: the core's {repeats} repeats spread by at most {spread:.0%} of their median "
                         f"(at N = {widest.n}){fastest}.")
    if falls:
        by_n = {r.n: r for r in rows}
        fell = "; ".join(f"{label} from {human_seconds(getattr(by_n[small], field))} at N = {small} to "
                         f"{human_seconds(getattr(by_n[large], field))} at N = {large}"
                         for label, small, large in falls
                         for field in [dict(CONTENDERS)[label]])
        sentences.append(f"Times that fell as N grew, though the work grows with N: {fell}. That is the machine "
                         "(other programs, one-off costs), not attention.")
    if noisy:
        sentences.append("These times are noisy: close other programs and rerun, or raise --repeats.")
    return NoiseNote(repeats=repeats, widest_spread=spread, widest_at=widest.n if widest is not None else None,
                     median_over_fastest=over_fastest, falls=falls, noisy=noisy, sentences=tuple(sentences))

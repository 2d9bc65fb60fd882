"""``mha bench``: how the cost of attention grows with N, measured live: the core (or ``--blocked``) against its
matrix products alone, ``mha verify``'s loop and PyTorch when installed; one warm-up each, then ``repeats``
rounds in turn (a busy neighbour slows them all alike), the median of each kept.
"""

from __future__ import annotations

import math
import statistics
import sys
import textwrap
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

import numpy as np
from rich.console import Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mhacli.bench.baselines import (Weights, core_attention, matmuls_only, numpy_per_head, output_only_blocked,
                                    torch_available, torch_calls)
from mhacli.bench.machine import machine_info, machine_line
from mhacli.bench.notes import Row, SplitNote, human_seconds, noise_note, split_sentence
from mhacli.attention.embed import init_weights
from mhacli.attention.schedule import rows_per_block
from mhacli.io.host import cpu_count
from mhacli.render import theme
from mhacli.render.fit import fitted_table
from mhacli.attention.config import Config
from mhacli.io import memory
from mhacli.attention.config import human_bytes as human_size
from mhacli.attention.errors import UsageError
from mhacli.io.files import atomic_write
from mhacli.attention.steps import split_cost, steps_for, total_madds
from mhacli.measures.verify import reference_loop

MIN_TOKENS = 16
MAX_REPEATS = 100
PYTHON_LOOP_MAX = 128  # above this the pure-Python loop takes minutes; a numpy loop over heads stands in
SETTLE_SECONDS = 0.15
WARM_MIN_BYTES = 64 * 2**20  # below this, fresh memory costs too little to matter

Tick = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    """One bench run's choices (the CLI options)."""

    max_tokens: int = 4096
    repeats: int = 3
    d_model: int = 512
    heads: int = 8
    dtype: str = "float64"
    causal: bool = False
    blocked: bool = False
    seed: int = 0

    def check(self) -> None:
        """Refuse impossible or unaffordable settings before anything runs."""
        if not 1 <= self.repeats <= MAX_REPEATS:
            # A median of 100 runs is as steady as it gets; more only looks like a hang.
            raise UsageError(f"--repeats must be from 1 to {MAX_REPEATS}, got {self.repeats}.")
        if self.max_tokens < 1:
            raise UsageError(f"--max-tokens must be at least 1, got {self.max_tokens}.")
        # The run's own checks, with the run's words: sizes, nearest head counts, weights' memory.
        limit = memory.memory_limit_bytes()
        Config(heads=self.heads, d_model=self.d_model, dtype=self.dtype, seed=self.seed).check_fits(1, limit=limit)
        need = self.planned_bytes()
        if need > limit:
            fix = "a smaller --max-tokens" if self.blocked else "a smaller --max-tokens, or --blocked"
            raise UsageError(f"--max-tokens {self.max_tokens} needs about {human_size(need)} "
                             f"(the (h, N, N) arrays of the core and PyTorch), more than the "
                             f"{human_size(limit)} this machine can spare; use {fix}.")

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    def planned_bytes(self, n_tokens: int | None = None) -> int:
        """The most any one contender holds at N (default the largest): two (h, N, N) arrays, or blocks."""
        n, h = n_tokens or self.max_tokens, self.heads
        if self.blocked:  # each thread holds one block of scores and weights
            block = rows_per_block(h, n, self.itemsize) * h * n * self.itemsize
            return 2 * cpu_count() * block + 16 * n * self.d_model * self.itemsize
        return 2 * h * n * n * self.itemsize + 16 * n * self.d_model * self.itemsize


@dataclass(frozen=True)
class Result:
    settings: Settings
    machine: dict[str, object]
    rows: tuple[Row, ...]

    @property
    def has_torch(self) -> bool:
        return any(r.torch_seconds is not None for r in self.rows)

    def to_dict(self) -> dict[str, object]:
        split = split_note(self)
        return {"settings": asdict(self.settings), "machine": self.machine,
                "rows": [r.to_dict() for r in self.rows],
                "split": split.to_dict() if split is not None else None,
                "noise": noise_note(self.rows, self.settings.repeats).to_dict()}


def split_note(result: Result) -> SplitNote | None:
    """The split's note at the largest N (None for one head, or when one head was not timed)."""
    s, row = result.settings, result.rows[-1]
    if s.heads == 1 or row.one_head_seconds is None:
        return None
    cost = split_cost(row.n, s.d_model, s.heads, s.causal)
    cores = int(result.machine.get("cores", 1) or 1)  # type: ignore[call-overload]
    sentence = split_sentence(row.n, s.d_model, s.heads, cost.madds, cost.madds_one_head, cost.weights,
                              cost.weights_one_head, row.seconds, row.one_head_seconds, cores, not s.blocked)
    return SplitNote(n=row.n, heads=s.heads, d_model=s.d_model, madds=cost.madds, madds_one_head=cost.madds_one_head,
                     weights=cost.weights, weights_one_head=cost.weights_one_head, seconds=row.seconds,
                     one_head_seconds=row.one_head_seconds, cores=cores, kept=not s.blocked, sentence=sentence)


def token_counts(max_tokens: int) -> list[int]:
    """16, 32, … up to ``max_tokens`` (which is added when it is not a power of two)."""
    sizes, n = [], MIN_TOKENS
    while n <= max_tokens:
        sizes.append(n)
        n *= 2
    if not sizes or sizes[-1] != max_tokens:
        sizes.append(max_tokens)
    return sizes


def contenders(n: int, settings: Settings) -> tuple[dict[str, Callable[[], object]], str]:
    """Name → zero-argument call for one N, and which plain loop stands in ("python" or "numpy"), on X (N, d) and
    W_q, W_k, W_v, W_o in the bench's float type, from the seed."""
    rng, dtype = np.random.default_rng(settings.seed), np.dtype(settings.dtype)
    w: Weights = tuple(w.astype(dtype) for w in init_weights(settings.d_model, rng))  # type: ignore[assignment]
    x = rng.standard_normal((n, settings.d_model)).astype(dtype)  # (N, d)
    h, causal = settings.heads, settings.causal
    core = output_only_blocked if settings.blocked else core_attention

    def run_core() -> object:
        return core(x, *w, h, causal)

    def run_one_head() -> object:  # the same X and weights as one head of width d: what the split is weighed against
        return core(x, *w, 1, causal)
    kind = "python" if n <= PYTHON_LOOP_MAX else "numpy"
    loop = reference_loop if kind == "python" else numpy_per_head
    calls: dict[str, Callable[[], object]] = {
        "core": run_core,
        **({"one_head": run_one_head} if h > 1 else {}),
        "matmuls": lambda: matmuls_only(x, *w, h, keep=not settings.blocked),
        "loop": lambda: loop(x, *w, h, causal),
    }
    calls.update(torch_calls(x, w, h, causal))
    return calls, kind


def warm_memory(nbytes: int) -> None:
    """Touch, then free, ``nbytes`` of memory: a virtual machine hands free memory back to its host, and the
    contender after a long one would pay alone to get it back (docs/performance.md)."""
    if nbytes >= WARM_MIN_BYTES:
        buffer = np.empty(nbytes, dtype=np.uint8)
        buffer.fill(0)
        del buffer


def repeat_seconds(calls: dict[str, Callable[[], object]], repeats: int, tick: Tick,
                   warm_bytes: int = 0) -> dict[str, list[float]]:
    """Wall time of each call in each of ``repeats`` interleaved rounds, after one warm-up call each."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for name, call in calls.items():
        # The first call pays one-off costs (thread start, first touch of memory, lazy imports).
        result = call()
        del result
        tick(f"warm-up {name}")
    for _ in range(repeats):
        for name, call in calls.items():
            warm_memory(warm_bytes)
            # Worker threads keep spinning after a call and take the cores from whatever runs next
            # (docs/performance.md): let them fall asleep first.
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            result = call()
            times[name].append(time.perf_counter() - start)
            del result  # free (h, N, N) arrays before the next contender allocates its own
            tick(name)
    return times


def peak_bytes(call: Callable[[], object]) -> int:
    """The most memory a call held at once, as numpy and Python report it to tracemalloc."""
    tracemalloc.start()
    try:
        result = call()
        del result
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(n: int, settings: Settings, tick: Tick) -> Row:
    """Every contender at one N."""
    calls, kind = contenders(n, settings)
    times = repeat_seconds(calls, settings.repeats, tick, settings.planned_bytes(n))
    seconds = {name: statistics.median(values) for name, values in times.items()}
    peak = peak_bytes(calls["core"])
    tick("peak memory")
    steps = steps_for(n, settings.d_model, settings.heads, settings.causal)
    quadratic = sum(s.madds for s in steps if s.key in ("scores", "weighted"))
    return Row(n=n, seconds=seconds["core"], madds=total_madds(steps), quadratic_madds=quadratic,
               weights_bytes=settings.heads * n * n * settings.itemsize, peak_bytes=peak,
               matmul_seconds=seconds["matmuls"], loop_seconds=seconds["loop"], loop_kind=kind,
               torch_seconds=seconds.get("torch"), torch_weights_seconds=seconds.get("torch_weights"),
               one_head_seconds=seconds.get("one_head"), repeat_seconds=tuple(times["core"]))


def calls_per_size(settings: Settings) -> int:
    """Progress ticks for one N: warm-up and repeats of each contender, and the memory run."""
    has_torch, one_head = torch_available(), settings.heads > 1
    return (3 + one_head + 2 * has_torch) * (settings.repeats + 1) + 1


def run_bench(settings: Settings, tick: Tick = lambda _: None) -> Result:
    """Measure every N and describe the machine."""
    settings.check()
    rows = [measure(n, settings, tick) for n in token_counts(settings.max_tokens)]
    return Result(settings=settings, machine=machine_info(), rows=tuple(rows))


@contextmanager
def progress_bar(total: int, stream: IO[str] | None = None) -> Iterator[Tick]:
    """A Rich progress bar on stderr (the table or the JSON go to stdout); yields the tick callback."""
    from rich.console import Console

    console = Console(file=stream or sys.stderr)
    columns = (TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("bench", total=total)

        def tick(what: str) -> None:
            progress.update(task, advance=1, description=what)

        yield tick


def human_bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.1f} {unit}" if b < 10 * size else f"{b / size:.0f} {unit}"
    return f"{b:.0f} B"


def human_count(c: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if c >= size:
            return f"{c / size:.1f}{unit}"
    return f"{c:.0f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 0.1 else f"{value:.2f}"


def bench_table(result: Result) -> Group:
    """The bench as a Rich table, with what each column means underneath."""
    s = result.settings
    what = "outputs only (blocked, weights not kept)" if s.blocked else "all weights kept, as a trace"
    title = Text(f"mha bench · {s.dtype}, d = {s.d_model}, h = {s.heads}"
                 f"{', causal' if s.causal else ''} · core: {what}", style=theme.STYLE_TITLE)
    table = Table(box=None, header_style=theme.STYLE_TITLE, pad_edge=False)
    for name in ("N", "time", "mult-\nadds", "GFLOP\n/s", "weights", "peak\nmemory", "÷ loop", "÷ mat-\nmuls"):
        table.add_column(name, justify="right")
    if result.has_torch:
        table.add_column("÷ torch", justify="right")
        table.add_column("÷ torch\nweights", justify="right")
    for row in result.rows:
        r = row.ratios()
        cells = [str(row.n), human_seconds(row.seconds), human_count(row.madds), f"{row.gflops:.1f}",
                 human_bytes(row.weights_bytes), human_bytes(row.peak_bytes),
                 _ratio(r["loop"]) + ("" if row.loop_kind == "python" else "*"), _ratio(r["matmuls"])]
        if result.has_torch:
            cells += [_ratio(r["torch"]), _ratio(r["torch_weights"])]
        table.add_row(*cells)
    notes = [
        f"time: median of {s.repeats} after a warm-up. ÷ X: the core's time over X's, below 1 = faster.",
        f"loop: mha verify's pure-Python loop (one head, one query at a time) up to N = {PYTHON_LOOP_MAX}; "
        "* = a numpy loop over heads with whole N×N arrays.",
        "matmuls: the core's own matrix products alone (same blocks, same threads).",
    ]
    if result.has_torch:
        notes.append("torch: multi_head_attention_forward, need_weights=False; +weights: need_weights=True, "
                     "per head. Same number of threads.")
    else:
        notes.append("PyTorch is not installed here: its columns are left out.")
    notes.append(machine_line(result.machine))
    noise, split = noise_note(result.rows, s.repeats), split_note(result)
    said = [Text(line, style=theme.STYLE_BAD if noise.noisy else theme.STYLE_DIM) for line in noise.sentences]
    if split is not None:
        said.append(Text(split.sentence))
    return Group(title, fitted_table(table, "N = {}".format), *(Text(n, style=theme.STYLE_DIM) for n in notes), *said)


def spaced_labels(values: Sequence[float], axis_inches: float, size: float, log_span: tuple[float, float]) -> list[str]:
    """Tick labels for ``values`` on a log axis, blank where one would touch its neighbour (the last one kept)."""
    lo, hi = (math.log10(v) for v in log_span)
    span = max(hi - lo, 1e-12)

    def width(text: str) -> float:  # inches: a digit is about 0.6 em wide
        return len(text) * 0.6 * size / 72

    labels = [str(int(v)) for v in values]
    kept: list[str] = [""] * len(values)
    last: tuple[float, str] | None = None
    for i in range(len(values) - 1, -1, -1):  # from the largest N down: the largest is always labelled
        x = (math.log10(values[i]) - lo) / span * axis_inches
        if last is None or last[0] - x >= (width(last[1]) + width(labels[i])) / 2 + 0.06:
            kept[i] = labels[i]
            last = (x, labels[i])
    return kept


def seconds_ticks(low: float, high: float) -> list[float]:
    """1-2-5 steps covering [low, high] seconds; decades only when those would be more than eight."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = [m * 10.0**k for k in range(first, last + 1) for m in (1, 2, 5)]
    inside = [t for t in steps if low <= t <= high]
    if len(inside) > 8:
        inside = [t for t in inside if math.isclose(t, 10.0 ** round(math.log10(t)))]
    if len(inside) < 2:  # a narrow range: the nearest steps on either side make the axis readable
        below = [t for t in steps if t < low] or [low]
        above = [t for t in steps if t > high] or [high]
        inside = [below[-1], *inside, above[0]]
    return inside


def tick_seconds(t: float) -> str:
    """A round time for an axis: 2 ms, 500 µs, 1 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if t >= scale * 0.999:
            return f"{t / scale:g} {unit}"
    return f"{t * 1e9:g} ns"


def save_plot(result: Result, path: Path, dpi: int = 120) -> Path:
    """Log-log figure of time against N, the N² region and an N² slope marked, written atomically; the plain loop,
    whose method changes with N, is two series, never joined."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    rows, s = result.rows, result.settings
    n = np.array([r.n for r in rows], dtype=float)
    fig = Figure(figsize=(7.5, 4.8), dpi=dpi, facecolor=theme.PAPER_COLOR)
    FigureCanvasAgg(fig)
    left, right, top, bottom = 0.11, 0.7, 0.92, 0.31  # the legend goes right of the axes, over no line
    fig.subplots_adjust(left=left, right=right, top=top, bottom=bottom)
    ax = fig.add_subplot()
    Series = tuple[str, np.ndarray, list[float | None], str, str]  # label, N, seconds, colour, style
    lines: list[Series] = [
        ("mhacli core", n, [r.seconds for r in rows], theme.HEAD_COLORS[0], "o-"),
        ("its matrix products alone", n, [r.matmul_seconds for r in rows], theme.HEAD_COLORS[2], "s--"),
    ]
    for kind, label, style in (("python", "pure-Python loop (mha verify)", "^:"),
                               ("numpy", "numpy loop over heads", "x:")):
        picked = [r for r in rows if r.loop_kind == kind]  # two different loops: never joined by one line
        if picked:
            lines.append((label, np.array([r.n for r in picked], dtype=float), [r.loop_seconds for r in picked],
                          theme.SINGLE_HEAD_COLOR, style))
    if result.has_torch:
        lines += [("PyTorch, no weights", n, [r.torch_seconds for r in rows], theme.HEAD_COLORS[1], "d-."),
                  ("PyTorch, with weights", n, [r.torch_weights_seconds for r in rows], theme.HEAD_COLORS[3],
                   "v-.")]
    for label, xs, values, color, style in lines:
        ax.loglog(xs, np.array(values, dtype=float), style, color=color, label=label, lw=1.6, ms=4)
    # The N² guide: a slope-2 line through the core's largest N, so the eye can compare slopes.
    t_last = rows[-1].seconds
    guide = t_last * (n / n[-1]) ** 2
    ax.loglog(n, guide, color=theme.LABEL_COLOR, lw=0.8, ls=(0, (1, 3)), label="∝ N² (slope 2)")
    start = 2 * s.d_model  # past N = 2d the N² multiply-adds (2·N²·d) outnumber the linear ones (4·N·d²)
    if start < n[-1]:
        ax.axvspan(max(start, n[0]), n[-1], color=theme.HEAD_COLORS[4], alpha=0.15, lw=0)
        fig.text(0.01, 0.16, f"Shaded: N > 2d = {start}, where the N×N work (scores, weighted sums) "
                 "outgrows the d×d projections: time ∝ N².", fontsize=7.5, color=theme.LABEL_COLOR)
    ax.set_xlabel("tokens N (log scale)", fontsize=9)
    ax.set_ylabel("seconds per layer (log scale)", fontsize=9)
    ax.set_title(f"Multi-head attention, d = {s.d_model}, h = {s.heads}, {s.dtype}: time against N",
                 fontsize=10, color=theme.LABEL_COLOR)
    # Ticks of our own on both axes, minor ticks off: log axes otherwise label minor ticks
    # (2×10¹, 3×10¹ …) on top of the N labels when the range is short.
    span = (n[0] / 1.15, n[-1] * 1.15)
    ax.set_xlim(*span)
    ax.set_xticks(n, spaced_labels(list(n), 7.5 * (right - left), 8, span))
    every = [v for _, _, values, _, _ in lines for v in values if v] + list(guide)
    low, high = min(every) / 1.3, max(every) * 1.3
    y_ticks = seconds_ticks(low, high)
    ax.set_yticks(y_ticks, [tick_seconds(t) for t in y_ticks])
    ax.set_ylim(min(low, y_ticks[0]), max(high, y_ticks[-1]))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_locator(NullLocator())
    ax.tick_params(labelsize=8)
    ax.grid(True, which="major", color="#DDDDDD", lw=0.6)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    noise = noise_note(rows, s.repeats)
    said = " ".join(noise.sentences).replace("N = ", "N\u00a0=\u00a0")  # no line break inside "N = 32"
    fig.text(0.01, 0.145, "\n".join(textwrap.wrap(said, 125)), fontsize=7.5, va="top",
             color=theme.HEAD_COLORS[1] if noise.noisy else theme.LABEL_COLOR)
    machine = machine_line(result.machine)
    cut = machine.find(" · ", len(machine) // 2) if len(machine) > 150 else -1  # two lines when long
    if cut > 0:
        machine = machine[:cut] + "\n" + machine[cut + 3:]
    fig.text(0.01, 0.01, machine, fontsize=6, color=theme.SINGLE_HEAD_COLOR, va="bottom")
    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=dpi))

"""``mha bench`` at a tiny size (structure, never timings) and the fast core's parity with plain references."""

from __future__ import annotations

import io
import json
import re
import math
import os
import statistics
import struct
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mhacli.bench import baselines
from mhacli.bench import runner as bench
from mhacli.bench import startup
from mhacli.cli.app import app
from mhacli.attention import schedule
from mhacli.attention.attention import multi_head_attention, softmax
from mhacli.attention.embed import init_weights
from mhacli.attention.errors import RunError

from mhacli.attention.steps import steps_for, total_madds
from traced import run
from mhacli.measures.verify import TOLERANCE, reference_loop, verify

runner = CliRunner()
#: The blocked schedule on two threads, whatever this machine's affinity: the threaded path always runs.
TINY = ["--max-tokens", "32", "--repeats", "1", "--d-model", "16", "--heads", "2"]
# Above schedule.PARALLEL_MIN score entries (h·N²), so the threaded path runs.
BIG_N, BIG_D, BIG_H = 1100, 16, 1


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    """The pause that lets other threads fall asleep between timed calls only matters for real numbers."""
    monkeypatch.setattr(bench, "SETTLE_SECONDS", 0.0)


def invoke(*args: str):
    return runner.invoke(app, ["bench", *args])


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's signature and IHDR chunk (raises on anything else)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ---------------------------------------------------------------------------
# mha bench, tiny
# ---------------------------------------------------------------------------


UNITS = ("ns", "µs", "ms", "s")


def test_table_has_every_column_and_one_row_per_size():
    result = invoke(*TINY)
    assert result.exit_code == 0, result.output
    out = result.output
    for header in ("N", "time", "GFLOP", "weights", "peak", "÷ loop", "÷ mat"):
        assert header in out
    # A row is N, then a time and its unit ("16   35.8 µs …"): prose the bench wraps may also start with digits
    # ("321 µs" once made a third "row" of a line that only began with "32").
    rows = [parts for parts in map(str.split, out.splitlines())
            if len(parts) > 2 and parts[0].isdigit() and re.fullmatch(r"[\d.]+", parts[1]) and parts[2] in UNITS]
    assert [r[0] for r in rows] == ["16", "32"]
    assert "pure-Python loop" in out and "matrix products alone" in out
    assert "cores" in out and "numpy" in out  # the machine line


def test_json_numbers_are_consistent():
    result = invoke(*TINY, "--json", "--dtype", "float32", "--causal")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["settings"]["dtype"] == "float32" and doc["settings"]["causal"] is True
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["numpy"] == np.__version__
    rows = doc["rows"]
    assert [r["n"] for r in rows] == [16, 32]
    for r in rows:
        n = r["n"]
        steps = steps_for(n, 16, 2, causal=True)
        assert r["madds"] == total_madds(steps)
        assert r["quadratic_madds"] == 2 * 2 * n * n * 8  # scores and weighted values: 2 · h · N² · d/h
        assert r["weights_bytes"] == 2 * n * n * 4
        assert r["loop_kind"] == "python"
        for key in ("seconds", "matmul_seconds", "loop_seconds"):
            assert r[key] > 0
        assert r["peak_bytes"] >= r["weights_bytes"]  # scores and weights are kept: at least that much
        assert math.isclose(r["gflops"], 2 * r["madds"] / r["seconds"] / 1e9)
        assert math.isclose(r["ratios"]["matmuls"], r["seconds"] / r["matmul_seconds"])
        assert math.isclose(r["ratios"]["loop"], r["seconds"] / r["loop_seconds"])


@pytest.mark.torch_aware
def test_torch_columns_only_when_torch_is_importable(monkeypatch):
    with_torch = baselines.torch_available()
    result = invoke(*TINY, "--json")
    rows = json.loads(result.stdout)["rows"]
    assert all((r["torch_seconds"] is not None) == with_torch for r in rows)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails, as without PyTorch
    assert not baselines.torch_available()
    result = invoke(*TINY)
    assert result.exit_code == 0, result.output
    assert "÷ torch" not in result.output and "PyTorch is not installed" in result.output


def test_plot_is_a_png_written_into_out(tmp_path):
    out = tmp_path / "figs"
    result = invoke(*TINY, "--plot", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # the file report went to stderr: stdout stays one JSON document
    png = out / "bench.png"
    width, height = png_size(png)
    assert (width, height) == (900, 576)  # 7.5 × 4.8 inches at 120 dpi
    assert sorted(p.name for p in out.iterdir()) == ["bench.png"]  # no temporary file left behind
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.std() > 0.05  # not blank


def test_plot_draws_every_measured_line(tmp_path, monkeypatch):
    """The figure holds one line per contender with the measured times, and the N² guide."""
    drawn = {}
    from matplotlib.axes import Axes

    original = Axes.loglog

    def spy(self, x, y, *args, **kwargs):
        drawn[kwargs.get("label")] = (np.asarray(x), np.asarray(y))
        return original(self, x, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "loglog", spy)
    result = bench.run_bench(bench.Settings(max_tokens=32, repeats=1, d_model=16, heads=2))
    bench.save_plot(result, tmp_path / "b.png")
    np.testing.assert_array_equal(drawn["mhacli core"][1], [r.seconds for r in result.rows])
    np.testing.assert_array_equal(drawn["mhacli core"][0], [16, 32])
    np.testing.assert_array_equal(drawn["pure-Python loop (mha verify)"][1], [r.loop_seconds for r in result.rows])
    np.testing.assert_array_equal(drawn["its matrix products alone"][1], [r.matmul_seconds for r in result.rows])
    guide = drawn["∝ N² (slope 2)"][1]
    assert math.isclose(guide[1] / guide[0], 4.0)  # doubling N quadruples the guide
    assert ("PyTorch, no weights" in drawn) == result.has_torch


def made_up_result(ns: list[int], torch: bool = True) -> bench.Result:
    """Rows with round numbers (t ∝ N²): the figure's layout, without minutes of timing."""
    rows = []
    for n in ns:
        t = 1e-4 + n * n * 1e-8
        rows.append(bench.Row(n=n, seconds=t, madds=1, quadratic_madds=1, weights_bytes=1, peak_bytes=1,
                              matmul_seconds=t * 0.8, loop_seconds=t * (30 if n <= 128 else 2),
                              loop_kind="python" if n <= bench.PYTHON_LOOP_MAX else "numpy",
                              torch_seconds=t * 0.9 if torch else None,
                              torch_weights_seconds=t * 1.5 if torch else None))
    machine = {"cores": 2, "cpu": "Test CPU " * 8, "numpy": "2", "blas": [], "load_average": [1.0, 1.0, 1.0]}
    return bench.Result(settings=bench.Settings(max_tokens=ns[-1], d_model=64), machine=machine, rows=tuple(rows))


@pytest.mark.parametrize("ns,dpi", [([16, 32, 64, 128, 256, 512, 1024, 2048, 4096], 120), ([16, 17], 60),
                                    ([16, 32, 64, 100, 128, 200], 60), ([5], 120)])
def test_plot_labels_never_overlap_and_the_two_loops_stay_apart(tmp_path, monkeypatch, ns, dpi):
    from matplotlib.figure import Figure

    figures = []
    real_savefig = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    bench.save_plot(made_up_result(ns), tmp_path / "b.png", dpi=dpi)
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    for axis in (ax.xaxis, ax.yaxis):
        ticks = [t for t in axis.get_ticklabels(which="both") if t.get_text() and t.get_visible()]
        boxes = sorted((t.get_window_extent(renderer) for t in ticks), key=lambda b: (b.x0, b.y0))
        assert boxes, "an axis without a single label"
        for a, b in zip(boxes, boxes[1:]):  # minor labels (2×10¹ …) included
            assert not a.overlaps(b), [t.get_text() for t in ticks]
    assert ax.get_xticklabels()[-1].get_text() == str(ns[-1])  # the largest N is always named
    figure_box = fig.bbox
    for text in [*fig.texts, ax.xaxis.label, ax.yaxis.label, ax.title, *ax.get_legend().get_texts()]:
        box = text.get_window_extent(renderer)
        assert figure_box.x0 - 1 <= box.x0 and box.x1 <= figure_box.x1 + 1, text.get_text()  # nothing cut off
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))  # beside the axes: it hides no point
    lines = {line.get_label(): line.get_xdata() for line in ax.get_lines()}
    python, numpy_loop = lines.get("pure-Python loop (mha verify)"), lines.get("numpy loop over heads")
    assert list(python) == [n for n in ns if n <= bench.PYTHON_LOOP_MAX]
    assert (numpy_loop is None) == (ns[-1] <= bench.PYTHON_LOOP_MAX)
    if numpy_loop is not None:  # one line each: the pure-Python points never joined to the numpy ones
        assert list(numpy_loop) == [n for n in ns if n > bench.PYTHON_LOOP_MAX]


def test_seconds_ticks_are_round_and_cover_the_range():
    assert bench.seconds_ticks(1.1e-3, 9e-3) == pytest.approx([2e-3, 5e-3])
    assert len(bench.seconds_ticks(1e-6, 10.0)) <= 8  # decades only, over seven decades
    narrow = bench.seconds_ticks(1.2e-3, 1.4e-3)
    assert narrow[0] <= 1.2e-3 and narrow[-1] >= 1.4e-3 and len(narrow) >= 2
    assert [bench.tick_seconds(t) for t in (2.0, 5e-3, 1e-4)] == ["2 s", "5 ms", "100 µs"]


def test_blocked_bench_runs_and_keeps_memory_below_the_weights():
    row = bench.measure(2048, bench.Settings(max_tokens=2048, repeats=1, d_model=16, heads=2, blocked=True),
                        tick=lambda _: None)
    assert row.n == 2048 and row.loop_kind == "numpy"
    assert row.peak_bytes < row.weights_bytes / 2  # the (h, N, N) weights never exist at once


# Bad options of mha bench (--repeats 0, --dtype float16, --startup --plot, …) are rows of docs/errors.md,
# checked by the one table-driven test in tests/test_errors.py.


def test_token_counts_are_powers_of_two_up_to_the_limit():
    assert bench.token_counts(4096) == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert bench.token_counts(100) == [16, 32, 64, 100]
    assert bench.token_counts(5) == [5]


# The installed mha's 'bench --max-tokens 16 --repeats 1 --json' runs in a real process in
# tests/test_json_schemas.py, which parses it and checks it against the shipped schema.


# ---------------------------------------------------------------------------
# The core's schedule and the bench's own paths against plain references
# ---------------------------------------------------------------------------


def inputs(n: int, d: int, seed: int, dtype: str = "float64"):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(dtype)
    return x, tuple(w.astype(dtype) for w in init_weights(d, rng))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), heads=st.integers(1, 4), d_k=st.integers(1, 4), causal=st.booleans(),
       dtype=st.sampled_from(["float64", "float32"]), seed=st.integers(0, 2**32 - 1))
def test_core_and_bench_paths_match_the_plain_loop(n, heads, d_k, causal, dtype, seed):
    x, w = inputs(n, heads * d_k, seed, dtype)
    parts = vars(baselines.core_attention(x, *w, heads, causal))
    ref = reference_loop(x, *w, heads, causal)
    tol = 1e-12 if dtype == "float64" else TOLERANCE["float32"]
    for name in ("Q", "K", "V", "weights", "heads", "concat", "output"):
        assert parts[name].dtype == np.dtype(dtype), name
        np.testing.assert_allclose(parts[name], ref[name], atol=tol, rtol=0, err_msg=name)
    finite = np.isfinite(ref["scores"])
    assert np.array_equal(np.isfinite(parts["scores"]), finite)
    np.testing.assert_allclose(parts["scores"][finite], ref["scores"][finite], atol=tol * 10, rtol=0)
    # The bench's output-only path runs the same step functions on blocks of rows.
    np.testing.assert_allclose(baselines.output_only_blocked(x, *w, heads, causal), ref["output"],
                               atol=tol, rtol=0)
    np.testing.assert_allclose(baselines.numpy_per_head(x, *w, heads, causal), ref["output"], atol=tol, rtol=0)
    if not causal:  # no mask, so no softmax either: the products alone differ, but have the right shape
        assert baselines.matmuls_only(x, *w, heads, keep=True).shape == (n, heads * d_k)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_threaded_blocks_are_deterministic_and_match_whole_arrays(dtype, causal, monkeypatch):
    """The bench's blocked path on two threads: the same bits every time, the whole-array output to rounding."""
    monkeypatch.setattr(baselines, "cpu_count", lambda: 2)
    x, w = inputs(BIG_N, BIG_D, 3, dtype)
    assert BIG_H * BIG_N**2 >= schedule.PARALLEL_MIN
    first, again = (baselines.output_only_blocked(x, *w, BIG_H, causal) for _ in range(2))
    np.testing.assert_array_equal(first, again)
    whole = multi_head_attention(x, x, x, *w, BIG_H, causal)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(first, whole.output, atol=tol, rtol=0)
    plain = baselines.numpy_per_head(x.astype(np.float64), *(m.astype(np.float64) for m in w), BIG_H, causal)
    np.testing.assert_allclose(whole.output, plain, atol=1e-12 if dtype == "float64" else 1e-4, rtol=0)
    weights = whole.weights
    assert not np.isnan(weights).any()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12 if dtype == "float64" else 1e-5)
    if causal:
        later = np.triu(np.ones((BIG_N, BIG_N), dtype=bool), 1)
        assert (weights[:, later] == 0).all() and np.isneginf(whole.scores[:, later]).all()


def test_matmuls_only_are_the_cores_products_without_mask_and_softmax():
    x, w = inputs(64, 8, 1)
    q = x @ w[0].T  # one head: (N, d)
    k = x @ w[1].T
    v = x @ w[2].T
    expected = (q @ k.T / math.sqrt(8)) @ v @ w[3].T  # scores used as weights, unnormalised
    np.testing.assert_allclose(baselines.matmuls_only(x, *w, 1, keep=False), expected, rtol=1e-10)


def test_fully_masked_rows_give_zeros_not_nan():
    scores = np.full((2, 3), -np.inf)
    scores[1] = [0.0, 1.0, -np.inf]
    out = softmax(scores)
    assert (out[0] == 0).all() and not np.isnan(out).any()
    np.testing.assert_allclose(out[1], [1 / (1 + math.e), math.e / (1 + math.e), 0.0])


def test_blocked_output_memory_grows_with_n_not_n_squared():
    n, d, h = 4096, 64, 2
    x, w = inputs(n, d, 0, "float32")
    weights_bytes = h * n * n * 4  # 128 MiB if they were all kept

    def peak(call) -> int:
        tracemalloc.start()
        try:
            call()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    lean = peak(lambda: baselines.output_only_blocked(x, *w, h, False))
    full = peak(lambda: baselines.core_attention(x, *w, h, False))
    assert full >= 2 * weights_bytes  # scores and weights, as the trace needs
    assert lean < weights_bytes / 4, f"blocked path peaked at {lean / 2**20:.0f} MiB"


def test_worker_errors_reach_the_caller(monkeypatch):
    """A block that fails on a worker thread fails the whole call, with its own exception."""
    real, calls, lock = baselines.attend, [], threading.Lock()

    def second_block_fails(q, k, v, blocked):
        with lock:
            calls.append(q.shape[1])
            failing = len(calls) == 2
        if failing:
            raise ValueError("block 2 failed")
        return real(q, k, v, blocked)

    x, w = inputs(BIG_N, BIG_D, 0)
    monkeypatch.setattr(baselines, "attend", second_block_fails)
    monkeypatch.setattr(baselines, "cpu_count", lambda: 2)
    with pytest.raises(ValueError, match="block 2"):
        baselines.output_only_blocked(x, *w, BIG_H, False)
    assert len(calls) >= 2  # it did run on blocks


def test_float32_runs_end_to_end_and_verifies(tmp_path):
    trace = run("The animal didn't cross the street because it was too tired", dtype="float32", causal=True)
    for name in ("X", "Q", "K", "V", "scores", "weights", "heads", "concat", "output"):
        assert getattr(trace, name).dtype == np.float32, name
    assert all(check.ok for check in verify(trace))
    npz = tmp_path / "t32.npz"
    made = runner.invoke(app, ["explain", "the cat sat on the mat", "--dtype", "float32", "--no-plots",
                               "--save-npz", str(npz)])
    assert made.exit_code == 0, made.output
    checked = runner.invoke(app, ["verify", str(npz)])
    assert checked.exit_code == 0, checked.output


def test_trace_keeps_the_core_arrays_read_only():
    trace = run("the cat sat on the mat", heads=2, d_model=8)
    for name in ("scores", "weights", "output"):
        assert not getattr(trace, name).flags.writeable


# ---------------------------------------------------------------------------
# mha bench --startup: the harness on cheap commands (real timings would take minutes)
# ---------------------------------------------------------------------------

SLEEPER = "import sys, time; print('first', flush=True); time.sleep({}); print('last')"


def test_run_timed_sees_the_first_line_before_the_end():
    first, total, cpu = startup.run_timed([sys.executable, "-c", SLEEPER.format(0.4)])
    assert first < total and total - first >= 0.35  # the sleep comes between the two lines
    assert 0 < cpu < total - 0.3  # sleeping uses no CPU
    _, _, busy = startup.run_timed([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                                    "while time.process_time() < end: pass\nprint(1)"])
    assert busy >= 0.3


def test_run_timed_refuses_a_failing_command():
    with pytest.raises(RunError, match="boom"):
        startup.run_timed([sys.executable, "-c", "import sys; sys.exit('boom')"])


def fake_commands(out_dir: Path) -> dict[str, list[str]]:
    """Stand-ins for the real commands: the same names, each with a known shape in time."""
    py = sys.executable
    return {"imports": [py, "-c", "'imports'"], "imports_pyplot": [py, "-c", "'pyplot'"], "help": [py, "-c", "1"],
            "no_plots": [py, "-c", SLEEPER.format(0.0)],
            "figures": [py, "-c", f"import pathlib; assert pathlib.Path({str(out_dir)!r}).is_dir(); "
                        + SLEEPER.format(0.3)]}


def test_startup_rounds_are_interleaved_medians_and_the_folder_goes(monkeypatch):
    seen: list[list[str]] = []
    real = startup.run_timed

    def spy(argv):
        seen.append(argv)
        return real(argv)

    monkeypatch.setattr(startup, "startup_commands", fake_commands)
    monkeypatch.setattr(startup, "run_timed", spy)
    ticks: list[str] = []
    result = startup.measure_startup(2, ticks.append)
    assert len(seen) == len(ticks) == startup.rounds_ticks(2) == 3 * 5  # warm-up round + 2, five commands
    assert seen[0] != seen[5] and sorted(map(str, seen[:5])) == sorted(map(str, seen[5:10]))  # rotated rounds
    assert all(len(v) == 2 for v in result.seconds.values())  # the warm-up round is not counted
    folder = Path(seen[[i for i, a in enumerate(seen) if "pathlib" in a[-1]][0]][-1].split("'")[1])
    assert not folder.exists()  # the temporary folder is gone after the run
    assert result.median("figures") >= result.median("first_line") + 0.25
    within = [f / n for f, n in zip(result.seconds["first_line"], result.seconds["no_plots"])]
    assert math.isclose(result.first_line_ratio, statistics.median(within))  # ratios within rounds, then median
    assert math.isclose(result.figures_ratio, statistics.median(result.rounds("figures", "imports")))
    assert all(len(v) == 2 for v in result.cpu.values()) and "first_line" not in result.cpu
    assert math.isclose(result.figures_cpu_ratio,
                        statistics.median(c / i for c, i in zip(result.cpu["figures"], result.cpu["imports"])))
    doc = result.to_dict()["ratios"]
    assert doc["figures_over_imports"]["met"] == (max(result.rounds("figures", "imports")
                                                      + result.figures_cpu_rounds) <= startup.FIGURES_TARGET)
    assert doc["first_line_over_no_plots"]["met"] == (max(within) <= startup.FIRST_LINE_TARGET)
    assert result.machine["blas"] and "load_average_before" in result.machine


@given(value=st.floats(0.0, 100.0), target=st.sampled_from([1.0, 2.2, startup.FIGURES_TARGET]))
def test_a_ratio_that_misses_its_target_never_reads_as_the_target(value, target):
    text = startup.shown_ratio(value, target)
    assert (float(text) > target) == (value > target)  # what is printed says what the verdict says
    assert len(text.split(".")[1]) == 2 or (value > target and round(value, 2) <= target)
    assert startup.shown_ratio(2.204, 2.2) == "2.204" and startup.shown_ratio(2.196, 2.2) == "2.20"


@pytest.mark.parametrize("rounds, target, said", [
    ([0.5, 0.9, 1.0], 1.0, "met"),  # every round within the target, the last on it
    ([2.3, 2.8, 2.5], 2.2, "NOT met"),
    ([1.1, 0.9, 2.0, 3.0], 2.2, "3 of 4 rounds met: unsettled"),
    ([], 2.2, "NOT met"),  # nothing measured is nothing met
])
def test_a_verdict_is_met_only_when_every_round_is(rounds, target, said):
    assert startup.round_verdict(rounds, target) == said


def test_a_median_within_the_target_with_rounds_and_cpu_outside_it_does_not_read_met():
    """Issue 46: (b) read "met" on a loaded machine where its CPU ratio read 3.4. The verdict takes every round,
    in wall and CPU seconds: a median that passes is not enough."""
    seconds = {"imports": [1.0] * 5, "figures": [1.5, 2.0, 2.1, 2.6, 2.8], "first_line": [0.3] * 5,
               "no_plots": [0.5] * 5}
    cpu = {"imports": [0.5] * 5, "figures": [1.7] * 5}
    result = startup.Startup(repeats=5, seconds=seconds, machine={}, cpu=cpu)
    assert result.figures_ratio == 2.1 and result.figures_cpu_ratio == pytest.approx(3.4)  # a median would pass
    assert result.figures_verdict == "3 of 10 rounds met: unsettled"
    assert result.first_line_verdict == "met"


def test_startup_report_states_both_ratios_and_the_blas(monkeypatch):
    machine = {"cores": 2, "cpu": "Test CPU", "numpy": "2", "load_average": [1.0, 1.0, 1.0],
               "load_average_before": [0.5, 0.5, 0.5],
               "blas": [{"internal_api": "openblas", "version": "0.3", "architecture": "Haswell",
                         "num_threads": 2, "threading_layer": "pthreads"}]}
    seconds = {"imports": [0.5, 0.4, 0.6], "imports_pyplot": [0.6] * 3, "help": [0.2] * 3,
               "no_plots": [0.4] * 3, "figures": [1.2, 1.0, 5.0], "first_line": [0.3, 0.5, 0.3]}
    cpu = {name: [0.2] * 3 for name in ("imports_pyplot", "help", "no_plots")}
    cpu.update(imports=[0.25, 0.3, 0.2], figures=[0.6, 0.5, 0.7])
    result = startup.Startup(repeats=3, seconds=seconds, machine=machine, cpu=cpu)
    # Within each round: (a) 0.75, 1.25, 0.75; (b) 2.4, 2.5, 8.33; (b) in CPU 2.4, 1.67, 3.5.
    assert math.isclose(result.first_line_ratio, 0.75) and math.isclose(result.figures_ratio, 2.5)
    from rich.console import Console

    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(startup.startup_table(result))
    text = " ".join(console.file.getvalue().split())
    assert "within each round: median 0.75 (range 0.75–1.25); target ≤ 1.0: 2 of 3 rounds met: unsettled" in text
    assert "within each round: median 2.50 (range 2.40–8.33)" in text
    assert "hardly change: median 2.40 (range 1.67–3.50)" in text
    assert "(b) target ≤ 2.5, every round in wall and CPU seconds: 4 of 6 rounds met: unsettled" in text
    assert "openblas 0.3 (Haswell kernel, pthreads, 2 threads)" in text
    assert max(len(line) for line in console.file.getvalue().splitlines()) <= 80


def test_mha_bench_startup_prints_the_json(monkeypatch):
    monkeypatch.setattr(startup, "startup_commands", fake_commands)
    result = invoke("--startup", "--repeats", "1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc["commands"]) == {"imports", "imports_pyplot", "help", "no_plots", "figures", "first_line"}
    assert doc["ratios"]["figures_over_imports"]["target"] == 2.5
    assert doc["ratios"]["figures_over_imports"]["baseline"] == startup.IMPORTS


# ---------------------------------------------------------------------------
# mha bench --train (a few steps of a small model: the wiring and the report, not the speed)
# ---------------------------------------------------------------------------


@pytest.fixture
def quick_train(monkeypatch):
    from mhacli.bench import train as timing
    from mhacli.grammar.grammar import LONGEST
    from mhacli.grammar.model import TrainConfig

    real = timing.bench_train
    monkeypatch.setattr(timing, "bench_train", lambda repeats, config, tick: real(
        repeats, steps=2, config=TrainConfig(task=config.task, heads=2, d_model=8, batch=4,
                                             length=LONGEST if config.task == "grammar" else 6), tick=tick))


def test_bench_train_times_the_grammar_model_with_its_padding(quick_train):
    result = invoke("--train", "--task", "grammar", "--repeats", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["config"]["task"] == "grammar" and report["numpy_seconds_per_step"] > 0
    refused = invoke("--task", "grammar")
    assert refused.exit_code == 2 and "add --train" in refused.output


@pytest.mark.torch_aware
def test_mha_bench_train_reports_both_medians_and_their_ratio(quick_train):
    result = invoke("--train", "--repeats", "2", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["numpy_times"]) == 2 and doc["numpy_seconds_per_step"] == statistics.median(doc["numpy_times"])
    assert doc["config"]["d_model"] == 8 and doc["machine"]["blas"]
    if baselines.torch_available():  # the headline ratio: the median of the ratios within each round
        fastest = doc["torch"][doc["fastest_torch"]]
        assert doc["torch_seconds_per_step"] == fastest["median"] == min(t["median"] for t in doc["torch"].values())
        within = [a / b for a, b in zip(doc["numpy_times"], doc["torch_times"])]
        assert math.isclose(doc["ratio"], statistics.median(within)) and doc["ratio_range"] == [min(within),
                                                                                              max(within)]
    shown = invoke("--train", "--repeats", "1")
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "numpy, mha train's step (float32)" in text and "d_model 8, 2 heads" in text
    assert ("numpy ÷ the fastest PyTorch step" in text) == baselines.torch_available()


@pytest.mark.slow
def test_figure_costs_times_every_phase_and_writes_every_figure(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mhacli.bench.figure_costs", "--once", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    phases = json.loads(proc.stdout)
    assert all(cpu >= 0 and wall >= 0 for cpu, wall in phases.values())
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["head-1.png", "head-2.png", "head-3.png", "head-4.png", "heads.png", "magnifiers.png",
                       "split.png"]  # what mha explain writes for the sentence: the same work is timed
    assert list(phases) == ["import numpy, rich.console", "import matplotlib.figure", "import mhacli.pipeline",
                            "import mhacli.render.figures, Agg", "trace",
                            *(f"draw and save {name}" for name in written)]  # every file, in the order written


def test_an_interrupted_bench_ends_the_timed_command(monkeypatch):
    """Ctrl-C while a command is timed: the command is ended too, not left running on its own."""
    import signal

    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    class SignalAfterFirstLine:
        """The timed command's stdout: Ctrl-C arrives just as its first line has been read (no timer)."""

        def __init__(self, stream):
            self.stream = stream

        def readline(self):
            line = self.stream.readline()
            os.kill(os.getpid(), signal.SIGINT)  # delivered before the next line of run_timed runs
            return line

        def __getattr__(self, name):
            return getattr(self.stream, name)

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        started[-1].stdout = SignalAfterFirstLine(started[-1].stdout)
        return started[-1]

    monkeypatch.setattr(startup.subprocess, "Popen", popen)
    # Ctrl-C as Python handles it in a terminal: a suite started in a shell's background inherits SIGINT
    # ignored, and the bench would then wait out the sleeper's 600 s.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            startup.run_timed([sys.executable, "-c", "print('first', flush=True); import time; time.sleep(600)"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert started and started[0].poll() is not None  # the sleeper was ended with the bench


# ---------------------------------------------------------------------------
# What the numbers say: the split's cost and the noise (synthetic timings, never measured ones)
# ---------------------------------------------------------------------------


def timed_result(medians: list[float], repeats: list[tuple[float, ...]], heads: int = 8,
                 one_head: float | None = 1e-3) -> bench.Result:
    """made_up_result's rows with the given core medians and repeats."""
    import dataclasses

    base = made_up_result([16 * 2**i for i in range(len(medians))])
    rows = tuple(dataclasses.replace(r, seconds=t, repeat_seconds=rep, one_head_seconds=one_head)
                 for r, t, rep in zip(base.rows, medians, repeats))
    return dataclasses.replace(base, rows=rows, settings=dataclasses.replace(
        base.settings, heads=heads, repeats=len(repeats[0])))


def test_the_split_note_is_the_step_tables_counts_and_the_runs_two_times():
    from mhacli.bench.notes import ARTICLE_CLAIM
    from mhacli.bench.runner import split_note
    from mhacli.attention.steps import split_cost

    result = timed_result([1e-3, 2e-3, 3e-3], [(1e-3,)] * 2 + [(3e-3,)], one_head=2e-3)
    note = split_note(result)
    cost = split_cost(64, 64, 8)
    assert (note.n, note.madds, note.madds_one_head) == (64, cost.madds, cost.madds_one_head)
    assert note.madds == note.madds_one_head  # splitting d keeps the multiply-adds
    assert (note.weights, note.weights_one_head) == (8 * 64 * 64, 64 * 64)
    assert f"“{ARTICLE_CLAIM}”" in note.sentence and f"same {cost.madds:,} multiply-adds" in note.sentence
    assert "8 heads took 3.0 ms (1.50× one head's 2.0 ms)" in note.sentence
    assert "8 × 64 × 64 = 32,768 attention weights are kept instead of 4,096" in note.sentence
    faster = split_note(timed_result([1e-3], [(1e-3,)], one_head=4e-3))
    assert "8 heads took 1.0 ms, one head 4.0 ms (4.00× as long)" in faster.sentence
    assert split_note(timed_result([1e-3], [(1e-3,)], heads=1, one_head=None)) is None  # nothing was split


def test_the_split_note_is_in_the_table_and_the_json_from_the_same_run():
    result = invoke(*TINY, "--json")
    doc = json.loads(result.stdout)
    split, last = doc["split"], doc["rows"][-1]
    assert split["seconds"] == last["seconds"] and split["one_head_seconds"] == last["one_head_seconds"] > 0
    assert split["madds"] == split["madds_one_head"] == last["madds"]
    table = runner.invoke(app, ["bench", *TINY], env={"COLUMNS": "80"}).output
    words = " ".join(table.split())
    assert "“helps with the computational efficiency”" in words and "2 heads took" in words
    assert all(len(line) <= 80 for line in table.splitlines())


def test_steady_rising_times_are_called_steady():
    from mhacli.bench.notes import noise_note

    result = timed_result([1e-3, 2e-3, 4e-3], [(0.95e-3, 1e-3, 1.05e-3), (2e-3, 2e-3, 2.1e-3), (4e-3, 4e-3, 4e-3)])
    note = noise_note(result.rows, 3)
    assert not note.noisy and note.falls == ()
    assert note.widest_spread == pytest.approx(0.1) and note.widest_at == 16
    assert note.sentences == ("noise: the core's 3 repeats spread by at most 10% of their median (at N = 16); "
                              "medians at most 1.05× the fastest repeat.",)


def test_the_loaded_run_of_the_issue_is_called_noisy():
    """Measured under load: N = 16 at 187 ms, N = 64 at 3 ms; the note says so, and why it is not attention."""
    from mhacli.bench.notes import noise_note

    result = timed_result([0.187, 0.010, 0.003], [(0.003, 0.187, 0.2), (0.002, 0.010, 0.011), (0.003,) * 3])
    note = noise_note(result.rows, 3)
    assert note.noisy and note.falls == (("the core", 16, 32), ("the core", 32, 64))
    assert note.widest_at == 16 and note.widest_spread == pytest.approx((0.2 - 0.003) / 0.187)
    assert note.median_over_fastest == pytest.approx(0.187 / 0.003)
    assert note.sentences[1] == ("Times that fell as N grew, though the work grows with N: the core from 187.0 ms "
                                 "at N = 16 to 10.0 ms at N = 32; the core from 10.0 ms at N = 32 to 3.0 ms at "
                                 "N = 64. That is the machine (other programs, one-off costs), not attention.")
    assert note.sentences[-1].startswith("These times are noisy")
    import dataclasses

    torch_fell = dataclasses.replace(result.rows[2], torch_seconds=result.rows[1].torch_seconds / 2)
    other = noise_note((*result.rows[:2], torch_fell), 3)
    assert ("PyTorch", 32, 64) in other.falls  # every contender's medians are read, not the core's alone
    wide = noise_note(timed_result([1e-3, 2e-3], [(0.5e-3, 1e-3, 1e-3), (2e-3,) * 3]).rows, 3)
    assert wide.noisy and wide.falls == ()  # a 50% spread alone
    small_dip = noise_note(timed_result([1e-3, 0.95e-3], [(1e-3,) * 3, (0.95e-3,) * 3]).rows, 3)
    assert not small_dip.noisy  # 5% down: within FALL_SHARE
    one = noise_note(timed_result([1e-3, 2e-3], [(1e-3,), (2e-3,)]).rows, 1)
    assert one.widest_spread is None and "no spread to judge noise by" in one.sentences[0]


@pytest.mark.parametrize("width", [80, 40])
def test_the_table_shows_every_number_whole_at_80_and_40_columns(width):
    """At 40 columns the ten columns cannot fit: each N becomes a record ('N = 16', 'time: …'), never '…'."""
    from rich.console import Console

    result = timed_result([0.187, 0.010, 0.003], [(0.003, 0.187, 0.2), (0.002, 0.010, 0.011), (0.003,) * 3])
    console = Console(width=width, record=True, color_system=None)
    console.print(bench.bench_table(result))
    text = console.export_text()
    assert "…" not in text.replace("16, 32, …", "") and max(map(len, text.splitlines())) <= width, text
    for row in result.rows:
        if width == 40:
            assert f"N = {row.n}" in text and f"time: {bench.human_seconds(row.seconds)}" in text, text
        else:
            assert any(line.split()[:2] == [str(row.n), *bench.human_seconds(row.seconds).split()[:1]]
                       for line in text.splitlines()), text


def test_the_noise_note_is_printed_and_drawn(tmp_path, monkeypatch):
    result = timed_result([0.187, 0.010, 0.003], [(0.003, 0.187, 0.2), (0.002, 0.010, 0.011), (0.003,) * 3])
    console = io.StringIO()
    from rich.console import Console

    Console(file=console, width=80, color_system=None).print(bench.bench_table(result))
    printed = " ".join(console.getvalue().split())
    assert "the core from 187.0 ms at N = 16 to 10.0 ms at N = 32" in printed and "These times are noisy" in printed
    written = []
    from matplotlib.figure import Figure

    original = Figure.text

    def spy(self, x, y, s, *args, **kwargs):
        written.append(s)
        return original(self, x, y, s, *args, **kwargs)

    monkeypatch.setattr(Figure, "text", spy)
    bench.save_plot(result, tmp_path / "b.png")
    drawn = " ".join(" ".join(written).split()).replace("\u00a0", " ")
    assert "the core from 187.0 ms at N = 16 to 10.0 ms at N = 32" in drawn and "These times are noisy" in drawn

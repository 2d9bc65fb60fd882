"""``mha bench``: the timing harness of mhacli.bench, behind one command."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mhacli.cli.options import (OUT_DIR, BenchTaskOpt, BenchTrainOpt, BlockedOpt, CausalOpt, DModelOpt, DtypeOpt,
                                HeadsOpt, NumbersJsonOpt, PlotOpt, RepeatsOpt, StartupOpt, TilesOpt, unless_given)
from mhacli.cli.options import BenchMaxTokensOpt as MaxTokensOpt
from mhacli.cli.options import OutOpt as OutDirOpt
from mhacli.cli.output import json_document, print_all, report_written, write_stdout
from mhacli.attention.errors import UsageError

#: What only the layer bench (time against N) reads, None unless given (runner.Settings has the defaults the
#: help names), so that --startup and --train, which time something else, can refuse them.
LAYER_OPTIONS = dict(max_tokens="--max-tokens", d_model="--d-model", heads="--heads", dtype="--dtype",
                     causal="--causal", blocked="--blocked", plot="--plot")


def bench(
    max_tokens: unless_given(MaxTokensOpt, 4096) = None,  # type: ignore[valid-type]
    repeats: RepeatsOpt = 3,
    d_model: unless_given(DModelOpt, 512) = None,  # type: ignore[valid-type]
    heads: unless_given(HeadsOpt, 8) = None,  # type: ignore[valid-type]
    dtype: unless_given(DtypeOpt, "float64") = None,  # type: ignore[valid-type]
    causal: unless_given(CausalOpt, "no-causal") = None,  # type: ignore[valid-type]
    blocked: unless_given(BlockedOpt) = None,  # type: ignore[valid-type]
    plot: unless_given(PlotOpt) = None,  # type: ignore[valid-type]
    out: OutDirOpt = OUT_DIR,
    json_out: NumbersJsonOpt = False,
    startup: StartupOpt = False,
    train: BenchTrainOpt = False,
    task: BenchTaskOpt = "neighbours",
    tiles: TilesOpt = False,
) -> None:
    """Time multi-head attention as the number of tokens N grows: the N² cost, live.

    For N = 16, 32, … --max-tokens it times the core beside its own matrix
    products alone, the plain per-head loop and, when PyTorch is installed,
    PyTorch's multi_head_attention_forward, and prints a table. The default
    (N up to 4096, float64) takes a few minutes on two cores; close other
    programs first. --startup times how quickly 'mha explain' starts and
    draws; --train times a training step; --tiles measures the memory of
    attention computed whole and in tiles. docs/performance.md in mhacli's
    source (beside its README; the installed package carries no docs)
    explains every column and gives the numbers measured on the project's
    machine.

    Example: [bold]mha bench --max-tokens 1024 --plot[/bold]
    """
    layer = {name: value for name, value in locals().items() if name in LAYER_OPTIONS and value is not None}
    if startup and train:
        raise UsageError("--startup and --train time different things; run them one at a time.")
    if tiles:
        return _bench_tiles(layer, startup or train, json_out, task)
    if startup or train:
        return _bench_other(startup, layer, repeats, json_out, task)
    if task != "neighbours":
        raise UsageError("{task:name} chooses the model that --train times; add --train.", task=task)
    _bench_layer(layer, repeats, out, json_out)


def _bench_other(startup: bool, layer: dict[str, object], repeats: int, json_out: bool, task: str) -> None:
    """--startup or --train, refusing the options that only the layer bench reads."""
    from mhacli.bench import runner

    mode = "--startup" if startup else "--train"
    if layer:  # the first one given, in the help's order
        flag = LAYER_OPTIONS[next(iter(layer))]
        raise UsageError(f"{flag} sets the layer timed against N; {mode} times "
                         f"{'whole commands' if startup else 'a training step'}, so it has no use there. "
                         f"Drop {flag} or {mode}.")
    runner.Settings(repeats=repeats).check()  # the --repeats range, in the same words
    if startup:
        _bench_startup(repeats, json_out)
    else:
        from mhacli.grammar.tasks import task_name

        _bench_train(repeats, json_out, task_name(task))


def _bench_layer(options: dict[str, Any], repeats: int, out: Path, json_out: bool) -> None:
    """The layer timed against N (its table, JSON or plot)."""
    from mhacli.bench import runner

    plot = options.pop("plot", False)
    settings = runner.Settings(repeats=repeats, **options)
    settings.check()
    plan = None
    if plot:
        from mhacli.cli.flow import plan_outputs
        from mhacli.io.files import prepare_out_dir

        plan = plan_outputs(plots=True, out=out, fmt="png", heads=1, names=["bench.png"])
        prepare_out_dir(out)
    with runner.progress_bar(runner.calls_per_size(settings) * len(runner.token_counts(settings.max_tokens))) as tick:
        result = runner.run_bench(settings, tick)
    _say(json_out, "bench", result.to_dict, lambda: runner.bench_table(result))
    if plan is not None:
        report_written([str(runner.save_plot(result, plan.figures[0]))], to_stderr=json_out)


def _bench_tiles(layer: dict[str, Any], other: bool, json_out: bool, task: str) -> None:
    """--tiles: the memory curve of attention whole and in tiles; of the other options only --max-tokens."""
    from mhacli.bench import runner
    from mhacli.bench import tiles as memory

    if other:
        raise UsageError("--tiles measures memory, --startup and --train time other things; run them one at a time.")
    if task != "neighbours":
        raise UsageError("{task:name} chooses the model that --train times; --tiles measures no model.", task=task)
    extra = [flag for name, flag in LAYER_OPTIONS.items() if name in layer and name != "max_tokens"]
    if extra:
        raise UsageError(f"{extra[0]} sets the layer timed against N; --tiles measures one head of width "
                         f"{memory.D_K} in float64, so it has no use there. Drop {extra[0]} or --tiles.")
    max_tokens = layer.get("max_tokens", memory.MAX_TOKENS)
    with runner.progress_bar(len(memory.token_counts(max_tokens))) as tick:
        rows = memory.memory_curve(max_tokens, tick=tick)
    _say(json_out, "bench-tiles", lambda: memory.tiles_document(rows), lambda: memory.tiles_table(rows))


def _bench_startup(repeats: int, json_out: bool) -> None:
    from mhacli.bench import runner
    from mhacli.bench import startup as timing

    with runner.progress_bar(timing.rounds_ticks(repeats)) as tick:
        measured = timing.measure_startup(repeats, tick)
    _say(json_out, "bench-startup", measured.to_dict, lambda: timing.startup_table(measured))


def _bench_train(repeats: int, json_out: bool, task: str) -> None:
    from mhacli.bench import runner
    from mhacli.bench import train as timing
    from mhacli.grammar.model import TrainConfig

    config = TrainConfig.for_task(task)  # the model 'mha train --task TASK' trains, with its defaults
    with runner.progress_bar(repeats + 1) as tick:
        report = timing.bench_train(repeats, config=config, tick=tick)
    _say(json_out, "bench-train", lambda: report, lambda: timing.train_table(report))


def _say(json_out: bool, kind: str, document: Callable[[], dict[str, Any]], table: Callable[[], object]) -> None:
    """The measurement as its ``--json`` document, or as a table."""
    if json_out:
        write_stdout(json_document(kind, document(), indent=2) + "\n")
    else:
        print_all(table())

"""``mha bench``: the timing harness of mhacli.bench, behind one command."""

from __future__ import annotations

import typer

from mhacli.cli.options import (OUT_DIR, BenchTaskOpt, BenchTrainOpt, BlockedOpt, CausalOpt, DModelOpt, DtypeOpt,
                                HeadsOpt, NumbersJsonOpt, PlotOpt, RepeatsOpt, StartupOpt)
from mhacli.cli.options import BenchMaxTokensOpt as MaxTokensOpt
from mhacli.cli.options import OutOpt as OutDirOpt
from mhacli.cli.output import json_document, print_all, report_written, write_stdout
from mhacli.core.errors import UsageError

# What only the layer bench (time against N) reads: --startup and --train time something else.
_LAYER_OPTIONS = (("max_tokens", "--max-tokens"), ("d_model", "--d-model"), ("heads", "--heads"),
                  ("dtype", "--dtype"), ("causal", "--causal"), ("blocked", "--blocked"), ("plot", "--plot"))


def _refuse_layer_options(ctx: typer.Context, mode: str, what: str) -> None:
    for name, flag in _LAYER_OPTIONS:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name != "DEFAULT":
            raise UsageError(f"{flag} sets the layer timed against N; {mode} times {what}, so it has no "
                             f"use there. Drop {flag} or {mode}.")


def bench(
    ctx: typer.Context,
    max_tokens: MaxTokensOpt = 4096,
    repeats: RepeatsOpt = 3,
    d_model: DModelOpt = 512,
    heads: HeadsOpt = 8,
    dtype: DtypeOpt = "float64",
    causal: CausalOpt = False,
    blocked: BlockedOpt = False,
    plot: PlotOpt = False,
    out: OutDirOpt = OUT_DIR,
    json_out: NumbersJsonOpt = False,
    startup: StartupOpt = False,
    train: BenchTrainOpt = False,
    task: BenchTaskOpt = "neighbours",
) -> None:
    """Time multi-head attention as the number of tokens N grows: the N² cost, live.

    For N = 16, 32, … --max-tokens it times the core beside its own matrix
    products alone, the plain per-head loop and, when PyTorch is installed,
    PyTorch's multi_head_attention_forward, and prints a table. The default
    (N up to 4096, float64) takes a few minutes on two cores; close other
    programs first. --startup times how quickly 'mha explain' starts and
    draws; --train times a training step. docs/performance.md in mhacli's
    source (beside its README; the installed package carries no docs)
    explains every column and gives the numbers measured on the project's
    machine.

    Example: [bold]mha bench --max-tokens 1024 --plot[/bold]
    """
    from mhacli.bench import runner

    if startup and train:
        raise UsageError("--startup and --train time different things; run them one at a time.")
    if startup or train:
        mode = "--startup" if startup else "--train"
        _refuse_layer_options(ctx, mode, "whole commands" if startup else "a training step")
        runner.Settings(repeats=repeats).check()  # the --repeats range, in the same words
        if startup:
            _bench_startup(repeats, json_out)
        else:
            from mhacli.core.checks import task_name

            _bench_train(repeats, json_out, task_name(task))
        return
    if task != "neighbours":
        raise UsageError("{task:name} chooses the model that --train times; add --train.", task=task)
    settings = runner.Settings(max_tokens=max_tokens, repeats=repeats, d_model=d_model, heads=heads,
                               dtype=dtype, causal=causal, blocked=blocked)
    settings.check()
    plan = None
    if plot:
        from mhacli.cli.common import plan_outputs
        from mhacli.io.files import prepare_out_dir

        plan, _, _ = plan_outputs(plots=True, out=out, fmt="png", dpi=150, heads=1, names=["bench.png"])
        prepare_out_dir(out)
    with runner.progress_bar(runner.calls_per_size(settings) * len(runner.token_counts(max_tokens))) as tick:
        result = runner.run_bench(settings, tick)
    if json_out:
        write_stdout(json_document("bench", result.to_dict(), indent=2) + "\n")
    else:
        print_all(runner.bench_table(result))
    if plan is not None:
        report_written([str(runner.save_plot(result, plan.figures[0]))], to_stderr=json_out)


def _bench_startup(repeats: int, json_out: bool) -> None:
    from mhacli.bench import runner
    from mhacli.bench import startup as timing

    with runner.progress_bar(timing.rounds_ticks(repeats)) as tick:
        measured = timing.measure_startup(repeats, tick)
    if json_out:
        write_stdout(json_document("bench-startup", measured.to_dict(), indent=2) + "\n")
    else:
        print_all(timing.startup_table(measured))


def _bench_train(repeats: int, json_out: bool, task: str) -> None:
    from mhacli.bench import runner
    from mhacli.bench import train as timing
    from mhacli.core.train import TrainConfig

    config = TrainConfig.for_task(task)  # the model 'mha train --task TASK' trains, with its defaults
    with runner.progress_bar(repeats + 1) as tick:
        report = timing.bench_train(repeats, config=config, tick=tick)
    if json_out:
        write_stdout(json_document("bench-train", report, indent=2) + "\n")
    else:
        print_all(timing.train_table(report))

"""``mha bench``: the timing harness of mhacli.bench, behind one command."""

from __future__ import annotations

from pathlib import Path

from mhacli.cli.options import (OUT_DIR, BlockedOpt, CausalOpt, DModelOpt, DtypeOpt, HeadsOpt, NumbersJsonOpt,
                                PlotOpt, RepeatsOpt, StartupOpt)
from mhacli.cli.options import BenchMaxTokensOpt as MaxTokensOpt
from mhacli.cli.options import OutOpt as OutDirOpt
from mhacli.cli.output import print_all, report_written, write_stdout
from mhacli.core.errors import UsageError


def bench(
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
) -> None:
    """Time multi-head attention as the number of tokens N grows: the N² cost, live.

    For N = 16, 32, … --max-tokens it times the core beside its own matrix
    products alone, the plain per-head loop and, when PyTorch is installed,
    PyTorch's multi_head_attention_forward, and prints a table. The default
    (N up to 4096, float64) takes a few minutes on two cores; close other
    programs first. docs/performance.md explains every column.

    Example: [bold]mha bench --max-tokens 1024 --plot[/bold]
    """
    from mhacli.bench import runner

    settings = runner.Settings(max_tokens=max_tokens, repeats=repeats, d_model=d_model, heads=heads,
                               dtype=dtype, causal=causal, blocked=blocked)
    settings.check()
    if startup:
        if plot:
            raise UsageError("--plot draws the bench over N; it has nothing to draw with --startup. Drop one.")
        with runner.progress_bar((repeats + 1) * len(runner.startup_commands(Path(".")))) as tick:
            rows = runner.measure_startup(repeats, tick)
        if json_out:
            write_stdout(runner.startup_json(rows, runner.machine_info()) + "\n")
        else:
            print_all(runner.startup_table(rows, repeats))
        return
    plan = None
    if plot:
        from mhacli.cli.common import plan_outputs
        from mhacli.io.files import prepare_out_dir

        plan, _, _ = plan_outputs(plots=True, out=out, fmt="png", dpi=150, heads=1, names=["bench.png"])
        prepare_out_dir(out)
    with runner.progress_bar(runner.calls_per_size(settings) * len(runner.token_counts(max_tokens))) as tick:
        result = runner.run_bench(settings, tick)
    if json_out:
        write_stdout(runner.bench_json(result) + "\n")
    else:
        print_all(runner.bench_table(result))
    if plan is not None:
        report_written([str(runner.save_plot(result, plan.figures[0]))], to_stderr=json_out)

"""The ``mha`` command line: read input, build the config, call the core, hand the trace to renderers.

Nothing here computes attention or draws; heavy modules (numpy, matplotlib)
are imported inside the commands that need them so ``mha --help`` is quick.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

try:  # Typer 0.2x vendors its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older Typer on top of click
    from click import exceptions as click_exceptions

from mhacli import __version__
from mhacli.core.config import DTYPES, TOKENIZERS, WEIGHT_KINDS, Config
from mhacli.core.errors import ExitCode, MhaError, UsageError
from mhacli.io.files import check_distinct, check_target
from mhacli.io.inputs import count_tokens, resolve_text

console = Console()
err_console = Console(stderr=True)
_debug = False


def _error_line(message: str, hint: str | None = None) -> None:
    """Print one line on stderr: ``mha: error: …`` (plain text, never markup, never an escape code)."""
    from mhacli.core.messages import one_line

    line = Text("mha: error: ", style="bold red")
    line.append(one_line(message))
    if hint:
        line.append(f" {one_line(hint)}", style="dim")
    err_console.print(line, soft_wrap=True, highlight=False, markup=False)


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so Python's exit-time flush stays quiet."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (e.g. under CliRunner)
        pass


def _os_error_line(exc: OSError) -> str:
    """An OSError that escaped the writers (disk full, a vanished folder) as one plain line."""
    import errno

    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    if exc.errno == errno.ENOSPC:
        return f"the disk is full{where}; free some space and run the command again."
    return f"{exc.strerror or exc}{where}; check the path and permissions and run the command again."


def _tolerant_streams() -> None:
    """On a terminal that cannot show some character (PYTHONIOENCODING=ascii, an old console),
    print it as an escape (\\u00e9) instead of failing with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf16", "utf32"):
            try:
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):  # not a TextIOWrapper (e.g. CliRunner)
                pass


# How options read in --help. Typer names each value's type ("<int range> [x>=1]",
# "<bool>"), which leaves the help text a 20-column strip at 80 columns; short
# metavars and a few panels keep every command's help readable on a projector.
HELP_PANELS = {
    "Input": ("--file", "--sample", "--tokenizer"),
    "Model": ("--heads", "--d-model", "--seed", "--positions", "--causal", "--weights", "--dtype"),
    "Output": ("--show-values", "--save-npz", "--json", "--html", "--max-tokens"),
    "Figures": ("--out", "--plots", "--format", "--dpi", "--query"),
}
_PANEL_OF = {opt: panel for panel, opts in HELP_PANELS.items() for opt in opts}
_METAVAR_OF_TYPE = {"int": "N", "Path": "PATH", "str": "TEXT", "float": "X"}


def _tidy_help(command: Any, ctx: Any) -> None:
    """Give every option of ``command`` a short metavar and its panel (see HELP_PANELS)."""
    help_option = command.get_help_option(ctx)
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "param_type_name", "") != "option":
            continue
        if getattr(param, "is_flag", False):
            param.metavar = param.metavar or ""
        elif param.metavar is None:
            bare = param.bare_type() if hasattr(param, "bare_type") else ""
            param.metavar = next((m for t, m in _METAVAR_OF_TYPE.items() if t in bare), "VALUE")
        long_name = next((o for o in param.opts if o.startswith("--")), "")
        if getattr(param, "rich_help_panel", None) is None and long_name in _PANEL_OF:
            param.rich_help_panel = _PANEL_OF[long_name]


class MhaGroup(TyperGroup):
    """Turns every failure into one line on stderr and a named exit code.

    Exit codes: 0 ok, 1 a failure at run time, 2 a usage error (fix the
    command), 130 interrupted.  ``mha --debug …`` adds the traceback.
    """

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _tidy_help(command, ctx)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _tidy_help(self, ctx)
        super().format_help(ctx, formatter)

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        _tolerant_streams()
        swallowed: list[bool] = []
        previous_hook = sys.unraisablehook

        def quiet_interrupts(unraisable: Any) -> None:
            # Ctrl-C landing inside a weakref callback or __del__ cannot propagate: Python
            # would print "Exception ignored in …" with a traceback. Note it instead.
            if issubclass(unraisable.exc_type, KeyboardInterrupt):
                swallowed.append(True)
                return
            previous_hook(unraisable)

        sys.unraisablehook = quiet_interrupts
        try:
            rv = super().main(args=args, prog_name=prog_name or "mha", complete_var=complete_var,
                              standalone_mode=False, **extra)
            sys.stdout.flush()  # a closed pipe shows up here rather than at exit
        except click_exceptions.NoArgsIsHelpError:
            # Typer has already printed the help while building this error; as click
            # does, a bare command is a usage error (exit 2) after showing it.
            code = ExitCode.USAGE
        except click_exceptions.ClickException as exc:
            from mhacli.core.messages import click_message

            ctx = getattr(exc, "ctx", None)
            argv = list(sys.argv[1:] if args is None else args)
            _error_line(click_message(exc, ctx.command_path if ctx is not None else None, self, argv))
            code = ExitCode.USAGE if isinstance(exc, click_exceptions.UsageError) else ExitCode.FAILURE
        except MhaError as exc:
            if _debug:
                traceback.print_exc()
            _error_line(exc.for_cli())
            code = exc.exit_code
        except (typer.Abort, KeyboardInterrupt):
            _error_line("interrupted; nothing half-written was left behind.")
            code = ExitCode.INTERRUPTED
        except BrokenPipeError:
            # stdout closed early (e.g. piped into `head`): not an error worth a message.
            _silence_stdout()
            code = ExitCode.OK
        except MemoryError:
            if _debug:
                traceback.print_exc()
            _error_line("ran out of memory; use a shorter text, a smaller --max-tokens (figures grow with it), "
                        "fewer --heads or a smaller --d-model.")
            code = ExitCode.FAILURE
        except OSError as exc:
            if _debug:
                traceback.print_exc()
            _error_line(_os_error_line(exc))
            code = ExitCode.FAILURE
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if _debug:
                traceback.print_exc()
            if swallowed:
                # A Ctrl-C swallowed half-way through a library left it confused: that is the
                # interruption showing, not a bug.
                _error_line("interrupted; nothing half-written was left behind.")
                code = ExitCode.INTERRUPTED
            else:
                _error_line(f"unexpected {type(exc).__name__}: {exc}",
                            "(this is a bug; rerun with --debug and report the traceback)")
                code = ExitCode.FAILURE
        else:
            # Typer turns Ctrl-C into Exit(130) and returns exit codes in non-standalone mode.
            code = rv if isinstance(rv, int) else ExitCode.OK
            if code == ExitCode.OK and swallowed:
                code = ExitCode.INTERRUPTED  # the run finished, but Ctrl-C was pressed: say it was seen
            if code == ExitCode.INTERRUPTED:
                _error_line("interrupted; nothing half-written was left behind.")
        finally:
            sys.unraisablehook = previous_hook
        if standalone_mode:
            sys.exit(int(code))
        return int(code)


app = typer.Typer(
    cls=MhaGroup,
    name="mha",
    help="Make multi-head attention visible: every step, every shape, every head.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["--help"]},
)


def _version(value: bool) -> None:
    if value:
        console.print(f"mha (mhacli) {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show a traceback when something fails.")] = False,
) -> None:
    """Make multi-head attention visible: every step, every shape, every head.

    Run [bold]mha explain "the cat sat on the mat"[/bold] to start.
    """
    global _debug
    _debug = debug


# ---------------------------------------------------------------------------
# Options, declared once and shared by every command
# ---------------------------------------------------------------------------

TextArg = Annotated[Optional[str], typer.Argument(
    help="The text to explain, in quotes; '-' reads standard input.", show_default=False)]
FileOpt = Annotated[Optional[Path], typer.Option(
    "--file", "-f", help="Read the text from a UTF-8 file.", show_default=False, dir_okay=True,
    readable=False)]  # readable=False: mhacli.io.inputs says what is wrong, and how to fix it
SampleOpt = Annotated[Optional[str], typer.Option(
    "--sample", help="Use one of the ready-made texts (see 'mha samples').", show_default=False)]
WeightsOpt = Annotated[str, typer.Option(
    "--weights", "-w",
    help=f"Weights: {', '.join(WEIGHT_KINDS)} (designed = heads built by hand to follow named rules).")]
HeadsOpt = Annotated[int, typer.Option("--heads", "-H", help="Number of heads h.")]
DModelOpt = Annotated[int, typer.Option("--d-model", "-d", help="Model width d (divisible by --heads).")]
SeedOpt = Annotated[int, typer.Option("--seed", "-s", help="Seed for the embedding and the weights.")]
TokenizerOpt = Annotated[str, typer.Option(
    "--tokenizer", "-t", help=f"How to split the text: {', '.join(TOKENIZERS)}.")]
PositionsOpt = Annotated[bool, typer.Option(
    "--positions/--no-positions", help="Add sinusoidal positional encoding to the embedding.")]
CausalOpt = Annotated[bool, typer.Option(
    "--causal/--no-causal", help="Let each token attend only to itself and earlier tokens.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help=f"Float type of the core: {', '.join(DTYPES)}.")]
ShowValuesOpt = Annotated[bool, typer.Option(
    "--show-values", help="Print the actual matrices (rounded) for short inputs.")]
SaveNpzOpt = Annotated[Optional[Path], typer.Option(
    "--save-npz", help="Save every array of the run to this .npz file.", show_default=False,
    dir_okay=True, readable=False)]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document (config, steps, arrays) on stdout and nothing else there; "
    "the figures are still saved unless --no-plots, and the files written are listed on stderr.")]
HtmlOpt = Annotated[Optional[Path], typer.Option(
    "--html", help="Also write one self-contained interactive page (opens offline in any browser; "
    "up to 200 tokens, or --max-tokens when given).", show_default=False, dir_okay=True, readable=False)]
MaxTokensOpt = Annotated[int, typer.Option(
    "--max-tokens", min=1, help="Show at most this many tokens in tables and figures (long texts are windowed).")]
TraceArg = Annotated[Path, typer.Argument(help="An .npz file written by 'mha explain --save-npz'.",
                                          show_default=False, dir_okay=True, readable=False)]
SampleNameArg = Annotated[Optional[str], typer.Argument(
    help="Show this sample's text and tokens instead of the list.", show_default=False)]
TokensOpt = Annotated[int, typer.Option("--tokens", "-n", help="Number of tokens N (no text needed).")]
MarkdownOpt = Annotated[bool, typer.Option(
    "--markdown", help="Print the tables as Markdown, to paste into slides or notes.")]
PauseOpt = Annotated[bool, typer.Option(
    "--pause/--no-pause", help="Wait for Enter between steps (only when standard input is a terminal).")]
StepOpt = Annotated[int, typer.Option("--step", help="Start the lesson at this step (1 = the beginning).")]
DemoOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", help="Also save the figures (a heat map per head, all heads, the magnifiers) into this "
    "folder, drawn while the lesson runs; nothing is written without it.", show_default=False,
    dir_okay=True, file_okay=True, readable=False)]
LessonQueryOpt = Annotated[Optional[str], typer.Option(
    "--query", "-q", help="The token the lesson zooms in on: a 0-based position or the token's text "
    "(default: the second copy of the first repeated word, else the last word).", show_default=False)]
OutOpt = Annotated[Path, typer.Option(
    "--out", "-o", help="Folder for the figures (created if missing); only the tool's own file names "
    "are written there.", dir_okay=True, file_okay=True, readable=False)]
PlotsOpt = Annotated[bool, typer.Option(
    "--plots/--no-plots", help="Save the figures (heatmap per head, all heads, magnifiers) into --out.")]
FormatOpt = Annotated[str, typer.Option("--format", help="Figure format: png, svg or pdf.")]
DpiOpt = Annotated[int, typer.Option("--dpi", help="Resolution of png figures, in dots per inch (30 to 600).")]
QueryOpt = Annotated[Optional[str], typer.Option(
    "--query", "-q", help="Shade the magnifier picture by what this token looks at: a 0-based position "
    "or the token's text (default: averaged over all queries).", show_default=False)]
QuestionsOpt = Annotated[int, typer.Option("--questions", help="How many questions to ask (1 to 20).")]
AnswersOpt = Annotated[bool, typer.Option("--answers", help="Print the answers under the questions.")]
BenchMaxTokensOpt = Annotated[int, typer.Option(
    "--max-tokens", help="Largest N to time: 16, 32, … up to this (4096 is the size of the performance goals).",
    rich_help_panel="Bench")]
RepeatsOpt = Annotated[int, typer.Option(
    "--repeats", "-r", help="Timed runs of each contender per N, after one warm-up; the median is shown.",
    rich_help_panel="Bench")]
BlockedOpt = Annotated[bool, typer.Option(
    "--blocked", help="Time the outputs alone, the weights made a block of rows at a time: memory grows "
    "with N instead of N², so --max-tokens can go far higher.", rich_help_panel="Bench")]
PlotOpt = Annotated[bool, typer.Option(
    "--plot", help="Also save bench.png into --out: time against N on log-log axes, the N² part marked.",
    rich_help_panel="Figures")]
BenchJsonOpt = Annotated[bool, typer.Option("--json", help="Print the numbers as one JSON document and nothing else.")]
StartupOpt = Annotated[bool, typer.Option(
    "--startup", help="Time instead how long 'mha --help' and 'mha explain' (with and without figures) "
    "take to start, beside importing numpy, matplotlib, rich and typer.", rich_help_panel="Bench")]


def _print(*renderables: Any) -> None:
    for r in renderables:
        console.print(r)


@app.command()
def explain(
    ctx: typer.Context,
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    heads: HeadsOpt = 4,
    d_model: DModelOpt = 16,
    seed: SeedOpt = 0,
    tokenizer: TokenizerOpt = "word",
    positions: PositionsOpt = True,
    causal: CausalOpt = False,
    weights: WeightsOpt = "random",
    dtype: DtypeOpt = "float64",
    show_values: ShowValuesOpt = False,
    save_npz: SaveNpzOpt = None,
    json_out: JsonOpt = False,
    max_tokens: MaxTokensOpt = 40,
    html: HtmlOpt = None,
    out: OutOpt = Path("mha-output"),
    plots: PlotsOpt = True,
    fmt: FormatOpt = "png",
    dpi: DpiOpt = 150,
    query: QueryOpt = None,
) -> None:
    """Walk through multi-head attention on TEXT, step by step.

    Tokenizes the text, embeds it, runs real multi-head attention and prints
    every step with its formula, shape and cost, then where each head looks.

    Example: [bold]mha explain "The animal didn't cross the street because it was too tired" --heads 4[/bold]
    """
    body = resolve_text(text, file, sample)
    config = Config(heads=heads, d_model=d_model, seed=seed, tokenizer=tokenizer,
                    positions=positions, causal=causal, weights=weights, dtype=dtype)
    if save_npz is not None:
        check_target(save_npz, "--save-npz")
    if html is not None:
        check_target(html, "--html")
    check_distinct(("--file", file), ("--save-npz", save_npz), ("--html", html))
    fmt, dpi = _check_figure_options(plots, out, fmt, dpi)
    count_tokens(body, config, json=json_out)  # refuse what would not fit before any array exists

    from mhacli.core.trace import run

    trace = run(body, **vars_of(config))
    position = _query_position(trace, query)
    written: list[str] = []
    # The figures start drawing now (on a second core where there is one) while the walkthrough prints.
    with _start_figures(trace, out, fmt, dpi, position, max_tokens, plots) as figures_job:
        if json_out:
            from mhacli.io.export import trace_json

            sys.stdout.write(trace_json(trace) + "\n")
        else:
            from mhacli.render.terminal import walkthrough

            _print(*walkthrough(trace, max_tokens=max_tokens, show_values=show_values, width=console.width))
            _print_grids(trace, max_tokens, position, out if plots else None)
        written += _finish_figures(figures_job)
    if save_npz is not None:
        from mhacli.io.export import save_npz as write_npz

        written.append(str(write_npz(trace, save_npz)))
    if html is not None:
        from mhacli.render.html import write_html

        written.append(str(write_html(trace, html, max_tokens=_html_max_tokens(ctx, max_tokens))))
    _report_written(written, to_stderr=json_out)


def _html_max_tokens(ctx: typer.Context | None, max_tokens: int) -> int:
    """The page's window: 200 tokens (it stays quick up to there) unless --max-tokens was given."""
    from mhacli.render.html import DEFAULT_MAX_TOKENS

    given = ctx is not None and ctx.get_parameter_source("max_tokens").name != "DEFAULT"
    return max_tokens if given else DEFAULT_MAX_TOKENS


def vars_of(config: Config) -> dict[str, Any]:
    """Config fields as keyword arguments for :func:`mhacli.core.trace.run`."""
    from dataclasses import asdict

    return asdict(config)


def _report_written(paths: list[str], to_stderr: bool = False) -> None:
    if not paths:
        return
    from mhacli.render.terminal import files_written
    from mhacli.core.tokenize import printable

    # A file name may hold anything, escape sequences included: spell those out.
    # soft_wrap: a long path stays on one line, so it can be copied whole.
    (err_console if to_stderr else console).print(files_written([printable(p) for p in paths]),
                                                  highlight=False, soft_wrap=True)


def _check_figure_options(plots: bool, out: Path, fmt: str, dpi: int) -> tuple[str, int]:
    """Refuse a bad --format, --dpi or --out before any work; create --out when figures are on."""
    from mhacli.render.figures import check_dpi, check_format
    from mhacli.io.files import prepare_out_dir

    fmt, dpi = check_format(fmt), check_dpi(dpi)
    if plots:
        prepare_out_dir(out)
    return fmt, dpi


def _query_position(trace: Any, query: str | None) -> int | None:
    from mhacli.render.figures import resolve_query

    return resolve_query(trace.tokens, query)


def _single_head(trace: Any) -> Any:
    """The same X and weight matrices run as ONE head of size d: the magnifier's contrast."""
    from mhacli.core.compare import single_head

    return single_head(trace)


def _print_grids(trace: Any, max_tokens: int, query: int | None, figures_at: Path | None) -> None:
    from mhacli.render.grid import head_grids

    console.print()
    console.print(head_grids(trace, width=console.width, max_tokens=max_tokens, query=query,
                             figures_at=str(figures_at) if figures_at is not None else None))
    console.print()


def _notes(notices: list[str]) -> None:
    """Things worth knowing that are not errors (a missing glyph, leftover files): once each, on stderr."""
    for notice in notices:
        line = Text("mha: note: ", style="bold yellow")
        line.append(notice)
        err_console.print(line, soft_wrap=True, highlight=False)


def _start_figures(trace: Any, out: Path, fmt: str, dpi: int, query: int | None, max_tokens: int,
                   plots: bool) -> Any:
    """The figure job (a context manager), or a stand-in that draws nothing with --no-plots."""
    if not plots:
        from contextlib import nullcontext

        return nullcontext()
    from mhacli.render.figures import start_figures

    return start_figures(trace, _single_head(trace), out, fmt=fmt, dpi=dpi, query=query,
                         max_tokens=max_tokens)


def _finish_figures(job: Any) -> list[str]:
    if job is None:
        return []
    saved = job.finish()
    _notes(saved.notices)
    return [str(p) for p in saved]


@app.command()
def show(
    ctx: typer.Context,
    trace_file: TraceArg,
    max_tokens: MaxTokensOpt = 40,
    show_values: ShowValuesOpt = False,
    html: HtmlOpt = None,
    out: OutOpt = Path("mha-output"),
    plots: PlotsOpt = True,
    fmt: FormatOpt = "png",
    dpi: DpiOpt = 150,
    query: QueryOpt = None,
) -> None:
    """Re-render the walkthrough and the figures from a saved .npz, without recomputing attention.

    Example: [bold]mha explain "the cat sat on the mat" --save-npz cat.npz && mha show cat.npz --html cat.html[/bold]
    """
    if html is not None:
        check_target(html, "--html")
    check_distinct(("the input .npz", trace_file), ("--html", html))  # never write over the input
    fmt, dpi = _check_figure_options(plots, out, fmt, dpi)
    from mhacli.io.export import load_trace
    from mhacli.render.terminal import walkthrough

    trace = load_trace(trace_file)
    position = _query_position(trace, query)
    written: list[str] = []
    with _start_figures(trace, out, fmt, dpi, position, max_tokens, plots) as figures_job:
        _print(*walkthrough(trace, max_tokens=max_tokens, show_values=show_values, width=console.width))
        _print_grids(trace, max_tokens, position, out if plots else None)
        written += _finish_figures(figures_job)
    if html is not None:
        from mhacli.render.html import write_html

        written.append(str(write_html(trace, html, max_tokens=_html_max_tokens(ctx, max_tokens))))
    _report_written(written)


@app.command()
def compare(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    heads: HeadsOpt = 4,
    d_model: DModelOpt = 16,
    seed: SeedOpt = 0,
    tokenizer: TokenizerOpt = "word",
    positions: PositionsOpt = True,
    causal: CausalOpt = False,
    weights: WeightsOpt = "random",
    max_tokens: MaxTokensOpt = 40,
    out: OutOpt = Path("mha-output"),
    plots: PlotsOpt = True,
    fmt: FormatOpt = "png",
    dpi: DpiOpt = 150,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the measured numbers as one JSON document and nothing else.")] = False,
) -> None:
    """One magnifier against h: a single head of size d beside h heads of size d/h.

    Same text, embedding, seed and weight matrices; prints how spread each head's
    attention is (mean row entropy, in bits, against the uniform maximum) and how
    different the heads are from each other (mean pairwise Jensen–Shannon
    divergence; 0 for identical heads), and saves single-vs-multi.png.

    Example: [bold]mha compare "the cat sat on the mat" --heads 4[/bold]
    """
    body = resolve_text(text, file, sample)
    config = Config(heads=heads, d_model=d_model, seed=seed, tokenizer=tokenizer,
                    positions=positions, causal=causal, weights=weights)
    fmt, dpi = _check_figure_options(plots, out, fmt, dpi)
    count_tokens(body, config)  # compare's JSON is a few numbers, not the arrays: plan without it

    from mhacli.core.compare import compare as measure
    from mhacli.core.trace import run

    trace = run(body, **vars_of(config))
    single = _single_head(trace)
    comparison = measure(trace, single)
    written: list[str] = []
    if plots:
        from mhacli.render.figures import save_compare

        saved = save_compare(trace, single, out, fmt=fmt, dpi=dpi, max_tokens=max_tokens,
                             comparison=comparison)
        _notes(saved.notices)
        written += [str(p) for p in saved]
    if json_out:
        import json

        sys.stdout.write(json.dumps({**comparison.to_dict(), "files": written}, ensure_ascii=False) + "\n")
    else:
        from mhacli.render.grid import comparison_panel, head_grids

        _print(comparison_panel(comparison))
        console.print()
        _print(head_grids(single, width=console.width, max_tokens=max_tokens,
                          figures_at=str(out) if plots else None,
                          title=f"One head of size d = {trace.d_model}", single=True))
        console.print()
        _print(head_grids(trace, width=console.width, max_tokens=max_tokens,
                          figures_at=str(out) if plots else None,
                          title=f"{trace.num_heads} heads of size d/h = {trace.d_k}"))
        console.print()
    _report_written(written, to_stderr=json_out)


@app.command()
def verify(trace_file: TraceArg) -> None:
    """Recompute a saved .npz independently and print the largest difference of each array.

    Uses a plain per-head loop, and PyTorch's multi_head_attention_forward when
    PyTorch is installed. Exits with 1 if any difference exceeds the tolerance
    (1e-9 for float64).

    Example: [bold]mha verify cat.npz[/bold]
    """
    from mhacli.io.export import load_trace
    from mhacli.render.terminal import verify_table
    from mhacli.core.verify import verify as run_checks

    trace = load_trace(trace_file)
    checks = run_checks(trace)
    _print(verify_table(trace, checks))
    failed = [c for c in checks if not c.ok]
    if failed:
        from mhacli.core.errors import RunError

        # Count arrays, not checks: PyTorch, when installed, re-checks some arrays, and the
        # message should read the same with or without it.
        bad = sorted({c.array for c in failed})
        total = len({c.array for c in checks})
        raise RunError(f"{len(bad)} of {total} arrays differ by more than {failed[0].tolerance:g} "
                       f"({', '.join(bad)}): the arrays in this file are not what its weights compute; "
                       "it was changed after 'mha explain' wrote it.")


DEFAULT_SAMPLE = "cat"


def _check_size(body: str, config: Config) -> None:
    """Refuse an empty or oversized text before any array exists (and designed weights' limits)."""
    from mhacli.io.inputs import count_tokens

    n = count_tokens(body, config)
    if config.weights == "designed":
        from mhacli.core.designed import check_designable

        check_designable(n, config)


def _source_args(text: str | None, file: Path | None, sample: str | None) -> str:
    """How the text was given, as it would be typed again (for 'what next' hints)."""
    import shlex

    from mhacli.core.tokenize import printable

    # printable: the text or a file name may hold escape sequences; they are shown, not obeyed.
    if file is not None:
        return printable(f"--file {shlex.quote(str(file))}")
    if sample is not None:
        return printable(f"--sample {shlex.quote(sample)}")
    shown = text or ""
    if len(shown) > 60:  # a long text is recalled, not reprinted
        shown = shown[:59] + "…"
    return printable(shlex.quote(shown))


def _config_args(config: Config, skip: tuple[str, ...] = ()) -> str:
    """The options that differ from the defaults, as they would be typed again."""
    default = Config()
    out = []
    for name in ("heads", "d_model", "seed", "tokenizer", "weights"):
        if name not in skip and getattr(config, name) != getattr(default, name):
            out.append(f"--{name.replace('_', '-')} {getattr(config, name)}")
    if config.causal:
        out.append("--causal")
    if not config.positions:
        out.append("--no-positions")
    return " ".join(out)


@app.command()
def samples(name: SampleNameArg = None, tokenizer: TokenizerOpt = "word") -> None:
    """List the ready-made texts, each chosen to teach one thing (or show one of them).

    Example: [bold]mha samples[/bold]   then   [bold]mha explain --sample repeated --weights designed[/bold]
    """
    from mhacli.core.config import TOKENIZERS as known
    from mhacli.render.demo import sample_table_or_view

    if tokenizer not in known:
        raise UsageError(f"unknown tokenizer {tokenizer!r}; choose one of: {', '.join(known)}.")
    _print(sample_table_or_view(name, tokenizer))


@app.command()
def shapes(
    tokens: TokensOpt = 9,
    d_model: DModelOpt = 16,
    heads: HeadsOpt = 4,
    causal: CausalOpt = False,
    markdown: MarkdownOpt = False,
) -> None:
    """Print every step's shape, multiply-adds and the parameter count for N, d and h: no text needed.

    For preparing slides: symbolic shapes (N×d/h) next to the numbers.

    Example: [bold]mha shapes --tokens 9 --d-model 16 --heads 4[/bold]
    """
    from mhacli.render.demo import check_shapes, shapes_markdown, shapes_view

    check_shapes(tokens, d_model, heads)  # no arrays are made, so no memory limit: sizes of real models work

    if markdown:
        sys.stdout.write(shapes_markdown(tokens, d_model, heads, causal))
    else:
        _print(*shapes_view(tokens, d_model, heads, causal))


@app.command()
def demo(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    weights: WeightsOpt = "random",
    heads: HeadsOpt = 4,
    d_model: DModelOpt = 16,
    seed: SeedOpt = 0,
    tokenizer: TokenizerOpt = "word",
    positions: PositionsOpt = True,
    causal: CausalOpt = False,
    query: LessonQueryOpt = None,
    pause: PauseOpt = True,
    step: StepOpt = 1,
    out: DemoOutOpt = None,
) -> None:
    """A guided lesson: every step of multi-head attention, narrated, then shown on a real run.

    Waits for Enter between steps when run in a terminal (q quits); runs straight
    through with --no-pause or when standard input is not a terminal. Without a
    text it uses the sample 'cat'.

    Example: [bold]mha demo --sample repeated --weights designed[/bold]
    """
    if text is None and file is None and sample is None:
        sample = DEFAULT_SAMPLE
    body = resolve_text(text, file, sample)
    config = Config(heads=heads, d_model=d_model, seed=seed, tokenizer=tokenizer,
                    positions=positions, causal=causal, weights=weights)
    if out is not None:
        _check_figure_options(True, out, "png", 150)
    _check_size(body, config)

    from mhacli.core.trace import run
    from mhacli.render.demo import lesson, next_steps, present
    from mhacli.render.figures import resolve_query

    trace = run(body, **vars_of(config))
    intro = ""
    if sample is not None:
        from mhacli.io.samples import load_sample

        intro = f"The text is the sample '{sample}': {load_sample(sample).description}"
    position = resolve_query(trace.tokens, query)
    steps = lesson(trace, intro=intro, query=position, width=console.width,
                   figures_at=str(out) if out is not None else None)
    if not 1 <= step <= len(steps):
        raise UsageError(f"--step must be from 1 to {len(steps)}, got {step}.")
    source = _source_args(text, file, sample)
    # The figures draw in the background while the class reads the narration.
    with _start_figures(trace, out, "png", 150, position, 40, out is not None) as figures_job:
        present(console, steps, pause=pause and sys.stdin.isatty(), start=step,
                closing=next_steps(trace, source, _config_args(config, skip=("weights",))))
        written = _finish_figures(figures_job)
    _report_written(written)


@app.command()
def quiz(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    weights: WeightsOpt = "random",
    heads: HeadsOpt = 4,
    d_model: DModelOpt = 16,
    causal: CausalOpt = False,
    questions: QuestionsOpt = 5,
    answers: AnswersOpt = False,
) -> None:
    """Homework: questions about one real run (shapes, parameters, where a head looks).

    The seed picks the questions and the weights, so the same seed gives the same
    quiz; --answers prints the answers, read from the run itself. Without a text
    it uses the sample 'cat'.

    Example: [bold]mha quiz --sample repeated --seed 7[/bold], then the same with [bold]--answers[/bold]
    """
    from mhacli.core.quiz import MAX_QUESTIONS

    if isinstance(questions, bool) or not 1 <= questions <= MAX_QUESTIONS:
        raise UsageError(f"--questions must be from 1 to {MAX_QUESTIONS}, got {questions}.")
    if text is None and file is None and sample is None:
        sample = DEFAULT_SAMPLE
    body = resolve_text(text, file, sample)
    config = Config(heads=heads, d_model=d_model, seed=seed, causal=causal, weights=weights)
    _check_size(body, config)

    from mhacli.core.trace import run
    from mhacli.render.demo import quiz_view
    from mhacli.core.quiz import make_quiz

    trace = run(body, **vars_of(config))
    asked = make_quiz(trace, seed, questions)
    source = _source_args(text, file, sample)
    title = (f"{len(asked)} questions about {source}: N = {trace.n_tokens} tokens, d = {d_model}, "
             f"h = {heads}, {'causal' if causal else 'bidirectional'}, {weights} weights, seed {seed}")
    check = f"mha explain {source} {_config_args(config)}".rstrip()
    _print(*quiz_view(asked, answers, title, check))


@app.command()
def bench(
    max_tokens: BenchMaxTokensOpt = 4096,
    repeats: RepeatsOpt = 3,
    d_model: DModelOpt = 512,
    heads: HeadsOpt = 8,
    dtype: DtypeOpt = "float64",
    causal: CausalOpt = False,
    blocked: BlockedOpt = False,
    plot: PlotOpt = False,
    out: OutOpt = Path("mha-output"),
    json_out: BenchJsonOpt = False,
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
    from mhacli.bench.runner import Settings

    settings = Settings(max_tokens=max_tokens, repeats=repeats, d_model=d_model, heads=heads,
                        dtype=dtype, causal=causal, blocked=blocked)
    settings.check()
    if startup:
        if plot:
            raise UsageError("--plot draws the bench over N; it has nothing to draw with --startup. Drop one.")
        _bench_startup(repeats, json_out)
        return
    if plot:
        from mhacli.io.files import prepare_out_dir

        prepare_out_dir(out)
    from mhacli.bench.runner import (bench_json, bench_table, calls_per_size, progress_bar, run_bench, save_plot,
                                     token_counts)

    total = calls_per_size(settings) * len(token_counts(max_tokens))
    with progress_bar(total) as tick:
        result = run_bench(settings, tick)
    if json_out:
        sys.stdout.write(bench_json(result) + "\n")
    else:
        _print(bench_table(result))
    if plot:
        _report_written([str(save_plot(result, out / "bench.png"))], to_stderr=json_out)


def _bench_startup(repeats: int, json_out: bool) -> None:
    from mhacli.bench.runner import (machine_info, measure_startup, progress_bar, startup_commands, startup_json,
                                     startup_table)

    with progress_bar((repeats + 1) * len(startup_commands(Path(".")))) as tick:
        rows = measure_startup(repeats, tick)
    if json_out:
        sys.stdout.write(startup_json(rows, machine_info()) + "\n")
    else:
        _print(startup_table(rows, repeats))


app.command(name="train")(__import__("mhacli.cli.train", fromlist=["train"]).train)

def main() -> None:
    """Entry point of the ``mha`` console script."""
    try:
        app(prog_name="mha")
    finally:
        # Everything is written and reported by now: a Ctrl-C that lands while Python
        # shuts down (joining worker threads) has nothing left to interrupt, and would
        # only kill the process without its message.
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)


__all__ = ["app", "main", "UsageError"]

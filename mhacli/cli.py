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
from mhacli.config import DTYPES, TOKENIZERS, WEIGHT_KINDS, Config
from mhacli.errors import ExitCode, MhaError, UsageError
from mhacli.files import check_target
from mhacli.inputs import resolve_text

console = Console()
err_console = Console(stderr=True)
_debug = False


def _error_line(message: str, hint: str | None = None) -> None:
    """Print one line on stderr: ``mha: error: …`` (plain text, never markup, never an escape code)."""
    from mhacli.messages import one_line

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


class MhaGroup(TyperGroup):
    """Turns every failure into one line on stderr and a named exit code.

    Exit codes: 0 ok, 1 a failure at run time, 2 a usage error (fix the
    command), 130 interrupted.  ``mha --debug …`` adds the traceback.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name or "mha", complete_var=complete_var,
                              standalone_mode=False, **extra)
            sys.stdout.flush()  # a closed pipe shows up here rather than at exit
        except click_exceptions.NoArgsIsHelpError:
            # Typer has already printed the help while building this error; as click
            # does, a bare command is a usage error (exit 2) after showing it.
            code = ExitCode.USAGE
        except click_exceptions.ClickException as exc:
            from mhacli.messages import click_message

            ctx = getattr(exc, "ctx", None)
            argv = list(sys.argv[1:] if args is None else args)
            _error_line(click_message(exc, ctx.command_path if ctx is not None else None, self, argv))
            code = ExitCode.USAGE if isinstance(exc, click_exceptions.UsageError) else ExitCode.FAILURE
        except MhaError as exc:
            if _debug:
                traceback.print_exc()
            _error_line(str(exc))
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
            _error_line("ran out of memory; use a shorter text, fewer --heads or a smaller --d-model.")
            code = ExitCode.FAILURE
        except OSError as exc:
            if _debug:
                traceback.print_exc()
            _error_line(_os_error_line(exc))
            code = ExitCode.FAILURE
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if _debug:
                traceback.print_exc()
            _error_line(f"unexpected {type(exc).__name__}: {exc}",
                        "(this is a bug; rerun with --debug and report the traceback)")
            code = ExitCode.FAILURE
        else:
            # Typer turns Ctrl-C into Exit(130) and returns exit codes in non-standalone mode.
            code = rv if isinstance(rv, int) else ExitCode.OK
            if code == ExitCode.INTERRUPTED:
                _error_line("interrupted; nothing half-written was left behind.")
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
    "--file", "-f", help="Read the text from a UTF-8 file.", show_default=False, dir_okay=True)]
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
    dir_okay=True)]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document (config, steps, arrays) and nothing else.")]
MaxTokensOpt = Annotated[int, typer.Option(
    "--max-tokens", min=1, help="Show at most this many tokens in tables and figures (long texts are windowed).")]
TraceArg = Annotated[Path, typer.Argument(help="An .npz file written by 'mha explain --save-npz'.",
                                          show_default=False, dir_okay=True)]


def _print(*renderables: Any) -> None:
    for r in renderables:
        console.print(r)


@app.command()
def explain(
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

    from mhacli.core import run

    trace = run(body, **vars_of(config))
    written: list[str] = []
    if json_out:
        from mhacli.export import trace_json

        sys.stdout.write(trace_json(trace) + "\n")
    else:
        from mhacli.render_terminal import walkthrough

        _print(*walkthrough(trace, max_tokens=max_tokens, show_values=show_values, width=console.width))
    if save_npz is not None:
        from mhacli.export import save_npz as write_npz

        written.append(str(write_npz(trace, save_npz)))
    _report_written(written, to_stderr=json_out)


def vars_of(config: Config) -> dict[str, Any]:
    """Config fields as keyword arguments for :func:`mhacli.core.run`."""
    from dataclasses import asdict

    return asdict(config)


def _report_written(paths: list[str], to_stderr: bool = False) -> None:
    if not paths:
        return
    from mhacli.render_terminal import files_written

    (err_console if to_stderr else console).print(files_written(paths), highlight=False)


@app.command()
def show(
    trace_file: TraceArg,
    max_tokens: MaxTokensOpt = 40,
    show_values: ShowValuesOpt = False,
) -> None:
    """Re-render the walkthrough from a saved .npz, without recomputing anything.

    Example: [bold]mha explain "the cat sat on the mat" --save-npz cat.npz && mha show cat.npz[/bold]
    """
    from mhacli.export import load_trace
    from mhacli.render_terminal import walkthrough

    trace = load_trace(trace_file)
    _print(*walkthrough(trace, max_tokens=max_tokens, show_values=show_values, width=console.width))


@app.command()
def verify(trace_file: TraceArg) -> None:
    """Recompute a saved .npz independently and print the largest difference of each array.

    Uses a plain per-head loop, and PyTorch's multi_head_attention_forward when
    PyTorch is installed. Exits with 1 if any difference exceeds the tolerance
    (1e-9 for float64).

    Example: [bold]mha verify cat.npz[/bold]
    """
    from mhacli.export import load_trace
    from mhacli.render_terminal import verify_table
    from mhacli.verify import verify as run_checks

    trace = load_trace(trace_file)
    checks = run_checks(trace)
    _print(verify_table(trace, checks))
    if not all(c.ok for c in checks):
        raise typer.Exit(int(ExitCode.FAILURE))


def main() -> None:
    """Entry point of the ``mha`` console script."""
    app(prog_name="mha")


__all__ = ["app", "main", "UsageError"]

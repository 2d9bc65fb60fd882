"""The ``mha`` command line: the Typer app, its root options, and the one place every error becomes an exit code.

A new command is a function in :mod:`mhacli.cli.commands`, added to ``COMMANDS``. Nothing heavy is imported
before a command needs it, so ``mha --help`` is quick.
"""

from __future__ import annotations

import re
import shutil
import signal
import sys
import traceback
from contextlib import contextmanager
from functools import cache
from typing import Annotated, Any, Callable, Iterator, Sequence

import typer
from typer.completion import completion_init, install_callback, show_callback
from typer.core import TyperCommand, TyperGroup

from mhacli.version import __version__
from mhacli.cli.commands.bench import bench
from mhacli.cli.commands.classroom import demo, quiz, samples, shapes
from mhacli.cli.commands.run import compare, explain, show, verify
from mhacli.cli.commands.tiles import tiles
from mhacli.cli.commands.train import train
from mhacli.cli.messages import click_message, is_click
from mhacli.cli.options import FLAG
from mhacli.cli.output import console, error_line, reset, silence_stdout, tolerant_streams
from mhacli.attention.errors import ExitCode, MhaError
from mhacli.io import cleanup

#: Every command, in the order ``mha --help`` lists them: register a new command here.
COMMANDS: tuple[Callable[..., None], ...] = (explain, show, compare, verify, train, samples, shapes, demo, quiz,
                                             tiles, bench)

INTERRUPTED = "interrupted; nothing half-written was left behind."
_debug = False  # mha --debug: print the traceback before the one line


def _os_error_line(exc: OSError) -> str:
    """An OSError that escaped the writers (disk full, a vanished folder) as one plain line."""
    import errno

    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    if exc.errno == errno.ENOSPC:
        return f"the disk is full{where}; free some space and run the command again."
    return f"{exc.strerror or exc}{where}; check the path and permissions and run the command again."


def report_error(exc: BaseException, group: Any, argv: list[str], interrupted: bool) -> ExitCode:
    """Say what went wrong as one ``mha: error: …`` line on stderr (after the traceback with ``--debug``), and
    name the exit code: 0 ok, 1 a failure at run time, 2 a usage error, 130 interrupted."""
    if is_click(exc, "NoArgsIsHelpError"):
        return ExitCode.USAGE  # Typer has printed the help already; as in click, a bare command is a usage error
    if is_click(exc, "ClickException"):
        ctx = getattr(exc, "ctx", None)
        error_line(click_message(exc, ctx.command_path if ctx is not None else None, group, argv))
        return ExitCode.USAGE if is_click(exc, "UsageError") else ExitCode.FAILURE
    if isinstance(exc, (typer.Abort, KeyboardInterrupt)):
        error_line(INTERRUPTED)
        return ExitCode.INTERRUPTED
    if isinstance(exc, BrokenPipeError):  # the reader of stdout went away (| head): not an error
        silence_stdout()
        return ExitCode.OK
    if _debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if isinstance(exc, MhaError):
        error_line(exc.for_cli())
        return exc.exit_code
    if isinstance(exc, MemoryError):
        error_line("ran out of memory; use a shorter text, a smaller --max-tokens (figures grow with it), "
                   "fewer --heads or a smaller --d-model.")
        return ExitCode.FAILURE
    if isinstance(exc, OSError):
        error_line(_os_error_line(exc))
        return ExitCode.FAILURE
    if interrupted:
        # A Ctrl-C swallowed half-way through a library left it confused: that is the interruption showing.
        error_line(INTERRUPTED)
        return ExitCode.INTERRUPTED
    error_line(f"unexpected {type(exc).__name__}: {exc}",
               f"(this is a bug; rerun as '{debug_command(argv, group)}' and report the traceback)")
    return ExitCode.FAILURE


def debug_command(argv: list[str], group: Any) -> str:
    """The run again with --debug where it works, before the command: ``mha --debug explain …``."""
    commands = getattr(group, "commands", {}) or {}
    name = next((arg for arg in argv if arg in commands), None)
    return f"mha --debug {name} …" if name else "mha --debug …"


@contextmanager
def _noting_swallowed_interrupts() -> Iterator[list[bool]]:
    """Note in the list a Ctrl-C that landed in a ``__del__`` (Python would print "Exception ignored in …");
    SIGTERM and SIGHUP are noted by :mod:`mhacli.io.cleanup` itself."""
    swallowed: list[bool] = []
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            swallowed.append(True)
        elif not cleanup.is_noise(unraisable):  # cleanup.received() tells how a signal ended the run
            previous_hook(unraisable)

    sys.unraisablehook = hook
    try:
        yield swallowed
    finally:
        sys.unraisablehook = previous_hook


def _show_help(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        typer.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


def _help_placeholder(
    show_help: Annotated[bool, typer.Option("-h", "--help", callback=_show_help, is_eager=True, expose_value=False,
                                            metavar=FLAG, help="Show this message and exit.")] = False,
) -> None:
    """Never run: Typer turns its one parameter into the -h/--help option of every command."""


@cache
def _help_option() -> Any:
    """-h/--help with ``metavar=FLAG`` (click's own shows ``<bool>``), built by Typer from :func:`_help_placeholder`;
    one object for every command, since click orders the eager callbacks by identity."""
    holder = typer.Typer(add_completion=False, add_help_option=False)
    holder.command()(_help_placeholder)
    return typer.main.get_command(holder).params[0]


NARROW_HELP = 60  # below this many columns, Typer's boxed help cuts option names and help to "…"
_MARKUP = re.compile(r"\[/?(?:bold|dim|italic)\]")  # the only markup our help texts use


class _OwnHelp:
    """A command with :func:`_help_option` as -h/--help, whose help stays whole on a narrow terminal: below
    :data:`NARROW_HELP` columns, click's own layout instead of Typer's boxes, without the markup."""

    add_help_option: bool
    typer_class: type  # the Typer class this is mixed into (click's own class is its base)

    def get_help_option(self, ctx: Any) -> Any:
        if not self.add_help_option:
            return None
        return _help_option()

    def format_help(self, ctx: Any, formatter: Any) -> None:
        columns = shutil.get_terminal_size().columns  # COLUMNS, else the terminal's, as Rich reads it
        if columns >= NARROW_HELP:
            return super().format_help(ctx, formatter)  # type: ignore[misc]
        formatter.width = max(columns - 2, 20)  # click's own floor is 50 columns
        write_dl = formatter.write_dl  # an option's help under its name once the name is longer than this
        formatter.write_dl = lambda rows, col_max=30, col_spacing=2: write_dl(rows, min(col_max, 16), col_spacing)
        click_class: Any = self.typer_class.__base__  # click's Command or Group, under Typer's
        click_class.format_help(self, ctx, formatter)
        formatter.buffer[:] = [_MARKUP.sub("", part) for part in formatter.buffer]


class MhaCommand(_OwnHelp, TyperCommand):
    """Every ``mha`` command: Typer's command with our -h/--help."""

    typer_class = TyperCommand


class MhaGroup(_OwnHelp, TyperGroup):
    """The ``mha`` group: the one way out of a run, as httpie's ``raw_main``. Whatever a command raises goes through
    :func:`report_error`, every temporary file still registered is removed, and the exit code says how it ended."""

    typer_class = TyperGroup

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             process: bool = False, **extra: Any) -> Any:
        """The run, then its exit code; ``process=True`` (the ``mha`` script): the process made safe first (streams,
        signal handlers, matplotlib's config folder) and ended after (signals ignored, temporary files removed)."""
        if process:
            from mhacli.io.environment import prepare_process

            prepare_process()  # done by the script's entry too (mhacli/__main__.py): doing it again changes nothing
        code: int = ExitCode.FAILURE
        try:
            code = self._run(args, prog_name, complete_var, windows_expand_args, extra)
        except cleanup.Terminated as ended:  # landed between the run's end and here
            code = ended.exit_code
        except KeyboardInterrupt:
            code = ExitCode.INTERRUPTED
        finally:
            if process:
                # Everything is written and reported by now: a signal that lands while Python shuts down
                # (joining worker threads) would only kill the process without its message; the matplotlib
                # config folder goes.
                from mhacli.io.environment import end_process

                end_process()
        code = _as_signalled(code)
        if standalone_mode:
            sys.exit(int(code))
        return int(code)

    def _run(self, args: Sequence[str] | None, prog_name: str | None, complete_var: str | None,
             windows_expand_args: bool, extra: dict[str, Any]) -> int:
        """The command itself, every way it can end mapped to an exit code (:func:`report_error`)."""
        global _debug
        _debug = False
        reset()
        cleanup.reset()
        tolerant_streams()
        argv = list(sys.argv[1:] if args is None else args)
        with _noting_swallowed_interrupts() as swallowed:
            code: int
            try:
                try:
                    rv = super().main(args=args, prog_name=prog_name or "mha", complete_var=complete_var,
                                      standalone_mode=False, windows_expand_args=windows_expand_args, **extra)
                    sys.stdout.flush()  # a closed pipe shows up here rather than at exit
                finally:
                    cleanup.remove_all()  # before any message: the message promises nothing was left behind
            except cleanup.Terminated as ended:  # SIGTERM, SIGHUP: unwound like Ctrl-C
                error_line(str(ended))
                code = ended.exit_code
            except Exception as exc:  # noqa: BLE001 - every failure becomes one line, never a traceback
                signum = cleanup.received()
                if signum is not None:
                    # A signal that a library swallowed: it removed the temporary files at once, and a writer
                    # then failed on its vanished file. Say what ended the run, not that.
                    error_line(INTERRUPTED if signum == signal.SIGINT else cleanup.message_for(signum))
                    code = cleanup.exit_code_for(signum)
                else:
                    code = report_error(exc, self, argv, bool(swallowed))
            except KeyboardInterrupt as exc:
                code = report_error(exc, self, argv, True)
            else:
                # Typer turns Ctrl-C into Exit(130) and returns exit codes in non-standalone mode.
                code = int(rv) if isinstance(rv, int) else ExitCode.OK
                if code == ExitCode.OK and swallowed:
                    code = ExitCode.INTERRUPTED  # the run finished, but Ctrl-C was pressed: say it was seen
                if code == ExitCode.INTERRUPTED:
                    error_line(INTERRUPTED)
        return code


def _as_signalled(code: int) -> int:
    """A signal swallowed on its way (inside a library, a destructor) still decides the exit code."""
    ended_by = cleanup.received()
    if ended_by is None or code not in (ExitCode.OK, ExitCode.FAILURE, ExitCode.INTERRUPTED):
        return code
    signalled = cleanup.exit_code_for(ended_by)
    if code != signalled:
        if code == ExitCode.OK:  # nothing was said yet
            error_line(cleanup.message_for(ended_by))
        code = signalled
    return code


# Typer's own completion options show '<bool>' in the help; ours (in _root) call the same callbacks.
# add_completion would also register Typer's shell classes (the _MHA_COMPLETE=complete_bash protocol).
completion_init()
app = typer.Typer(
    cls=MhaGroup,
    name="mha",
    help="Make multi-head attention visible: every step, every shape, every head.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for command in COMMANDS:
    app.command(cls=MhaCommand)(command)


def _version(value: bool) -> None:
    if value:
        console.print(f"mha (mhacli) {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True, metavar=FLAG,
                                          help="Show the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", metavar=FLAG,
                                        help="Show a traceback when something fails.")] = False,
    install_completion: Annotated[bool, typer.Option("--install-completion", callback=install_callback,
                                                     expose_value=False, metavar=FLAG,
                                                     help="Install completion for the current shell.")] = False,
    show_completion: Annotated[bool, typer.Option("--show-completion", callback=show_callback, expose_value=False,
                                                  metavar=FLAG, help="Show completion for the current shell, to "
                                                  "copy it or customize the installation.")] = False,
) -> None:
    """Make multi-head attention visible: every step, every shape, every head.

    Run [bold]mha explain "the cat sat on the mat"[/bold] to start.
    """
    global _debug
    _debug = debug


def main() -> None:
    """Entry point of the ``mha`` console script: the run as a process, ended in :meth:`MhaGroup.main`."""
    app(prog_name="mha", process=True)


__all__ = ["COMMANDS", "MhaGroup", "app", "main", "report_error"]

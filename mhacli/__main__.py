"""The ``mha`` script and ``python -m mhacli``: a command that will draw gets its drawers first, then the command
line is parsed and run (:func:`mhacli.cli.app.main`)."""

import sys


def main() -> None:
    """Fork the drawers of ``mha explain`` or ``mha train`` before typer, rich and numpy are imported, so that
    matplotlib is imported on the idle core while the rest of the command starts (:mod:`mhacli.io.ahead`), then
    run the command."""
    from mhacli.io import cleanup
    from mhacli.io.ahead import start_early
    from mhacli.io.environment import prepare_process

    prepare_process()  # the streams, the signal handlers and matplotlib's config folder, before any fork
    try:
        start_early(sys.argv[1:])

        from mhacli.cli.app import main as run

        run()  # ends in MhaGroup.main, which says how the run ended and exits
    except (cleanup.Terminated, KeyboardInterrupt) as ended:  # a signal while the command's modules still load
        _end(ended)


def _end(ended: BaseException) -> None:
    """One line and the shell's exit code for a signal that came before the command's own exit path was set up
    (the imports of typer, rich and numpy take a third of a second): never a traceback."""
    import signal

    from mhacli.io import cleanup
    from mhacli.io.environment import end_process

    end_process()  # as MhaGroup.main ends every run: signals ignored, drawers ended, temporaries removed
    signum = ended.signum if isinstance(ended, cleanup.Terminated) else signal.SIGINT
    try:
        sys.stderr.write(f"mha: error: {cleanup.message_for(signum)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(cleanup.exit_code_for(signum))


if __name__ == "__main__":
    main()

"""The ``mha`` script and ``python -m mhacli``: a command that will draw gets its drawers first, then the command
line is parsed and run (:func:`mhacli.cli.app.main`)."""

import sys


def main() -> None:
    """Fork the drawers of ``mha explain`` or ``mha train`` before typer, rich and numpy are imported, so that
    matplotlib is imported on the idle core while the rest of the command starts (:mod:`mhacli.io.ahead`), then
    run the command."""
    from mhacli.io.ahead import start_early
    from mhacli.io.environment import prepare_process

    prepare_process()  # the streams, the signal handlers and matplotlib's config folder, before any fork
    start_early(sys.argv[1:])

    from mhacli.cli.app import main as run

    run()


if __name__ == "__main__":
    main()

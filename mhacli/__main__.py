"""The ``mha`` script and ``python -m mhacli``: the command line run as a process (:func:`mhacli.cli.app.main`)."""

import sys


def main() -> None:
    """Make the process safe (streams, signal handlers), then load and run the command line. A Ctrl-C or SIGTERM
    while the command's modules still load (typer, rich and numpy take a third of a second) ends in one line."""
    from mhacli.io import cleanup

    try:
        from mhacli.io.environment import prepare_process

        prepare_process()
        from mhacli.cli.app import main as run

        run()  # ends in MhaGroup.main, which says how the run ended and exits
    except (cleanup.Terminated, KeyboardInterrupt) as ended:
        _end(ended)


def _end(ended: BaseException) -> None:
    """One line and the shell's exit code for a signal that came before the command's own exit path was set up."""
    import signal

    from mhacli.io import cleanup
    from mhacli.io.environment import end_process

    end_process()
    signum = ended.signum if isinstance(ended, cleanup.Terminated) else signal.SIGINT
    try:
        sys.stderr.write(f"mha: error: {cleanup.message_for(signum)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(cleanup.exit_code_for(signum))


if __name__ == "__main__":
    main()

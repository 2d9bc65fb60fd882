"""The ``mha`` script and ``python -m mhacli``: the command line run as a process (:func:`mhacli.cli.app.main`)."""

import signal
import sys


def main() -> None:
    """Make the process safe (streams, signal handlers), then load and run the command line. A Ctrl-C or SIGTERM
    while the command's modules still load (typer, rich and numpy take a third of a second) ends in one line."""
    try:
        from mhacli.io.environment import prepare_process

        prepare_process()
        from mhacli.cli.app import main as run

        run()  # ends in MhaGroup.main, which says how the run ended and exits
    except KeyboardInterrupt:
        _end(signal.SIGINT)
    except BaseException as ended:
        from mhacli.io.cleanup import Terminated

        if isinstance(ended, Terminated):
            _end(ended.signum)
        raise


def _end(signum: int) -> None:
    """One line and the shell's exit code for a signal that came before the command's own exit path was set up (not
    through :func:`mhacli.io.environment.end_process`: that module's import may be the one the signal cut short)."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # first: a second signal has nothing left to interrupt
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    from mhacli.io import cleanup

    cleanup.remove_all()
    try:
        sys.stderr.write(f"mha: error: {cleanup.message_for(signum)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(cleanup.exit_code_for(signum))


if __name__ == "__main__":
    main()

"""The command line: the only code that imports typer. It reads input, calls the core and the renderers."""

from mhacli.cli.app import app, main

__all__ = ["app", "main"]

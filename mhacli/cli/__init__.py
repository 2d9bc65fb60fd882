"""The command line: the only code that imports typer. It reads input, calls the pipeline and the renderers.

The app is :data:`mhacli.cli.app.app`; this package imports nothing, so a command module may import its siblings
through it without a circle."""

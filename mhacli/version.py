"""The package's version, in a module of its own that imports nothing: every room may read it."""

__version__ = "0.1.0"

"""mhacli: make multi-head attention visible, one step at a time.

The command line lives in :mod:`mhacli.cli.app`; the numbers come from
:func:`mhacli.run`, which returns one immutable :class:`mhacli.core.trace.Trace`.
``import mhacli`` stays cheap (no numpy) so that ``mha --help`` starts fast;
the numerical names are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "run", "Config", "Trace", "load_trace"]

if TYPE_CHECKING:  # pragma: no cover
    from mhacli.core.config import Config
    from mhacli.core.trace import Trace
    from mhacli.io.weights import run
    from mhacli.io.export import load_trace


def __getattr__(name: str) -> Any:
    # Lazy attributes (PEP 562): the CLI imports this package on every start.
    if name == "run":
        from mhacli.io.weights import run

        return run
    if name == "Trace":
        from mhacli.core.trace import Trace

        return Trace
    if name == "Config":
        from mhacli.core.config import Config

        return Config
    if name == "load_trace":
        from mhacli.io.export import load_trace

        return load_trace
    raise AttributeError(f"module 'mhacli' has no attribute {name!r}")

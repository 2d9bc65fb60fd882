"""The trace of a run made through the public API: ``mhacli.run(text, **options).trace``.

For the tests that read the core's arrays; the one assembler of a run is the pipeline (issue 30).
"""

from __future__ import annotations

from typing import Any

import mhacli
from mhacli.attention.trace import Trace


def run(text: str, **options: Any) -> Trace:
    """``text`` run through :func:`mhacli.run` under ``options``; its trace."""
    return mhacli.run(text, **options).trace

"""The ``--json`` documents' ``format_version`` and the JSON Schema shipped beside each (``*.schema.json``): change
a document's shape, raise its version and its schema together (a run's is :data:`mhacli.io.export.FORMAT_VERSION`).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

#: kind -> format_version of every --json document other than the trace's (``view``: mha show of your model's
#: attention; the ``bench-*`` kinds: mha bench --startup, --train, --tiles).
FORMAT_VERSIONS: dict[str, int] = dict.fromkeys(("view", "compare", "verify", "train", "samples", "shapes", "tiles",
                                                 "quiz", "bench", "bench-startup", "bench-train", "bench-tiles"), 1)
KINDS = ("trace", *FORMAT_VERSIONS)


def versioned(kind: str, document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with its ``format_version`` first (the trace's carries its own)."""
    return {"format_version": FORMAT_VERSIONS[kind], **document}


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema shipped for ``kind`` (one of :data:`KINDS`)."""
    if kind not in KINDS:
        raise ValueError(f"no schema for {kind!r}; one of: {', '.join(KINDS)}")
    text = (resources.files("mhacli.io") / f"{kind}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


__all__ = ["FORMAT_VERSIONS", "KINDS", "schema", "versioned"]

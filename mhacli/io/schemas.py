"""The JSON documents ``--json`` prints, and the JSON Schema shipped beside each (``mhacli/io/*.schema.json``).

Every document carries ``format_version``, and its schema says what that version holds. A run's document is
the trace document (:data:`mhacli.io.export.FORMAT_VERSION`); every other command's is named here. Change a
document's shape: raise its version and its schema together.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

#: kind -> format_version of every --json document other than the trace's.
FORMAT_VERSIONS: dict[str, int] = {
    "view": 1,  # mha show FILE.npz of your model's attention
    "compare": 1,
    "verify": 1,
    "train": 1,
    "samples": 1,
    "shapes": 1,
    "tiles": 1,  # mha tiles: one head in tiles of keys, one query row's record (issue 45)
    "quiz": 1,
    "bench": 1,
    "bench-startup": 1,
    "bench-train": 1,
    "bench-tiles": 1,  # mha bench --tiles: the memory of attention whole and in tiles (issue 45)
}
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

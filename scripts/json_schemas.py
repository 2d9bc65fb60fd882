"""Write the JSON Schema of every ``--json`` document but the trace's (``mhacli/io/<kind>.schema.json``).

    python scripts/json_schemas.py          # rewrite the schemas from the commands' real output
    python scripts/json_schemas.py --merge  # widen them by this machine's output (run once with PyTorch, once without)

Each schema is drafted from what the installed ``mha`` really prints for the
commands in tests/test_json_schemas.py (one or more per kind): every key seen
is required with the JSON type(s) seen, lists hold items of the union of the
shapes seen, ``format_version`` is fixed to :data:`mhacli.io.schemas.FORMAT_VERSIONS`.
A document that loses a key, changes a type or its version then fails the
test.  The trace's schema (``trace.schema.json``) is written by hand.

The bench documents differ with PyTorch installed (``machine.torch``, the torch
columns and ratios) and without (no ``machine.torch``, those numbers null): the
shipped schemas are the merge of both machines' output (``--merge``), so the
README's ``pytest`` passes on a newcomer's machine without PyTorch and on CI's with it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", list: "array",
         dict: "object"}


def _merge(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return b
    types = sorted(set(_types(a)) | set(_types(b)))
    out: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
    if "object" in types:
        props_a, props_b = a.get("properties", {}), b.get("properties", {})
        out["properties"] = {k: _merge(props_a.get(k), props_b.get(k, {})) if k in props_a and k in props_b
                             else props_a.get(k) or props_b.get(k) for k in {**props_a, **props_b}}
        req_a, req_b = a.get("required"), b.get("required")
        both = [k for k in (req_a or []) if k in (req_b or [])] if req_a is not None and req_b is not None else \
            (req_a if req_a is not None else req_b)
        if both is not None:
            out["required"] = sorted(both)
    if "array" in types and ("items" in a or "items" in b):
        out["items"] = _merge(a.get("items"), b["items"]) if "items" in b else a["items"]
    return out


def _types(s: dict[str, Any]) -> list[str]:
    t = s.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def infer(value: Any) -> dict[str, Any]:
    """The schema of one JSON value (integers are also numbers: a float column may hold 0)."""
    kind = TYPES[type(value)]
    if kind == "integer":
        return {"type": ["integer", "number"]} if not isinstance(value, bool) else {"type": "boolean"}
    if kind == "object":
        return {"type": "object", "properties": {k: infer(v) for k, v in value.items()}, "required": sorted(value)}
    if kind == "array":
        items: dict[str, Any] | None = None
        for v in value:
            items = _merge(items, infer(v))
        return {"type": "array", **({"items": items} if items is not None else {})}
    if kind == "number":
        return {"type": ["integer", "number"]}
    return {"type": kind}


def schema_of(kind: str, documents: list[dict[str, Any]]) -> dict[str, Any]:
    from mhacli.io.schemas import FORMAT_VERSIONS

    merged: dict[str, Any] | None = None
    for document in documents:
        merged = _merge(merged, infer(document))
    assert merged is not None
    merged["properties"]["format_version"] = {"const": FORMAT_VERSIONS[kind]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://github.com/mhacli/mhacli/blob/main/mhacli/io/{kind}.schema.json",
            "title": f"mha --json document: {kind}", **merged}


def _drafted(schema: dict[str, Any]) -> dict[str, Any]:
    """A shipped schema as the merge reads it: without its header and its fixed version."""
    out = {k: v for k, v in schema.items() if k not in ("$schema", "$id", "title")}
    out["properties"] = {k: v for k, v in out["properties"].items() if k != "format_version"}
    return out


def main(merge: bool = False) -> None:
    from test_json_schemas import COMMANDS, real_documents

    by_kind: dict[str, list[dict[str, Any]]] = {}
    for kind, _ in COMMANDS:
        by_kind.setdefault(kind, [])
    for kind, document in real_documents():
        by_kind[kind].append(document)
    for kind, documents in by_kind.items():
        if kind == "trace":  # written by hand
            continue
        path = ROOT / "mhacli" / "io" / f"{kind}.schema.json"
        drafted = schema_of(kind, documents)
        if merge and path.exists():
            merged = _merge(_drafted(json.loads(path.read_text(encoding="utf-8"))), _drafted(drafted))
            drafted = {**{k: drafted[k] for k in ("$schema", "$id", "title")}, **merged}
            drafted["properties"] = {"format_version": schema_of(kind, documents)["properties"]["format_version"],
                                     **merged["properties"]}
        path.write_text(json.dumps(drafted, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} from {len(documents)} document(s)")


if __name__ == "__main__":
    main(merge="--merge" in sys.argv[1:])

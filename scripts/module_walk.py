"""How often one run walks back into a module it has already visited (issue 30's measure of the layers).

Traces ``mha explain "the cat sat" --heads 4 --out DIR`` in-process with :func:`sys.setprofile`, from the
moment the explain command is entered until ``heads.png`` is written, and counts every call from one mhacli
module into another (a hop) that is at most DEPTH hops below the command.  A hop into a module the walk
has entered before is a return.  Prints: modules entered, hops, returns.

    python scripts/module_walk.py [DEPTH]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any


def walk(depth: int = 3) -> tuple[int, int, int]:
    """(modules entered, hops, returns to an already-visited module) for the explain -> heads.png walk."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    stack: list[tuple[int, str, int]] = []  # (frame id, module, hops from the command)
    visited: list[str] = []
    counts = {"hops": 0, "returns": 0, "on": False, "done": False}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if counts["done"] or event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("mhacli"):
            return
        if event == "call":
            if not counts["on"]:
                if module == "mhacli.cli.commands.run" and frame.f_code.co_name == "explain":
                    counts["on"] = True
                    stack.append((id(frame), module, 0))
                    visited.append(module)
                return
            caller, hops = (stack[-1][1], stack[-1][2]) if stack else (module, 0)
            if module != caller:
                hops += 1
                if hops <= depth:
                    counts["hops"] += 1
                    if module in visited:
                        counts["returns"] += 1
                    else:
                        visited.append(module)
            stack.append((id(frame), module, hops))
        elif stack and stack[-1][0] == id(frame):
            stack.pop()
            if frame.f_code.co_name == "save" and str(frame.f_locals.get("path", "")).endswith("heads.png"):
                counts["done"] = True

    with tempfile.TemporaryDirectory() as out:
        sys.setprofile(profile)
        try:
            result = CliRunner().invoke(app, ["explain", "the cat sat", "--heads", "4", "--quiet", "--out",
                                              str(Path(out) / "figures"), "--dpi", "30"])
        finally:
            sys.setprofile(None)
    assert result.exit_code == 0, result.output
    return len(visited), int(counts["hops"]), int(counts["returns"])


if __name__ == "__main__":
    modules, hops, returns = walk(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    print(f"modules entered: {modules}, hops: {hops}, returns to a visited module: {returns}")

"""Keep the README's example outputs real: regenerate them, or check they are current.

Each block in README.md that starts with a line ``<!-- output: COMMAND -->``
and ends with ``<!-- /output -->`` holds the real output of COMMAND, run in
one scratch folder in order (so a later block can use a file an earlier one
wrote), with NO_COLOR=1 and an 80-column terminal.

    python tests/readme_outputs.py          # rewrite README.md in place
    pytest tests/test_docs.py               # fails when a block is stale
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- output: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- /output -->)", re.S)


def _mha() -> list[str]:
    exe = Path(sys.executable).parent / "mha"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mhacli"]


def run_command(cmd: str, cwd: Path) -> str:
    """Output of one README command (stdout then stderr), as a reader's terminal shows it."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "80", "LINES": "50", "TERM": "dumb"}
    env.pop("FORCE_COLOR", None)
    outputs = []
    for part in cmd.split(" && "):
        argv = shlex.split(part)
        redirect = None
        if ">" in argv:
            redirect = argv.index(">")
            argv = argv[:redirect]
        if argv[0] == "mha":
            argv = _mha() + argv[1:]
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        if redirect is None:
            outputs.append(p.stdout + p.stderr)
    text = "".join(outputs)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n") + "\n"


def render(readme: str) -> str:
    """README text with every output block regenerated."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)

        def fill(m: re.Match) -> str:
            body = run_command(m["cmd"], cwd)
            return f"{m.group(1)}```console\n$ {m['cmd']}\n{body}```\n{m.group(4)}"

        return BLOCK.sub(fill, readme)


if __name__ == "__main__":
    README.write_text(render(README.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated {README}")

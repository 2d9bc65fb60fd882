"""Docs that cannot rot: commands and options documented, examples real, snippets runnable, links alive."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _all_docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOCS)


def _commands():
    from mhacli.cli.app import app
    from typer.main import get_command

    group = get_command(app)
    return group, {name: cmd for name, cmd in group.commands.items()}


def test_every_command_and_option_is_documented():
    text = _all_docs()
    group, commands = _commands()
    missing = []
    for name, cmd in commands.items():
        if f"mha {name}" not in text:
            missing.append(f"mha {name}")
        for param in cmd.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help" and opt not in text:
                    missing.append(f"mha {name} {opt}")
    assert not missing, f"not mentioned in README.md or docs/*.md: {missing}"


def test_readme_first_screen_has_exactly_two_setup_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:20])
    blocks = re.findall(r"```bash\n(.*?)```", first_screen, re.S)
    assert len(blocks) == 2
    assert blocks[0].strip().startswith("pip install . && mha explain")
    assert blocks[1].strip() == 'pip install ".[test]" && pytest'
    assert 'pip install ".[test]" && pytest' in (ROOT / ".ci" / "run").read_text()


@pytest.mark.torch_aware
@pytest.mark.slow
def test_readme_outputs_are_current():
    sys.path.insert(0, str(Path(__file__).parent))
    import readme_outputs

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    fresh = readme_outputs.render(readme)
    try:
        import torch  # noqa: F401
    except ImportError:
        # verify's output depends on whether PyTorch is installed (the README shows it with);
        # compare everything else.
        verify_block = re.compile(r"<!-- output: [^\n]*mha verify.*?<!-- /output -->", re.S)
        readme, fresh = verify_block.sub("", readme), verify_block.sub("", fresh)
    # verify's largest |diff| is round-off whose last digits depend on the CPU and its BLAS kernel
    # (the README's 5.55e-16 was 8.88e-16 on another machine); the rest of each row — reference,
    # array, and "yes" (within the tolerance) — must still match.
    round_off = re.compile(r"\d\.\d\de[-+]\d\d(?=\s+yes$)", re.M)
    readme, fresh = round_off.sub("<round-off>", readme), round_off.sub("<round-off>", fresh)
    assert fresh == readme, "README outputs are stale: run `python tests/readme_outputs.py`"


def test_steps_page_snippet_reproduces_the_output(tmp_path):
    page = (ROOT / "docs" / "steps.md").read_text(encoding="utf-8")
    snippet = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    from mhacli import run
    from mhacli.io.export import save_npz

    save_npz(run("the cat sat on the mat", causal=True), tmp_path / "cat.npz")
    p = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert float(p.stdout.strip()) < 1e-12


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_relative_links_and_images_exist(page):
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) + re.findall(r'src="([^"]+)"', text):
        if re.match(r"[a-z]+:", target):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_figures_page_compare_output_is_the_commands_own(tmp_path, monkeypatch):
    """docs/figures.md quotes `mha compare "the cat sat on the mat" --heads 4`: its block is the real output's
    first lines, as an 80-column terminal without colour shows them (in-process: each command sizes its
    consoles from the COLUMNS it runs with)."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    page = (ROOT / "docs" / "figures.md").read_text(encoding="utf-8")
    cmd = 'mha compare "the cat sat on the mat" --heads 4'
    quoted = page.split(f"```bash\n{cmd}\n```\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    env = {"NO_COLOR": "1", "COLUMNS": "80", "TERM": "dumb", "FORCE_COLOR": None}
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["compare", "the cat sat on the mat", "--heads", "4", "--no-plots"], env=env)
    assert out.exit_code == 0, out.stderr
    real = [line.rstrip() for line in out.stdout.splitlines()]
    assert len(quoted) > 5 and real[:len(quoted)] == quoted


def test_every_page_gives_the_lesson_plan_its_own_length():
    """The lesson plan's title says how long the class is; README and the lesson map call it the same."""
    title = (ROOT / "docs" / "lesson-plan.md").read_text(encoding="utf-8").splitlines()[0]
    minutes = re.search(r"(\d+)-minute", title)[1]
    said = {(page.name, m) for page in DOCS for m in re.findall(r"(\d+)-minute (?:class|lesson plan)",
                                                                  page.read_text(encoding="utf-8"))}
    assert ("README.md", minutes) in said and ("lesson-map.md", minutes) in said
    assert {m for _, m in said} == {minutes}, said

"""The package page and the command line's conventions (issue 22, item 5).

Metadata a package index shows (Project-URLs, classifiers), README links that
work off the repository, ``-V``, help without stray metavars, and shell
completion of the options that take a fixed set of values.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MHA = Path(sys.executable).with_name("mha")
REPO = "https://github.com/mhacli/mhacli"
RAW = "https://raw.githubusercontent.com/mhacli/mhacli/main/"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_classifiers_name_the_python_versions_typing_topic_and_audience():
    classifiers = set(_project()["classifiers"])
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert {"Typing :: Typed", "Intended Audience :: Education", "Topic :: Education"} <= classifiers
    assert (ROOT / "mhacli" / "py.typed").exists()  # what 'Typing :: Typed' promises
    assert _project()["requires-python"] == ">=3.10"


def test_project_urls_point_at_one_repository():
    urls = _project()["urls"]
    assert {"Homepage", "Source", "Issues", "Documentation", "Changelog"} <= set(urls)
    assert all(u.startswith(REPO) for u in urls.values())


def test_readme_links_and_images_are_absolute_and_name_files_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    assert targets
    for target in targets:
        if target.startswith("#"):
            continue
        assert re.match(r"https?://", target), f"relative link {target} breaks on a package index page"
        for prefix in (RAW, f"{REPO}/blob/main/", f"{REPO}/tree/main/"):
            if target.startswith(prefix):
                local = target[len(prefix):].split("#")[0]
                assert (ROOT / local).exists(), f"README links to missing {local}"


def test_dash_capital_v_is_version():
    from typer.testing import CliRunner

    from mhacli import __version__
    from mhacli.cli.app import app

    for flag in ("-V", "--version"):
        result = CliRunner().invoke(app, [flag])
        assert result.exit_code == 0 and result.stdout.strip() == f"mha (mhacli) {__version__}"


@pytest.mark.parametrize("command", [[], ["explain"], ["show"], ["train"], ["bench"], ["quiz"]])
def test_help_shows_no_stray_metavar_on_our_own_options(command):
    """No option shows '<bool>' or 'BOOLEAN': -h/--help and the completion options are declared as ours are."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    assert "--help" in result.stdout and "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout


def _complete(words: str, cwd: Path) -> list[str]:
    env = {**os.environ, "_MHA_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    proc = subprocess.run([str(MHA)], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.slow
def test_shell_completion_offers_the_values(tmp_path):
    from mhacli.cli.options import TASK_NAMES
    from mhacli.attention.config import TOKENIZERS, WEIGHT_KINDS
    from mhacli.io.samples import sample_names

    (tmp_path / "enc.pt").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    assert _complete("mha explain --sample ", tmp_path) == sample_names()
    assert _complete("mha explain --sample ca", tmp_path) == [n for n in sample_names() if n.startswith("ca")]
    assert _complete("mha explain --tokenizer ", tmp_path) == list(TOKENIZERS)
    assert _complete("mha explain --weights ", tmp_path) == [*WEIGHT_KINDS, "enc.pt"]
    assert _complete("mha train --task ", tmp_path) == list(TASK_NAMES)


@pytest.mark.slow
def test_the_built_package_passes_twine_check_and_the_readme_renders(tmp_path):
    for module in ("build", "twine", "readme_renderer"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install build twine readme_renderer)")
    if shutil.which("git") is None:
        pytest.skip("git is needed to copy the source tree")
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    dists = sorted(str(p) for p in tmp_path.iterdir() if p.suffix in (".whl", ".gz"))
    assert len(dists) == 2, dists
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *dists], capture_output=True,
                             text=True, timeout=300)
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr
    rendered = subprocess.run([sys.executable, "-m", "readme_renderer", str(ROOT / "README.md"), "-o",
                               str(tmp_path / "readme.html")], capture_output=True, text=True, timeout=300)
    assert rendered.returncode == 0, rendered.stderr
    html = (tmp_path / "readme.html").read_text(encoding="utf-8")
    assert f'src="{RAW}docs/img/grammar-magnifiers.png"' in html
